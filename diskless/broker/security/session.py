"""What one connection knows of its peer: the listener it came in on, its address, and who it
is (Kafka's KafkaPrincipal) once authenticated.

The TCP shell makes one `Session` per connection and sets it in `SESSION` in the connection's
task, so that every handler of that connection's requests sees it. Only that task touches it.

SASL states, as Kafka's SaslServerAuthenticator has them: a SASL listener's connection starts
in HANDSHAKE (ApiVersions and SaslHandshake served, nothing else), moves to AUTHENTICATE once a
mechanism is agreed (SaslAuthenticate served), and to COMPLETE when the mechanism succeeded;
from then on every API is served. A failure makes it FAILED: the answer is sent, then the
connection closed. A listener without SASL starts COMPLETE.
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

    @property
    def client(self) -> str:
        return f"{self.client_host}:{self.client_port}"


# The session of the connection whose request is being handled; the default is what a test
# driving handlers directly, or an in-process caller, gets: an anonymous PLAINTEXT peer.
SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar(
    "session", default=Session(ListenerSecurity(), "127.0.0.1", 0)
)
