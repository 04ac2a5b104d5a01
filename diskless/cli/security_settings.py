"""`diskless serve` security settings: Kafka-named listeners, TLS, SASL and the ACL authorizer.

Entries of SECURITY_SETTINGS are (name, parse, default, help, metavar) for settings.Setting, so
they come from flags, DISKLESS_* variables and the TOML file like every other setting:

    listeners = "PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9094"
    advertised_listeners = "SASL_SSL://broker.example.com:9094"        (by listener name)
    listener_security_protocol_map = "CLIENT:SASL_SSL,INTERNAL:PLAINTEXT"  (names other than protocols)
    ssl_keystore_location = "/etc/diskless/broker.pem"     (PEM: certificate chain, and key unless ssl_key_location)
    ssl_truststore_location = "/etc/diskless/ca.pem"        ssl_client_auth = "required"
    sasl_enabled_mechanisms = "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN"
    authorizer = "acl"     super_users = "User:admin"     allow_everyone_if_no_acl_found = false

Without `listeners`, every `--listen` address is a PLAINTEXT listener, as before; with both,
the `--listen` addresses are PLAINTEXT listeners before the named ones. Errors are
ValueError, which settings.resolve reports with the setting's source.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from diskless.broker.security.config import (
    CLIENT_AUTH, PROTOCOLS, SASL_MECHANISMS, InterBrokerSecurity, ListenerSecurity, SecurityConfig, TlsSettings,
)  # fmt: skip

from .setting_values import boolean, integer

# Kafka's class names select the ACL authorizer too.
_AUTHORIZERS = {
    "": False, "none": False, "acl": True, "standard": True,
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer": True, "kafka.security.authorizer.AclAuthorizer": True,
}  # fmt: skip


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value.strip()


def _file(value: Any) -> Path:
    path = Path(_text(value)).absolute()
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    return path


def _endpoint(item: str) -> tuple[str, str, int]:
    """NAME://HOST:PORT -> (NAME, HOST, PORT); an empty host means every address."""
    name, sep, rest = item.strip().partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not name or not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected NAME://HOST:PORT, got {item!r}")
    return name.upper(), host.strip("[]") or "0.0.0.0", int(port)


def endpoints(value: Any) -> list[tuple[str, str, int]]:
    found = [_endpoint(item) for item in _text(value).split(",") if item.strip()]
    if not found:
        raise ValueError("expected at least one NAME://HOST:PORT")
    names = [name for name, _h, _p in found]
    if len(set(names)) != len(names):
        raise ValueError(f"each listener needs its own name, got {', '.join(names)}")
    return found


def protocol_map(value: Any) -> dict[str, str]:
    mapping = {}
    for item in _text(value).split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.strip().partition(":")
        if not sep or protocol.upper() not in PROTOCOLS:
            raise ValueError(f"expected NAME:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)}, got {item!r}")
        mapping[name.upper()] = protocol.upper()
    return mapping


def mechanisms(value: Any) -> tuple[str, ...]:
    found = tuple(m.strip().upper() for m in _text(value).split(",") if m.strip())
    unknown = [m for m in found if m not in SASL_MECHANISMS]
    if unknown or not found:
        raise ValueError(f"expected some of {', '.join(SASL_MECHANISMS)}, got {value!r}")
    return found


def listener_name(value: Any) -> str:
    name = _text(value).upper()
    if not name:
        raise ValueError("expected a listener name")
    return name


