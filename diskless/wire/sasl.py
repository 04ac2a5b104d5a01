"""The client's side of a SASL login as Kafka carries it in SaslAuthenticate's auth_bytes:
PLAIN (RFC 4616) or SCRAM-SHA-256/512 (scram.py). Pure: a generator whose every yielded token
is to be sent, the server's answer sent back in; it returns once the login is complete, and
raises ScramError when the server's SCRAM answer does not check out.

    exchange = client_exchange("SCRAM-SHA-512", "alice", "secret")
    token = next(exchange)
    while True:
        answer = await send(token)          # SaslAuthenticate(auth_bytes=token).auth_bytes
        try:
            token = exchange.send(answer)
        except StopIteration:
            break
"""

from __future__ import annotations

from collections.abc import Generator

from .scram import ScramClient


def client_exchange(mechanism: str, user: str, password: str) -> Generator[bytes, bytes, None]:
    if mechanism == "PLAIN":
        yield b"\0" + user.encode() + b"\0" + password.encode()
        return
    client = ScramClient(mechanism, user, password)
    server_first = yield client.first()
    server_final = yield client.final(server_first)
    client.verify(server_final)
