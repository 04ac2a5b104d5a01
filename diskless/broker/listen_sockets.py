"""The sockets of the TCP shell's listeners and the address lookups it makes: blocking calls,
made when a listener starts or a setting is applied, never per connection."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from typing import Any

from .connection_limits import resolve_per_ip_overrides

log = logging.getLogger(__name__)


def resolved_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """max.connections.per.ip.overrides by address. Host names are looked up here, once, when
    the setting is applied (as Kafka's InetAddress.getByName; a blocking lookup, only for
    names); a name that does not resolve is left out, with a warning."""

    def lookup(host: str) -> list[str]:
        try:
            return sorted({info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
        except OSError:
            return []

    by_address, unresolved = resolve_per_ip_overrides(overrides, lookup)
    for host in unresolved:
        log.warning("max.connections.per.ip.overrides: cannot resolve %s; its override is not applied", host)
    return by_address


def listen_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address `host` resolves to, as asyncio.start_server binds
    them (reuse_address, backlog 1024), non-blocking, for the shell's own accept loop."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, type_, proto, _name, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, type_, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # one port for every address of the listener
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(1024)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets
