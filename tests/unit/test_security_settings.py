"""`diskless serve` security settings (cli/security_settings.py) and the SASL session states
(broker/security/session.py, sasl.py): pure parsing and decisions, no broker."""

from __future__ import annotations

import argparse

import pytest

from diskless.broker.config import Listener
from diskless.broker.security.config import InterBrokerSecurity, ListenerSecurity
from diskless.broker.security.sasl import AuthenticationFailed, check_plain, parse_plain
from diskless.broker.security.session import SaslState, Session
from diskless.cli import settings
from diskless.wire.scram import make_credential


def resolve(*flags: str, env: dict[str, str] | None = None):
    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return settings.resolve(parser.parse_args(list(flags)), env or {})[0]


def test_without_listeners_every_listen_address_is_plaintext_as_before() -> None:
    config = resolve()
    assert (config.listen_host, config.listen_port, config.listener_security) == ("127.0.0.1", 9092, ListenerSecurity("PLAINTEXT", "PLAINTEXT"))
    assert config.extra_listeners == () and config.security.authorizer is False and config.security.tls is None


def test_named_listeners_with_a_protocol_map_and_advertised_addresses() -> None:
    config = resolve(
        "--listeners", "CLIENT://0.0.0.0:9094,INTERNAL://127.0.0.1:9095",
        "--listener-security-protocol-map", "CLIENT:SASL_PLAINTEXT,INTERNAL:PLAINTEXT",
        "--advertised-listeners", "CLIENT://broker.example.com:19094",
    )  # fmt: skip
    assert (config.listen_host, config.listen_port, config.advertised_host, config.advertised_port) == ("0.0.0.0", 9094, "broker.example.com", 19094)
    assert config.listener_security == ListenerSecurity("CLIENT", "SASL_PLAINTEXT")
    assert config.extra_listeners == (Listener("127.0.0.1", 9095, None, None, ListenerSecurity("INTERNAL", "PLAINTEXT")),)
    assert config.security.http_basic_auth is True


