"""BrokerSecurity: the async shell handlers ask about authentication and authorisation.

It holds the ACL bindings (read from the metadata store at start, after every change made
through this broker, and every `acl_refresh_interval_ms` for changes made through others) in
the sans-IO `Authorizer`, and reads SCRAM credentials from the store at each login. Decisions
are about the current connection's `Session` (session.py).

Without an authorizer configured every request is allowed, as in Kafka without
`authorizer.class.name`. Only the event loop's tasks call this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from diskless.wire import ProtocolError
from diskless.wire.scram import ScramCredential, password_matches
from metadata import MetadataStore

from ..network_metrics import FAILED_AUTHENTICATIONS, FAILED_REAUTHENTICATIONS
from .authorizer import (
    CLUSTER, CLUSTER_NAME, CREATE, GROUP, OPERATIONS, SUPPORTED_OPERATIONS, TOPIC, TRANSACTIONAL_ID, Authorizer,
)  # fmt: skip
from .errors import (
    AuthorizationFailed, ClusterAuthorizationFailed, GroupAuthorizationFailed, TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)  # fmt: skip
from .config import SecurityConfig
from .sasl import AuthenticationFailed
from .session import SESSION, Session

log = logging.getLogger("diskless.broker.security")

ALL_OPERATIONS_UNKNOWN = -2147483648  # Kafka's "not asked for" authorized-operations value


class NotAuthenticated(ProtocolError):
    """A request other than ApiVersions / SaslHandshake / SaslAuthenticate before the connection
    authenticated: Kafka closes such a connection (IllegalSaslStateException)."""

    def __init__(self, api_key: int, api_version: int, state: str) -> None:
        super().__init__(f"request before SASL authentication completed (state {state})")
        self.api_key = api_key
        self.api_version = api_version


class SessionExpired(ProtocolError):
    """A request other than SaslHandshake on a connection whose SASL session outlived its
    session_lifetime_ms without re-authenticating (KIP-368): Kafka closes such a connection
    without answering ("Disconnecting expired channel")."""

    def __init__(self, api_key: int, api_version: int, expired_ms: int, max_reauth_ms: int) -> None:
        # One text for every such close, so that the TCP shell's rate-limited log line counts them.
        super().__init__(f"SASL session expired without re-authentication (connections.max.reauth.ms={max_reauth_ms})")
        self.api_key = api_key
        self.api_version = api_version
        self.expired_ms = expired_ms


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class BrokerSecurity:
    def __init__(
        self, config: SecurityConfig, sleep: Callable[[float], object] = asyncio.sleep, clock: Callable[[], int] = _monotonic_ms
    ) -> None:
        self.config = config
        self.now_ms = clock  # monotonic milliseconds, for session lifetimes (KIP-368)
        self.store: MetadataStore | None = None
        self.authorizer = (
            Authorizer(config.super_users, config.allow_everyone_if_no_acl_found) if config.authorizer else None
        )
        self._sleep = sleep
        self._refresh: asyncio.Task[None] | None = None

    async def start(self, store: MetadataStore) -> None:
        self.store = store
        if self.authorizer is not None:
            await self.reload_acls()
            self._refresh = asyncio.create_task(self._refresh_loop(), name="acl-refresh")

    async def stop(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresh
            self._refresh = None

    async def reload_acls(self) -> None:
        if self.authorizer is not None and self.store is not None:
            if self.authorizer.replace(await self.store.list_acls()):
                log.debug("ACLs now %d bindings", len(self.authorizer.bindings))

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.acl_refresh_interval_ms / 1000)
            try:
                await self.reload_acls()
            except Exception as exc:
                log.warning("reading ACLs from the metadata store failed (%s); keeping the last ones", exc)

    # --- authentication --------------------------------------------------------------------

    def admit(self, api_key: int, api_version: int) -> Session:
        """The current session, if it may send this request; else NotAuthenticated, or
        SessionExpired once its session lifetime passed without a re-authentication."""
        session = SESSION.get()
        if not session.may_serve(api_key):
            raise NotAuthenticated(api_key, api_version, session.state.value)
        if session.expires_ms is not None:
            expired_ms = session.expired_for(api_key, self.now_ms())
            if expired_ms is not None:
                raise SessionExpired(api_key, api_version, expired_ms, self.config.connections_max_reauth_ms)
        return session

    async def credentials(self, user: str, mechanism: str | None = None) -> list[ScramCredential]:
        """The user's stored SCRAM credentials (of `mechanism` only, when given); SCRAM-SHA-512 first."""
        assert self.store is not None
        stored = await self.store.list_scram_credentials([user])
        found = [
            ScramCredential(c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key)
            for c in stored
            if mechanism is None or c.mechanism == mechanism
        ]
        return sorted(found, key=lambda c: c.mechanism, reverse=True)

    async def failed(self, session: Session, failure: AuthenticationFailed) -> None:
        """Log a failed login and wait connection.failed.authentication.delay.ms before its answer.
        A failed re-authentication counts as such, not as a failed authentication (Kafka's Selector)."""
        log.warning(
            "authentication failed: client %s, user %s, mechanism %s, listener %s: %s",
            session.client, failure.user or session.user or "?", session.mechanism or "?", session.listener.name, failure.reason,
        )
        session.close_after_response = True
        failures = FAILED_REAUTHENTICATIONS if session.reauthenticating_from is not None else FAILED_AUTHENTICATIONS
        failures.labels(session.listener.name).inc()
        await self._sleep(self.config.failed_authentication_delay_ms / 1000)

    async def check_password(self, user: str, password: str, client: str) -> bool:
        """HTTP basic authentication against the stored SCRAM credentials (PBKDF2 off the loop)."""
        found = await self.credentials(user) if user else []
        if found and await asyncio.to_thread(password_matches, found[0], password):
            return True
        log.warning("HTTP authentication failed: client %s, user %s: %s", client, user or "?", "wrong password" if found else "unknown user")
        FAILED_AUTHENTICATIONS.labels("http").inc()
        await self._sleep(self.config.failed_authentication_delay_ms / 1000)
        return False

    # --- authorisation ---------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, operation: int, resource_type: int, resource_name: str = CLUSTER_NAME) -> bool:
        """Whether the current connection's principal may do `operation` on the resource."""
        if self.authorizer is None:
            return True
        session = SESSION.get()
        return self.authorizer.allowed(session.principal, session.client_host, operation, resource_type, resource_name)

    def authorized_operations(self, resource_type: int, resource_name: str = CLUSTER_NAME) -> int:
        if self.authorizer is None:
            return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type])
        session = SESSION.get()
        return self.authorizer.authorized_operations(session.principal, session.client_host, resource_type, resource_name)

    def cluster_allowed(self, operation: int) -> bool:
        return self.allowed(operation, CLUSTER, CLUSTER_NAME)

    def require(self, operation: int, resource_type: int, resource_name: str = CLUSTER_NAME) -> None:
        """Raise the resource type's AuthorizationFailed unless `allowed`."""
        if not self.allowed(operation, resource_type, resource_name):
            failure = _FAILURES[resource_type]
            raise failure(SESSION.get().principal, _OPERATION_NAMES[operation], _RESOURCE_NAMES[resource_type], resource_name)

    def may_create_topic(self, name: str) -> bool:
        """Kafka's rule: CREATE on the cluster, or on the topic."""
        return self.cluster_allowed(CREATE) or self.allowed(CREATE, TOPIC, name)

    def require_create_topic(self, name: str) -> None:
        if not self.may_create_topic(name):
            self.require(CREATE, TOPIC, name)


_FAILURES: dict[int, type[AuthorizationFailed]] = {
    TOPIC: TopicAuthorizationFailed, GROUP: GroupAuthorizationFailed, CLUSTER: ClusterAuthorizationFailed,
    TRANSACTIONAL_ID: TransactionalIdAuthorizationFailed,
}  # fmt: skip
_OPERATION_NAMES = {code: name for name, code in OPERATIONS.items()}
_RESOURCE_NAMES = {TOPIC: "TOPIC", GROUP: "GROUP", CLUSTER: "CLUSTER", TRANSACTIONAL_ID: "TRANSACTIONAL_ID"}
