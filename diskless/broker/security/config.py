"""Security settings of the broker, Kafka's names in the comments; parsed once by the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Kafka's security protocols (org.apache.kafka.common.security.auth.SecurityProtocol).
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
CLIENT_AUTH = ("none", "requested", "required")


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """A listener's name (PLAINTEXT, CLIENT, ...) and its security protocol."""

    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class TlsSettings:
    keystore_location: Path  # ssl.keystore.location: PEM with the certificate chain (and the key, unless key_location)
    key_location: Path | None = None  # ssl.key.location (PEM private key) when not inside the keystore file
    key_password: str | None = None  # ssl.key.password
    truststore_location: Path | None = None  # ssl.truststore.location: PEM CA certificates for client certificates
    client_auth: str = "none"  # ssl.client.auth: none, requested or required


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    """How this broker reaches the others (transaction markers, KIP-890 verification, the
    TxnOffsetCommit hand-on): their listener of this name, logging in as `username` with
    `sasl_mechanism` when it uses SASL, trusting the truststore's CAs when it uses TLS. Kafka's
    inter.broker.listener.name (or security.inter.broker.protocol),
    sasl.mechanism.inter.broker.protocol and the username/password of sasl.jaas.config."""

    listener: ListenerSecurity = ListenerSecurity()
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    tls: TlsSettings | None = None
    inter_broker: InterBrokerSecurity = InterBrokerSecurity()
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_MECHANISMS  # sasl.enabled.mechanisms
    # connection.failed.authentication.delay.ms: a failed login is answered (and its connection
    # closed) only after this long, against password guessing. Kafka's default is 100.
    failed_authentication_delay_ms: int = 1000
    # connections.max.reauth.ms (KIP-368): a client that can re-authenticate (SaslAuthenticate
    # v1+) is told this session lifetime and must re-authenticate within it, or its connection
    # is closed at its next other request. 0, Kafka's default: sessions never expire.
    connections_max_reauth_ms: int = 0
    authorizer: bool = False  # authorizer.class.name set: ACLs are checked
    super_users: frozenset[str] = frozenset()  # super.users, principals such as "User:admin"
    allow_everyone_if_no_acl_found: bool = True  # allow.everyone.if.no.acl.found
    acl_refresh_interval_ms: int = 2000  # how often ACLs other brokers changed are read from the store
    http_basic_auth: bool = False  # the admin HTTP endpoint asks for a SCRAM user (set when a listener uses SASL)
