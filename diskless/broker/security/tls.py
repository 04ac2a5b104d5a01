"""The server-side ssl.SSLContext of a TLS listener, and the client-side one this broker reaches
other brokers with, from PEM files (Kafka's ssl.keystore.type=PEM).

TLS 1.2 at least. Client certificates: `ssl.client.auth=required` refuses a client without a
certificate signed by a CA of the truststore, `requested` asks for one and accepts none,
`none` does not ask.
"""

from __future__ import annotations

import ssl

from .config import TlsSettings

_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(tls: TlsSettings) -> ssl.SSLContext:
    """Raises OSError / ssl.SSLError when a file is missing or does not hold what it should."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(
        str(tls.keystore_location), None if tls.key_location is None else str(tls.key_location), tls.key_password
    )
    if tls.truststore_location is not None:
        context.load_verify_locations(cafile=str(tls.truststore_location))
    context.verify_mode = _VERIFY[tls.client_auth]
    return context


def client_context(tls: TlsSettings | None) -> ssl.SSLContext:
    """To reach another broker's TLS listener: its certificate checked against the truststore
    (the system's CAs without one) and its host name; this broker's own certificate presented
    when brokers ask for client certificates (ssl.client.auth is shared by the cluster)."""
    context = ssl.create_default_context(cafile=None if tls is None or tls.truststore_location is None else str(tls.truststore_location))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls is not None and tls.client_auth != "none":
        context.load_cert_chain(
            str(tls.keystore_location), None if tls.key_location is None else str(tls.key_location), tls.key_password
        )
    return context


def principal_of_certificate(certificate: dict | None) -> str | None:
    """Kafka's default SSL principal: "User:" and the subject's distinguished name in RFC 2253
    order (most specific first, e.g. "User:CN=client,O=Example"); None without a certificate."""
    if not certificate or "subject" not in certificate:
        return None
    names = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "stateOrProvinceName": "ST", "localityName": "L", "emailAddress": "EMAILADDRESS", "domainComponent": "DC"}
    parts = [
        "+".join(f"{names.get(key, key)}={value}" for key, value in rdn)
        for rdn in reversed(certificate["subject"])
    ]
    return "User:" + ",".join(parts)