def test_an_explicit_listen_adds_a_plaintext_listener_first() -> None:
    config = resolve("--listen", "127.0.0.1:9092", "--listeners", "SASL_PLAINTEXT://127.0.0.1:9093")
    assert config.listener_security.protocol == "PLAINTEXT"
    assert [(l.port, l.security.protocol) for l in config.extra_listeners] == [(9093, "SASL_PLAINTEXT")]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--listeners", "SSL://127.0.0.1:9093"), "uses TLS: give --ssl-keystore-location"),
        (("--listeners", "CLIENT://127.0.0.1:9093"), "not a security protocol"),
        (("--listeners", "PLAINTEXT://127.0.0.1:9093", "--listen", "127.0.0.1:9092"), "also a --listen address"),
        (("--listeners", "SASL_SSL:/127.0.0.1:9093"), "expected NAME://HOST:PORT"),
        (("--super-users", "admin"), "expected principals such as User:admin"),
        (("--authorizer", "com.example.Mine"), "expected acl"),
        (("--sasl-enabled-mechanisms", "GSSAPI"), "expected some of PLAIN"),
        (("--advertised-listeners", "SSL://x:1"), "needs --listeners"),
        (("--inter-broker-listener-name", "INTERNAL"), "no listener named INTERNAL"),
        (("--listeners", "SASL_PLAINTEXT://127.0.0.1:9093", "--security-inter-broker-protocol", "SASL_PLAINTEXT"), "give this broker's login"),
        (("--inter-broker-listener-name", "PLAINTEXT", "--security-inter-broker-protocol", "PLAINTEXT"), "not both"),
        (("--sasl-jaas-config", 'x required username="broker";'), 'password="..."'),
        (("--listeners", "SASL_PLAINTEXT://127.0.0.1:9093", "--inter-broker-listener-name", "SASL_PLAINTEXT", "--sasl-enabled-mechanisms",
          "PLAIN", "--sasl-jaas-config", 'x required username="b" password="p";'), "SCRAM-SHA-512 is not in --sasl-enabled-mechanisms"),
    ],
)
def test_mistakes_are_one_line_naming_their_source(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        resolve(*flags)


def test_the_inter_broker_listener_and_login() -> None:
    default = resolve("--listeners", "SASL_PLAINTEXT://127.0.0.1:9093,INTERNAL://127.0.0.1:9094", "--listener-security-protocol-map",
                      "INTERNAL:PLAINTEXT")  # fmt: skip
    # The first listener, by default; its login is asked for only once another broker is reached.
    assert default.security.inter_broker == InterBrokerSecurity(ListenerSecurity("SASL_PLAINTEXT", "SASL_PLAINTEXT"), "SCRAM-SHA-512", None, None)
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="s3cret";'
    config = resolve("--listeners", "CLIENT://127.0.0.1:9093,REPLICATION://127.0.0.1:9094", "--listener-security-protocol-map",
                     "CLIENT:SASL_PLAINTEXT,REPLICATION:SASL_PLAINTEXT", "--inter-broker-listener-name", "replication",
                     "--sasl-mechanism-inter-broker-protocol", "plain", env={"DISKLESS_SASL_JAAS_CONFIG": jaas})  # fmt: skip
    assert config.security.inter_broker == InterBrokerSecurity(ListenerSecurity("REPLICATION", "SASL_PLAINTEXT"), "PLAIN", "broker", "s3cret")
    by_protocol = resolve("--listen", "127.0.0.1:9092", "--listeners", "SASL_PLAINTEXT://127.0.0.1:9093", "--security-inter-broker-protocol",
                          "PLAINTEXT")  # fmt: skip
    assert by_protocol.security.inter_broker.listener == ListenerSecurity("PLAINTEXT", "PLAINTEXT")


def test_authorizer_settings_from_the_environment() -> None:
    config = resolve(env={"DISKLESS_AUTHORIZER": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                          "DISKLESS_SUPER_USERS": "User:admin;User:ops", "DISKLESS_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false"})  # fmt: skip
    assert config.security.authorizer is True
    assert config.security.super_users == frozenset({"User:admin", "User:ops"})
    assert config.security.allow_everyone_if_no_acl_found is False


def test_a_sasl_session_serves_only_versions_and_sasl_until_it_completes() -> None:
    session = Session.open(ListenerSecurity("SASL_SSL", "SASL_SSL"), "10.0.0.1", 5000)
    assert session.state is SaslState.HANDSHAKE and session.principal == "User:ANONYMOUS"
    assert [session.may_serve(key) for key in (18, 17, 36, 3, 0)] == [True, True, False, False, False]
    session.state = SaslState.AUTHENTICATE
    assert [session.may_serve(key) for key in (18, 17, 36, 3)] == [False, False, True, False]
    session.state = SaslState.COMPLETE
    assert session.may_serve(3) and session.may_serve(0)
    tls = Session.open(ListenerSecurity("SSL", "SSL"), "10.0.0.1", 5000, tls_principal="User:CN=client")
    assert tls.state is SaslState.COMPLETE and tls.principal == "User:CN=client"


def test_plain_tokens() -> None:
    assert parse_plain(b"\0alice\0pw") == parse_plain(b"alice\0alice\0pw")
    credential = make_credential("SCRAM-SHA-256", "pw")
    check_plain(parse_plain(b"\0alice\0pw"), [credential])
    for token, reason in ((b"alice\0pw", "malformed"), (b"bob\0alice\0pw", "authorization id"), (b"\0alice\0", "empty")):
        with pytest.raises(AuthenticationFailed, match=reason):
            parse_plain(token)
    with pytest.raises(AuthenticationFailed, match="wrong password"):
        check_plain(parse_plain(b"\0alice\0nope"), [credential])
    with pytest.raises(AuthenticationFailed, match="unknown user"):
        check_plain(parse_plain(b"\0alice\0pw"), [])
