"""A test CA, a server certificate for 127.0.0.1 / localhost and a client certificate, made with
the `cryptography` package and written as PEM files (Kafka's ssl.keystore.type=PEM layout)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class TestPki:
    ca: Path  # CA certificate (truststore)
    server: Path  # server certificate chain and key in one PEM (keystore)
    server_cert: Path
    server_key: Path
    client_cert: Path  # CN=client, signed by the CA
    client_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Diskless tests"), x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def make_pki(directory: Path) -> TestPki:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder().subject_name(_name("Diskless test CA")).issuer_name(_name("Diskless test CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    def leaf(common_name: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName] | None) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder().subject_name(_name(common_name)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )  # fmt: skip
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)

    server_cert, server_key = leaf(
        "localhost", ExtendedKeyUsageOID.SERVER_AUTH, [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    client_cert, client_key = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH, None)
    pki = TestPki(
        ca=directory / "ca.pem", server=directory / "server.pem", server_cert=directory / "server-cert.pem",
        server_key=directory / "server-key.pem", client_cert=directory / "client-cert.pem", client_key=directory / "client-key.pem",
    )  # fmt: skip
    pki.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.server.write_bytes(server_cert + server_key)
    pki.server_cert.write_bytes(server_cert)
    pki.server_key.write_bytes(server_key)
    pki.client_cert.write_bytes(client_cert)
    pki.client_key.write_bytes(client_key)
    return pki
