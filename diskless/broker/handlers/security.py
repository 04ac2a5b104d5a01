"""SaslHandshake, SaslAuthenticate (KIP-152), DescribeUserScramCredentials and
AlterUserScramCredentials (KIP-554), CreateAcls, DescribeAcls and DeleteAcls (KIP-140/290).

The SASL handlers drive the current connection's `Session` through its states (see
security/session.py); a failure is answered with SASL_AUTHENTICATION_FAILED after the
failed-authentication delay, and the connection is closed after the answer, as Kafka does.
SaslHandshake on an authenticated connection of a v1+ client starts a re-authentication
(KIP-368); SaslAuthenticate v1+ answers session_lifetime_ms, connections.max.reauth.ms.
Credential and ACL changes need ALTER on the cluster, their descriptions DESCRIBE, when an
authorizer is configured.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from diskless.wire import Request
from diskless.wire.scram import MAX_ITERATIONS, MECHANISM_TYPE_OF, MECHANISM_TYPES, MIN_ITERATIONS, credential_from_salted_password
from metadata.security import AclBinding, StoredScramCredential

from ..api import BrokerApi
from ..network_metrics import FAILED_REAUTHENTICATIONS, SUCCESSFUL_AUTHENTICATIONS, SUCCESSFUL_REAUTHENTICATIONS
from ..responses import NO_THROTTLE, make, response_module
from ..security.authorizer import (
    ALLOW, ALTER, CLUSTER, CLUSTER_NAME, DENY, DESCRIBE, LITERAL, OPERATIONS, PREFIXED, RESOURCE_TYPES, AclFilter,
)  # fmt: skip
from ..security.sasl import AuthenticationFailed, check_plain, parse_plain, scram_finish, scram_first, scram_start
from ..security.session import SESSION, SaslState

log = logging.getLogger("diskless.broker.security")

# --- SASL --------------------------------------------------------------------------------------


async def handle_sasl_handshake(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(17, request.header.api_version)
    session = SESSION.get()
    enabled = broker.security.config.sasl_enabled_mechanisms if session.listener.uses_sasl else ()
    mechanism = request.body.mechanism
    if session.may_reauthenticate():  # KIP-368: the same principal logs in again on its connection
        if mechanism != session.mechanism:
            log.warning("client %s (%s) asked to re-authenticate with %s after %s; closing",
                        session.client, session.principal, mechanism, session.mechanism)  # fmt: skip
            session.close_after_response = True
            FAILED_REAUTHENTICATIONS.labels(session.listener.name).inc()
            return make(mod.SaslHandshakeResponse, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=(session.mechanism,))
        session.begin_reauthentication()
    if not session.listener.uses_sasl or session.state is not SaslState.HANDSHAKE:
        session.close_after_response = True
        return make(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=tuple(enabled))
    if mechanism not in enabled:
        log.warning("client %s asked for SASL mechanism %r; enabled: %s", session.client, mechanism, ", ".join(enabled))
        session.close_after_response = True
        return make(mod.SaslHandshakeResponse, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=tuple(enabled))
    session.mechanism = mechanism
    session.state = SaslState.AUTHENTICATE
    return make(mod.SaslHandshakeResponse, error_code=ErrorCode.none, mechanisms=tuple(enabled))


async def handle_sasl_authenticate(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(36, request.header.api_version)
    session = SESSION.get()

    def answer(error: ErrorCode, message: str | None, token: bytes, session_lifetime_ms: int = 0) -> Any:
        return make(
            mod.SaslAuthenticateResponse, error_code=error, error_message=message, auth_bytes=token,
            session_lifetime=datetime.timedelta(milliseconds=session_lifetime_ms),
        )  # fmt: skip

    if session.state is not SaslState.AUTHENTICATE:
        session.close_after_response = True
        return answer(ErrorCode.illegal_sasl_state, f"SaslAuthenticate in state {session.state.value}", b"")
    mechanism = session.mechanism
    assert mechanism is not None
    token = request.body.auth_bytes
    security = broker.security
    try:
        if mechanism == "PLAIN":
            plain = parse_plain(token)
            session.user = plain.user
            # PBKDF2 of the password (milliseconds) off the event loop.
            await asyncio.to_thread(check_plain, plain, await security.credentials(plain.user))
            out, done = b"", True
        elif session.exchange is None:
            first = scram_first(token)
            session.user = first.user
            found = await security.credentials(first.user, mechanism)
            session.exchange, out = scram_start(mechanism, first, found[0] if found else None)
            done = False
        else:
            out, done = scram_finish(session.exchange, token, session.user or "?"), True
        reauthenticated = session.reauthenticating_from is not None
        if done:
            # v0 clients cannot re-authenticate: no lifetime for them, and no expiry (KIP-368).
            lifetime_ms = session.authenticated(
                session.user or "", request.header.api_version >= 1, security.config.connections_max_reauth_ms, security.now_ms()
            )  # fmt: skip
    except AuthenticationFailed as failure:
        session.state = SaslState.FAILED
        session.exchange = None
        await security.failed(session, failure)
        return answer(
            ErrorCode.sasl_authentication_failed,
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}",
            b"",
        )
    if not done:
        return answer(ErrorCode.none, None, out)
    lifetime = f" (session lifetime {lifetime_ms} ms)" if lifetime_ms else ""
    if reauthenticated:
        log.info("client %s re-authenticated as %s with %s on listener %s%s", session.client, session.principal, mechanism,
                 session.listener.name, lifetime)  # fmt: skip
        SUCCESSFUL_REAUTHENTICATIONS.labels(session.listener.name).inc()
    else:
        log.info("client %s authenticated as %s with %s on listener %s%s", session.client, session.principal, mechanism,
                 session.listener.name, lifetime)  # fmt: skip
        SUCCESSFUL_AUTHENTICATIONS.labels(session.listener.name).inc()
    return answer(ErrorCode.none, None, out, lifetime_ms)


# --- SCRAM credentials (KIP-554) ---------------------------------------------------------------


async def handle_describe_user_scram_credentials(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(50, request.header.api_version)
    security = broker.security
    if not security.cluster_allowed(DESCRIBE):
        return make(
            mod.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
            error_message=None, results=(),
        )  # fmt: skip
    assert security.store is not None
    users = None if request.body.users is None else [u.name for u in request.body.users]
    stored = await security.store.list_scram_credentials(users)
    by_user: dict[str, list[StoredScramCredential]] = {}
    for c in stored:
        by_user.setdefault(c.user, []).append(c)
    results = []
    asked = sorted(by_user) if users is None else users
    seen: set[str] = set()
    for user in asked:
        if user in seen:
            results.append(make(mod.DescribeUserScramCredentialsResult, user=user, error_code=ErrorCode.duplicate_resource,
                                error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                                credential_infos=()))  # fmt: skip
            continue
        seen.add(user)
        credentials = by_user.get(user, [])
        if not credentials:
            results.append(make(mod.DescribeUserScramCredentialsResult, user=user, error_code=ErrorCode.resource_not_found,
                                error_message=f"Attempt to describe a user credential that does not exist: {user}",
                                credential_infos=()))  # fmt: skip
            continue
        infos = tuple(
            mod.CredentialInfo(mechanism=MECHANISM_TYPE_OF[c.mechanism], iterations=c.iterations) for c in credentials
        )
        results.append(make(mod.DescribeUserScramCredentialsResult, user=user, error_code=ErrorCode.none, error_message=None,
                            credential_infos=infos))  # fmt: skip
    return make(
        mod.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        results=tuple(results),
    )  # fmt: skip


async def handle_alter_user_scram_credentials(broker: BrokerApi, request: Request) -> Any:
    """Upsertions carry the salted password (the client ran PBKDF2); the broker keeps only the
    salt, the iterations, StoredKey and ServerKey derived from it."""
    mod = response_module(51, request.header.api_version)
    security = broker.security
    body = request.body
    users = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    if not security.cluster_allowed(ALTER):
        errors = {user: (ErrorCode.cluster_authorization_failed, None) for user in users}
    else:
        pairs = [(d.name, d.mechanism) for d in body.deletions] + [(u.name, u.mechanism) for u in body.upsertions]
        seen: set[tuple[str, int]] = set()
        for user, mechanism in pairs:
            if (user, mechanism) in seen:
                errors[user] = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
            seen.add((user, mechanism))
            if mechanism not in MECHANISM_TYPES:
                errors[user] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
            elif not user:
                errors[user] = (ErrorCode.unacceptable_credential, "Username must not be empty")
        for u in body.upsertions:
            if u.name not in errors and not MIN_ITERATIONS <= u.iterations <= MAX_ITERATIONS:
                errors[u.name] = (ErrorCode.unacceptable_credential,
                                  f"Iterations {u.iterations} not in range [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")  # fmt: skip
            elif u.name not in errors and (not u.salt or not u.salted_password):
                errors[u.name] = (ErrorCode.unacceptable_credential, "Salt and salted password must not be empty")
        assert security.store is not None
        existing = {(c.user, c.mechanism) for c in await security.store.list_scram_credentials([d.name for d in body.deletions])}
        for d in body.deletions:
            if d.name not in errors and (d.name, MECHANISM_TYPES.get(d.mechanism)) not in existing:
                errors[d.name] = (ErrorCode.resource_not_found, f"Attempt to delete a user credential that does not exist: {d.name}")
        deletions = [(d.name, MECHANISM_TYPES[d.mechanism]) for d in body.deletions if d.name not in errors]
        upsertions = []
        for u in body.upsertions:
            if u.name in errors:
                continue
            c = credential_from_salted_password(MECHANISM_TYPES[u.mechanism], u.salted_password, u.salt, u.iterations)
            upsertions.append(StoredScramCredential(u.name, c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key))
        if deletions or upsertions:
            await security.store.alter_scram_credentials(upsertions, deletions)
            log.info("SCRAM credentials changed by %s: %d set, %d deleted", SESSION.get().principal, len(upsertions), len(deletions))
    results = []
    for user in dict.fromkeys(users):
        error, message = errors.get(user, (ErrorCode.none, None))
        results.append(make(mod.AlterUserScramCredentialsResult, user=user, error_code=error, error_message=message))
    return make(mod.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# --- ACLs --------------------------------------------------------------------------------------


def _binding_error(b: AclBinding) -> str | None:
    if b.resource_type not in RESOURCE_TYPES.values():
        return "Invalid resource type"
    if b.pattern_type not in (LITERAL, PREFIXED):
        return "Invalid pattern type: bindings are LITERAL or PREFIXED"
    if b.operation not in OPERATIONS.values():
        return "Invalid operation"
    if b.permission_type not in (ALLOW, DENY):
        return "Invalid permission type"
    if not b.principal.startswith("User:") or len(b.principal) <= len("User:"):
        return f"Invalid principal {b.principal!r}: expected User:NAME"
    if not b.resource_name or (b.resource_type == CLUSTER and b.resource_name != CLUSTER_NAME):
        return "Invalid resource name" + (f": the cluster is {CLUSTER_NAME}" if b.resource_type == CLUSTER else "")
    return None


async def handle_create_acls(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(30, request.header.api_version)
    security = broker.security
    results, valid = [], []
    allowed = security.cluster_allowed(ALTER)
    for c in request.body.creations:
        b = AclBinding(c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", LITERAL), c.principal, c.host,
                       c.operation, c.permission_type)  # fmt: skip
        if not security.enabled:
            results.append((ErrorCode.security_disabled, "No Authorizer is configured on the broker"))
        elif not allowed:
            results.append((ErrorCode.cluster_authorization_failed, None))
        elif (problem := _binding_error(b)) is not None:
            results.append((ErrorCode.invalid_request, problem))
        else:
            valid.append(b)
            results.append((ErrorCode.none, None))
    if valid:
        assert security.store is not None
        await security.store.create_acls(valid)
        await security.reload_acls()
        log.info("ACLs created by %s: %s", SESSION.get().principal, "; ".join(map(str, valid)))
    return make(
        mod.CreateAclsResponse, throttle_time=NO_THROTTLE,
        results=tuple(make(mod.AclCreationResult, error_code=e, error_message=m) for e, m in results),
    )  # fmt: skip


def _filter(f: Any) -> AclFilter:
    return AclFilter(
        f.resource_type_filter, f.resource_name_filter, getattr(f, "pattern_type_filter", LITERAL), f.principal_filter,
        f.host_filter, f.operation, f.permission_type,
    )  # fmt: skip


async def handle_describe_acls(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(29, request.header.api_version)
    security = broker.security

    def fail(error: ErrorCode, message: str | None) -> Any:
        return make(mod.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message, resources=())

    if not security.enabled:
        return fail(ErrorCode.security_disabled, "No Authorizer is configured on the broker")
    if not security.cluster_allowed(DESCRIBE):
        return fail(ErrorCode.cluster_authorization_failed, None)
    await security.reload_acls()
    assert security.authorizer is not None
    wanted = _filter(request.body)
    resources: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in sorted(security.authorizer.bindings):
        if wanted.matches(b):
            resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(b)
    return make(
        mod.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
        resources=tuple(
            make(mod.DescribeAclsResource, resource_type=rt, resource_name=name, pattern_type=pt,
                 acls=tuple(mod.AclDescription(principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission_type)
                            for b in bindings))
            for (rt, name, pt), bindings in resources.items()
        ),
    )  # fmt: skip


async def handle_delete_acls(broker: BrokerApi, request: Request) -> Any:
    mod = response_module(31, request.header.api_version)
    security = broker.security
    filters = [_filter(f) for f in request.body.filters]

    def failed(error: ErrorCode, message: str | None) -> Any:
        return make(mod.DeleteAclsFilterResult, error_code=error, error_message=message, matching_acls=())

    if not security.enabled or not security.cluster_allowed(ALTER):
        error = ErrorCode.security_disabled if not security.enabled else ErrorCode.cluster_authorization_failed
        message = "No Authorizer is configured on the broker" if not security.enabled else None
        return make(mod.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=tuple(failed(error, message) for _ in filters))
    await security.reload_acls()
    assert security.authorizer is not None and security.store is not None
    current = sorted(security.authorizer.bindings)
    matched = [[b for b in current if f.matches(b)] for f in filters]
    doomed = sorted({b for bindings in matched for b in bindings})
    if doomed:
        await security.store.delete_acls(doomed)
        await security.reload_acls()
        log.info("ACLs deleted by %s: %s", SESSION.get().principal, "; ".join(map(str, doomed)))
    return make(
        mod.DeleteAclsResponse, throttle_time=NO_THROTTLE,
        filter_results=tuple(
            make(mod.DeleteAclsFilterResult, error_code=ErrorCode.none, error_message=None, matching_acls=tuple(
                make(mod.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None, resource_type=b.resource_type,
                     resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                     operation=b.operation, permission_type=b.permission_type)
                for b in bindings))
            for bindings in matched
        ),
    )  # fmt: skip
