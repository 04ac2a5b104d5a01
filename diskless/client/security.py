"""Client-side security: TLS and SASL (PLAIN, SCRAM-SHA-256/512) for a connection, with settings
in Kafka's client names, as a `--command-config` properties file gives them:

    security.protocol=SASL_SSL              PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    sasl.mechanism=SCRAM-SHA-512            PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    sasl.username=alice / sasl.password=... (or sasl.jaas.config=... username="alice" password="...";)
    ssl.truststore.location=ca.pem          PEM CA file (ssl.ca.location also works)
    ssl.keystore.location=client.pem        PEM certificate (and key, unless ssl.key.location)
    ssl.key.password=...                    the key's password, if it is encrypted
    ssl.endpoint.identification.algorithm=  empty: do not check the broker's host name

or built directly with the same names in snake case:

    security = ClientSecurity(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                              sasl_username="alice", sasl_password="...", ssl_cafile="ca.pem")
    Producer(..., security=security); Consumer(..., security=security); Admin(..., security=security)

All three hand it to their `Cluster`, which opens every connection through `Connection.open`:
one place sets up TLS and SASL. The SASL exchange runs right after ApiVersions on every new
connection (KIP-152: SaslHandshake v1, then SaslAuthenticate); a refusal raises the broker's
error (SaslAuthenticationFailedError, not retried) from the client's start.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from diskless.wire import request_type
from diskless.wire.sasl import client_exchange
from diskless.wire.scram import MECHANISMS, ScramError

from .errors import KafkaError, check

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class SecurityConfigError(ValueError):
    pass


class AuthenticationError(KafkaError):
    """The SASL exchange failed on our side (the broker's own refusals are its error codes)."""


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    ssl_key_password: str | None = None

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> ClientSecurity:
        p = {k.strip(): v.strip() for k, v in properties.items()}
        protocol = p.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        mechanism = p.get("sasl.mechanism", p.get("sasl.mechanisms", "PLAIN")).upper()
        if mechanism != "PLAIN" and mechanism not in MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, not {mechanism!r}")
        username, password = p.get("sasl.username"), p.get("sasl.password")
        jaas = p.get("sasl.jaas.config")
        if jaas and username is None:
            found = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', jaas))
            username, password = found.get("username"), found.get("password")
        if protocol.startswith("SASL") and (not username or password is None):
            raise SecurityConfigError("SASL needs sasl.username and sasl.password (or sasl.jaas.config)")
        return cls(
            protocol, mechanism, username, password,
            p.get("ssl.truststore.location") or p.get("ssl.ca.location"),
            p.get("ssl.keystore.location") or p.get("ssl.certificate.location"),
            p.get("ssl.key.location"),
            p.get("ssl.endpoint.identification.algorithm", "https").lower() == "https",
            p.get("ssl.key.password"),
        )  # fmt: skip

    @classmethod
    def from_file(cls, path: str | Path) -> ClientSecurity:
        """A Java-style properties file (key=value lines, # comments), as --command-config takes."""
        properties: dict[str, str] = {}
        for line in Path(path).read_text().splitlines():
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                key, _sep, value = line.partition(":")
            properties[key.strip()] = value.strip()
        return cls.from_properties(properties)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.uses_tls:
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        context.check_hostname = self.ssl_check_hostname
        if not self.ssl_check_hostname and self.ssl_cafile is None:
            context.verify_mode = ssl.CERT_NONE
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, self.ssl_key_password)
        return context


class _Requester(Protocol):
    api_versions: dict[int, tuple[int, int]]

    async def request(self, request: Any, *, timeout_ms: int | None = None) -> Any: ...


async def authenticate(connection: _Requester, security: ClientSecurity, host: str, port: int) -> int:
    """Run the SASL exchange on a fresh connection (after ApiVersions), or again on an
    authenticated one (KIP-368 re-authentication). Returns the session_lifetime_ms the broker
    answered (0: the session does not expire)."""
    handshake_range = connection.api_versions.get(SASL_HANDSHAKE)
    authenticate_range = connection.api_versions.get(SASL_AUTHENTICATE)
    if handshake_range is None or handshake_range[1] < 1 or authenticate_range is None:
        raise AuthenticationError(f"broker {host}:{port} does not speak SaslHandshake v1 and SaslAuthenticate")
    mechanism = security.sasl_mechanism
    handshake = await connection.request(request_type(SASL_HANDSHAKE, 1)(mechanism=mechanism))
    check(handshake.error_code, f"mechanism {mechanism}; the broker enables {', '.join(handshake.mechanisms)}", host=host, port=port)
    version = min(2, authenticate_range[1])
    message = request_type(SASL_AUTHENTICATE, version)

    lifetime_ms = 0

    async def step(token: bytes) -> bytes:
        nonlocal lifetime_ms
        answer = await connection.request(message(auth_bytes=token))
        check(answer.error_code, answer.error_message, host=host, port=port)
        lifetime = getattr(answer, "session_lifetime", None)  # v1+ (KIP-368)
        lifetime_ms = 0 if lifetime is None else int(lifetime.total_seconds() * 1000)
        return answer.auth_bytes

    exchange = client_exchange(mechanism, security.sasl_username or "", security.sasl_password or "")
    try:
        token = next(exchange)
        while True:
            answer = await step(token)
            try:
                token = exchange.send(answer)
            except StopIteration:
                return lifetime_ms
    except ScramError as exc:
        raise AuthenticationError(f"SCRAM with {host}:{port} failed: {exc.reason}") from None