def _one_of(names: Sequence[str]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        name = _text(value).upper()
        if name not in names:
            raise ValueError(f"expected one of {', '.join(names)}, got {value!r}")
        return name

    return parse


def jaas_login(value: Any) -> tuple[str, str]:
    """username and password of a JAAS login line, as Kafka's sasl.jaas.config gives them:
    `org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="...";`"""
    found = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', _text(value)))
    if not found.get("username") or "password" not in found:
        raise ValueError('expected a JAAS login with username="..." and password="..."')
    return found["username"], found["password"]


def client_auth(value: Any) -> str:
    lowered = _text(value).lower()
    if lowered not in CLIENT_AUTH:
        raise ValueError(f"expected {', '.join(CLIENT_AUTH)}, got {value!r}")
    return lowered


def authorizer(value: Any) -> bool:
    text = _text(value)
    if text.lower() in _AUTHORIZERS:
        return _AUTHORIZERS[text.lower()]
    if text in _AUTHORIZERS:
        return _AUTHORIZERS[text]
    raise ValueError(f"expected acl (Kafka's StandardAuthorizer) or none, got {value!r}")


def super_users(value: Any) -> frozenset[str]:
    """Kafka's super.users: principals separated by ';' (',' accepted too)."""
    found = frozenset(p.strip() for p in _text(value).replace(",", ";").split(";") if p.strip())
    bad = [p for p in found if not p.startswith("User:")]
    if bad:
        raise ValueError(f"expected principals such as User:admin, got {', '.join(sorted(bad))}")
    return found


SECURITY_SETTINGS: list[tuple[str, Any, Any, str, str | None]] = [
    ("listeners", endpoints, None, "Kafka listeners, NAME://HOST:PORT comma-separated, NAME a security protocol (PLAINTEXT, SSL, "
     "SASL_PLAINTEXT, SASL_SSL) or mapped to one by --listener-security-protocol-map; an explicit --listen adds PLAINTEXT ones first", "NAME://HOST:PORT[,...]"),
    ("advertised_listeners", endpoints, None, "addresses clients are told, NAME://HOST:PORT per listener name "
     "(advertised.listeners; default: each listener's own address)", "NAME://HOST:PORT[,...]"),
    ("listener_security_protocol_map", protocol_map, None, "listener.security.protocol.map: NAME:PROTOCOL pairs for "
     "listener names that are not protocols", "NAME:PROTOCOL[,...]"),
    ("ssl_keystore_location", _file, None, "ssl.keystore.location: PEM file with the broker's certificate chain "
     "(and private key unless --ssl-key-location); needed by SSL and SASL_SSL listeners", "FILE"),
    ("ssl_key_location", _file, None, "PEM file with the private key, when it is not in the keystore file", "FILE"),
    ("ssl_key_password", _text, None, "ssl.key.password: the private key's password, if it is encrypted", "PASSWORD"),
    ("ssl_truststore_location", _file, None, "ssl.truststore.location: PEM file of CA certificates that sign client "
     "certificates (mutual TLS)", "FILE"),
    ("ssl_client_auth", client_auth, "none", "ssl.client.auth: none, requested or required (mutual TLS)", None),
    ("sasl_enabled_mechanisms", mechanisms, ",".join(SASL_MECHANISMS), "sasl.enabled.mechanisms on SASL listeners", "LIST"),
    ("connection_failed_authentication_delay_ms", integer, 1000, "connection.failed.authentication.delay.ms: a failed "
     "login is answered, and its connection closed, only after this delay (Kafka's default is 100)", None),
    ("connections_max_reauth_ms", integer, 0, "connections.max.reauth.ms: a client that can re-authenticate (KIP-368) "
     "is told this session lifetime and must log in again within it, or its connection is closed at its next request; "
     "0 (Kafka's default): sessions never expire", None),
    ("inter_broker_listener_name", listener_name, None, "inter.broker.listener.name: the listener other brokers are "
     "reached on, with its TLS and SASL, for transaction markers and verification (default: the listener named by "
     "--security-inter-broker-protocol, else the first)", "NAME"),
    ("security_inter_broker_protocol", _one_of(PROTOCOLS), None, "security.inter.broker.protocol: the inter-broker listener named "
     "by its protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL); not with --inter-broker-listener-name", "PROTOCOL"),
    ("sasl_mechanism_inter_broker_protocol", _one_of(SASL_MECHANISMS), "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol: how this "
     "broker logs in to the others on a SASL inter-broker listener", "MECHANISM"),
    ("sasl_jaas_config", jaas_login, None, "sasl.jaas.config: this broker's own login for the inter-broker listener, "
     'Kafka\'s JAAS line (... required username="broker" password="...";); the user must be a super user', "JAAS"),
    ("authorizer", authorizer, "none", "authorizer.class.name: acl to check Kafka ACLs on every request, none to allow all", None),
    ("super_users", super_users, None, "super.users: principals allowed everything, separated by ';' (User:admin;User:ops)", "PRINCIPALS"),
    ("allow_everyone_if_no_acl_found", boolean, True, "allow.everyone.if.no.acl.found: with the authorizer on, a resource "
     "no ACL names is open to everyone (Kafka's default is false)", "BOOL"),
]


def named_listeners(
    values: Mapping[str, Any], sources: Mapping[str, str], listens: Sequence[tuple[str, int]],
    advertiseds: Sequence[tuple[str | None, int | None]],
) -> tuple[list[ListenerSecurity], list[tuple[str, int]], list[tuple[str | None, int | None]]]:  # fmt: skip
    """Each listener's name and protocol, with the bind and advertised addresses in the same order."""
    named = values.get("listeners")
    if named is None:
        if values.get("advertised_listeners") is not None:
            raise ValueError(f"{sources['advertised_listeners']}: needs --listeners (NAME://HOST:PORT)")
        return [ListenerSecurity("PLAINTEXT", "PLAINTEXT") for _ in listens], list(listens), list(advertiseds)
    # --listen given as well: its addresses are PLAINTEXT listeners, before the named ones.
    plain: list[tuple[str, str, int]] = []
    if sources.get("listen", "default") != "default":
        plain = [("PLAINTEXT", host, port) for host, port in listens]
        clash = {name for name, _h, _p in plain} & {name for name, _h, _p in named}
        if clash:
            raise ValueError(f"{sources['listeners']}: listener {', '.join(sorted(clash))} is also a --listen address")
    elif sources.get("advertised_listener", "default") != "default":
        raise ValueError(f"{sources['advertised_listener']}: with --listeners, use --advertised-listeners NAME://HOST:PORT")
    mapping = values.get("listener_security_protocol_map") or {}
    securities = [ListenerSecurity(name, "PLAINTEXT") for name, _host, _port in plain]
    for name, _host, _port in named:
        protocol = mapping.get(name, name if name in PROTOCOLS else None)
        if protocol is None:
            raise ValueError(f"{sources['listeners']}: listener {name} is not a security protocol; map it with "
                             f"--listener-security-protocol-map {name}:SASL_SSL (or another protocol)")
        securities.append(ListenerSecurity(name, protocol))
    advertised_by_name = {name: (host, port) for name, host, port in values.get("advertised_listeners") or []}
    unknown = set(advertised_by_name) - {name for name, _h, _p in named}
    if unknown:
        raise ValueError(f"{sources['advertised_listeners']}: no listener named {', '.join(sorted(unknown))}")
    return (
        securities,
        [(host, port) for _name, host, port in [*plain, *named]],
        list(advertiseds)[: len(plain)] + [advertised_by_name.get(name, (None, None)) for name, _host, _port in named],
    )


def security_config(values: Mapping[str, Any], sources: Mapping[str, str], securities: Sequence[ListenerSecurity]) -> SecurityConfig:
    tls = None
    if values.get("ssl_keystore_location") is not None:
        tls = TlsSettings(
            values["ssl_keystore_location"], values.get("ssl_key_location"), values.get("ssl_key_password"),
            values.get("ssl_truststore_location"), values.get("ssl_client_auth") or "none",
        )  # fmt: skip
        if tls.client_auth != "none" and tls.truststore_location is None:
            raise ValueError(f"{sources['ssl_client_auth']}: client certificates need --ssl-truststore-location")
        from diskless.broker.security.tls import server_context

        try:
            server_context(tls)  # a wrong file or password shows now, not at the first connection
        except (OSError, ValueError) as exc:
            raise ValueError(f"{sources['ssl_keystore_location']}: cannot load the certificate and key: {exc}") from None
    tls_listeners = [s.name for s in securities if s.uses_tls]
    if tls_listeners and tls is None:
        raise ValueError(f"listener {tls_listeners[0]} uses TLS: give --ssl-keystore-location (PEM certificate and key)")
    delay = values.get("connection_failed_authentication_delay_ms", 1000)
    if delay < 0:
        raise ValueError(f"{sources['connection_failed_authentication_delay_ms']}: expected 0 or more, got {delay}")
    reauth_ms = values.get("connections_max_reauth_ms", 0)
    if reauth_ms < 0:
        raise ValueError(f"{sources['connections_max_reauth_ms']}: expected 0 (off) or more, got {reauth_ms}")
    return SecurityConfig(
        tls=tls,
        inter_broker=_inter_broker(values, sources, securities, values.get("sasl_enabled_mechanisms") or SASL_MECHANISMS),
        sasl_enabled_mechanisms=values.get("sasl_enabled_mechanisms") or SASL_MECHANISMS,
        failed_authentication_delay_ms=delay,
        connections_max_reauth_ms=reauth_ms,
        authorizer=bool(values.get("authorizer")),
        super_users=values.get("super_users") or frozenset(),
        allow_everyone_if_no_acl_found=values.get("allow_everyone_if_no_acl_found", True),
        http_basic_auth=any(s.uses_sasl for s in securities),
    )


def _inter_broker(
    values: Mapping[str, Any], sources: Mapping[str, str], securities: Sequence[ListenerSecurity], enabled: Sequence[str]
) -> InterBrokerSecurity:
    """The listener other brokers are reached on and this broker's login there, checked as
    Kafka checks them at start-up."""
    name, by_protocol = values.get("inter_broker_listener_name"), values.get("security_inter_broker_protocol")
    if name is not None and by_protocol is not None:
        raise ValueError(f"{sources['security_inter_broker_protocol']}: give --inter-broker-listener-name or "
                         "--security-inter-broker-protocol, not both")  # fmt: skip
    wanted = name or by_protocol
    listener = next((s for s in securities if s.name == wanted), None) if wanted else securities[0]
    if listener is None:
        source = sources["inter_broker_listener_name" if name else "security_inter_broker_protocol"]
        raise ValueError(f"{source}: no listener named {wanted} (listeners: {', '.join(s.name for s in securities)})")
    mechanism, login = values.get("sasl_mechanism_inter_broker_protocol") or "SCRAM-SHA-512", values.get("sasl_jaas_config")
    # Named explicitly, a SASL inter-broker listener needs this broker's login at start-up, as
    # Kafka checks; the default (the first listener) is only used once there are other brokers,
    # and without a login a request to one fails then, saying so (txn/inter_broker.py).
    if listener.uses_sasl and wanted:
        if mechanism not in enabled:
            raise ValueError(f"{sources['sasl_mechanism_inter_broker_protocol']}: {mechanism} is not in --sasl-enabled-mechanisms")
        if login is None:
            raise ValueError(f"the inter-broker listener {listener.name} uses SASL: give this broker's login with --sasl-jaas-config")
    username, password = login or (None, None)
    return InterBrokerSecurity(listener, mechanism, username, password)
