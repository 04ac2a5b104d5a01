"""The SASL mechanisms of a server, sans-IO: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (KIP-84,
diskless.wire.scram). Each step takes the client's token and the stored credentials it needs,
and gives the server's token, or raises `AuthenticationFailed`.

PLAIN checks the password against the same stored SCRAM credentials SCRAM uses (either
mechanism): one user database, managed with AlterUserScramCredentials (`diskless users`).
Kafka's own PLAIN reads a JAAS file instead; keeping one store means a user created once
logs in with every mechanism.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from diskless.wire.scram import ClientFirst, ScramCredential, ScramError, ScramServer, parse_client_first, password_matches


class AuthenticationFailed(Exception):
    """A login that did not succeed; `reason` is for the log, never for the client."""

    def __init__(self, reason: str, user: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.user = user


@dataclass(frozen=True, slots=True)
class PlainToken:
    user: str
    password: str


def parse_plain(token: bytes) -> PlainToken:
    """authzid NUL authcid NUL passwd (RFC 4616); an authzid other than the user is refused."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailed("malformed PLAIN token")
    try:
        authzid, user, password = (part.decode("utf-8") for part in parts)
    except UnicodeDecodeError:
        raise AuthenticationFailed("PLAIN token is not UTF-8") from None
    if not user or not password:
        raise AuthenticationFailed("empty user name or password in PLAIN token", user or None)
    if authzid and authzid != user:
        raise AuthenticationFailed(f"authorization id {authzid!r} differs from the user", user)
    return PlainToken(user, password)


def check_plain(token: PlainToken, credentials: Sequence[ScramCredential]) -> None:
    if not credentials:
        raise AuthenticationFailed("unknown user", token.user)
    if not password_matches(credentials[0], token.password):
        raise AuthenticationFailed("wrong password", token.user)


def scram_first(token: bytes) -> ClientFirst:
    try:
        first = parse_client_first(token)
    except ScramError as exc:
        raise AuthenticationFailed(exc.reason) from None
    if first.token_auth:
        raise AuthenticationFailed("delegation tokens are not supported", first.user)
    return first


def scram_start(mechanism: str, first: ClientFirst, credential: ScramCredential | None) -> tuple[ScramServer, bytes]:
    if credential is None:
        raise AuthenticationFailed("unknown user", first.user)
    server = ScramServer(mechanism)
    return server, server.start(first, credential)


def scram_finish(server: ScramServer, token: bytes, user: str) -> bytes:
    try:
        return server.finish(token)
    except ScramError as exc:
        raise AuthenticationFailed("wrong password" if exc.reason == "invalid proof" else exc.reason, user) from None
