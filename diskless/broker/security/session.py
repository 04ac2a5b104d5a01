"""What one connection knows of its peer: the listener it came in on, its address, and who it
is (Kafka's KafkaPrincipal) once authenticated.

The TCP shell makes one `Session` per connection and sets it in `SESSION` in the connection's
task, so that every handler of that connection's requests sees it. Only that task touches it.

SASL states, as Kafka's SaslServerAuthenticator has them: a SASL listener's connection starts
in HANDSHAKE (ApiVersions and SaslHandshake served, nothing else), moves to AUTHENTICATE once a
mechanism is agreed (SaslAuthenticate served), and to COMPLETE when the mechanism succeeded;
from then on every API is served. A failure makes it FAILED: the answer is sent, then the
connection closed. A listener without SASL starts COMPLETE.

Re-authentication (KIP-368). A client that authenticated with SaslAuthenticate v1 or later
may send SaslHandshake again on its COMPLETE connection: the session goes through HANDSHAKE and
AUTHENTICATE once more, keeping its principal, and must end as the same principal with the same
mechanism (else it FAILS). With connections.max.reauth.ms > 0 such a client is told a
session_lifetime_ms when it authenticates, and its session expires that long after: from then
on only SaslHandshake (a re-authentication) is served; any other request closes the connection
unanswered, as Kafka's SocketServer does with an expired channel. Clients on SaslAuthenticate v0
cannot re-authenticate, are told no lifetime and never expire (Kafka's rule). Times are
milliseconds of a monotonic clock the caller passes in (`now_ms`).
"""

from __future__ import annotations

import contextvars
import enum
from dataclasses import dataclass, field
from typing import Any

from .config import ListenerSecurity

ANONYMOUS = "User:ANONYMOUS"

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(slots=True, eq=False)
class Session:
    listener: ListenerSecurity
    client_host: str  # "127.0.0.1"
    client_port: int
    principal: str = ANONYMOUS
    state: SaslState = SaslState.COMPLETE
    mechanism: str | None = None
    exchange: Any = None  # the mechanism's state between two SaslAuthenticate requests (sasl.py)
    close_after_response: bool = False  # set with the answer to a failed authentication
    user: str | None = field(default=None)  # the SASL user name, once known (for log lines)
    reauthentication_supported: bool = False  # authenticated with SaslAuthenticate v1+ (KIP-368)
    expires_ms: int | None = None  # when the authenticated session expires (monotonic ms); None: never
    reauthenticating_from: tuple[str, str] | None = None  # (principal, mechanism) while re-authenticating

    @classmethod
    def open(cls, listener: ListenerSecurity, client_host: str, client_port: int, tls_principal: str | None = None) -> Session:
        session = cls(listener, client_host, client_port)
        if listener.uses_sasl:
            session.state = SaslState.HANDSHAKE
        elif tls_principal is not None:
            session.principal = tls_principal
        return session

    def may_serve(self, api_key: int) -> bool:
        """Whether a request of `api_key` may be served in the current state."""
        if self.state is SaslState.COMPLETE:
            return True
        if self.state is SaslState.HANDSHAKE:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        if self.state is SaslState.AUTHENTICATE:
            return api_key == SASL_AUTHENTICATE
        return False

    def may_reauthenticate(self) -> bool:
        """Whether a SaslHandshake now starts a re-authentication (KIP-368)."""
        return self.state is SaslState.COMPLETE and self.reauthentication_supported

    def begin_reauthentication(self) -> None:
        assert self.mechanism is not None
        self.reauthenticating_from = (self.principal, self.mechanism)
        self.state = SaslState.HANDSHAKE

    def authenticated(self, user: str, supports_reauthentication: bool, max_reauth_ms: int, now_ms: int) -> int:
        """The mechanism succeeded for `user`: the session is COMPLETE as User:`user`. Returns the
        session_lifetime_ms to answer (0: none). Raises AuthenticationFailed when a
        re-authentication ends as another principal or with another mechanism."""
        from .sasl import AuthenticationFailed

        principal = f"User:{user}"
        if self.reauthenticating_from is not None:
            previous_principal, previous_mechanism = self.reauthenticating_from
            if principal != previous_principal:
                raise AuthenticationFailed(f"cannot change principals during re-authentication from {previous_principal}: {principal}", user)
            if self.mechanism != previous_mechanism:
                raise AuthenticationFailed(f"cannot change mechanisms during re-authentication from {previous_mechanism}: {self.mechanism}", user)
        self.state = SaslState.COMPLETE
        self.exchange = None
        self.principal = principal
        self.reauthenticating_from = None
        self.reauthentication_supported = supports_reauthentication
        lifetime_ms = max_reauth_ms if supports_reauthentication and max_reauth_ms > 0 else 0
        self.expires_ms = now_ms + lifetime_ms if lifetime_ms else None
        return lifetime_ms

    def expired_for(self, api_key: int, now_ms: int) -> int | None:
        """How long ago (ms, 0 or more) the session expired, if that refuses a request of
        `api_key` now; None if the request may go on. A SaslHandshake (a re-authentication)
        and the steps of a re-authentication in progress are never refused for expiry."""
        if self.expires_ms is None or now_ms < self.expires_ms:
            return None
        if api_key == SASL_HANDSHAKE or self.state is not SaslState.COMPLETE:
            return None
        return now_ms - self.expires_ms

    @property
    def client(self) -> str:
        return f"{self.client_host}:{self.client_port}"


# The session of the connection whose request is being handled; the default is what a test
# driving handlers directly, or an in-process caller, gets: an anonymous PLAINTEXT peer.
SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar(
    "session", default=Session(ListenerSecurity(), "127.0.0.1", 0)
)
