"""KIP-368 in the sans-IO `Session`: the lifetime a client is told, when its session expires and
what it may still send then, re-authentication keeping principal and mechanism, and the
`connections.max.reauth.ms` setting (Kafka's name and default 0)."""

from __future__ import annotations

import pytest

from diskless.broker.security.config import ListenerSecurity
from diskless.cli import settings
from diskless.broker.security.sasl import AuthenticationFailed
from diskless.broker.security.session import SASL_HANDSHAKE, SaslState, Session
from tests.unit.test_security_settings import resolve

METADATA, PRODUCE, API_VERSIONS, SASL_AUTHENTICATE = 3, 0, 18, 36


def _authenticated(supports: bool = True, max_reauth_ms: int = 1000, now_ms: int = 10_000) -> tuple[Session, int]:
    session = Session.open(ListenerSecurity("SASL_SSL", "SASL_SSL"), "10.0.0.1", 5000)
    session.mechanism, session.state = "SCRAM-SHA-512", SaslState.AUTHENTICATE
    return session, session.authenticated("alice", supports, max_reauth_ms, now_ms)


def test_a_v1_client_is_told_the_lifetime_and_expires_after_it() -> None:
    session, lifetime_ms = _authenticated()
    assert (lifetime_ms, session.state, session.principal, session.expires_ms) == (1000, SaslState.COMPLETE, "User:alice", 11_000)
    assert session.expired_for(METADATA, 10_999) is None
    assert session.expired_for(METADATA, 11_000) == 0
    assert session.expired_for(PRODUCE, 11_250) == 250
    assert session.expired_for(API_VERSIONS, 11_250) == 250
    assert session.expired_for(SASL_HANDSHAKE, 11_250) is None  # a re-authentication may start after expiry


def test_v0_clients_and_a_zero_setting_never_expire() -> None:
    for session, lifetime_ms in (_authenticated(supports=False), _authenticated(max_reauth_ms=0)):
        assert lifetime_ms == 0 and session.expires_ms is None
        assert session.expired_for(METADATA, 10**12) is None
    assert not _authenticated(supports=False)[0].may_reauthenticate()


def test_reauthentication_keeps_the_principal_and_renews_the_lifetime() -> None:
    session, _ = _authenticated()
    assert session.may_reauthenticate()
    session.begin_reauthentication()
    assert session.state is SaslState.HANDSHAKE and session.principal == "User:alice"
    assert [session.may_serve(key) for key in (SASL_HANDSHAKE, METADATA)] == [True, False]
    session.state = SaslState.AUTHENTICATE
    assert session.expired_for(SASL_AUTHENTICATE, 11_500) is None  # the exchange in progress is not cut
    assert session.authenticated("alice", True, 1000, 11_500) == 1000
    assert (session.state, session.expires_ms, session.reauthenticating_from) == (SaslState.COMPLETE, 12_500, None)
    assert session.expired_for(METADATA, 12_000) is None


def test_reauthentication_as_another_principal_or_mechanism_fails() -> None:
    session, _ = _authenticated()
    session.begin_reauthentication()
    session.state = SaslState.AUTHENTICATE
    with pytest.raises(AuthenticationFailed, match="cannot change principals during re-authentication from User:alice: User:bob"):
        session.authenticated("bob", True, 1000, 10_500)
    other, _ = _authenticated()
    other.begin_reauthentication()
    other.mechanism, other.state = "SCRAM-SHA-256", SaslState.AUTHENTICATE
    with pytest.raises(AuthenticationFailed, match="cannot change mechanisms during re-authentication from SCRAM-SHA-512: SCRAM-SHA-256"):
        other.authenticated("alice", True, 1000, 10_500)


def test_the_setting_has_kafkas_name_and_default() -> None:
    assert resolve().security.connections_max_reauth_ms == 0
    assert resolve("--connections-max-reauth-ms", "3600000").security.connections_max_reauth_ms == 3_600_000
    assert resolve(env={"DISKLESS_CONNECTIONS_MAX_REAUTH_MS": "5000"}).security.connections_max_reauth_ms == 5000
    with pytest.raises(settings.SettingsError, match="expected 0 \\(off\\) or more, got -1"):
        resolve("--connections-max-reauth-ms", "-1")
