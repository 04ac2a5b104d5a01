"""SCRAM (diskless.wire.scram) against RFC 7677's test vector, and client against server."""

from __future__ import annotations

import base64

import pytest

from diskless.wire.scram import (
    ScramClient,
    ScramError,
    ScramServer,
    make_credential,
    parse_client_first,
    password_matches,
)

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_client_messages() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)


def test_rfc7677_server_messages_from_the_stored_credential_alone() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE)
    first = parse_client_first(CLIENT_FIRST)
    assert (first.user, first.client_nonce, first.token_auth) == ("user", CLIENT_NONCE, False)
    assert server.start(first, credential) == SERVER_FIRST
    assert server.finish(CLIENT_FINAL) == SERVER_FINAL


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_and_server_agree_and_a_wrong_password_is_refused(mechanism: str) -> None:
    credential = make_credential(mechanism, "s3cret,=x", 4096)
    for password, ok in (("s3cret,=x", True), ("s3cret", False)):
        client = ScramClient(mechanism, "al,i=ce", password)
        server = ScramServer(mechanism)
        first = parse_client_first(client.first())
        assert first.user == "al,i=ce"
        final = client.final(server.start(first, credential))
        if ok:
            client.verify(server.finish(final))
        else:
            with pytest.raises(ScramError, match="invalid proof"):
                server.finish(final)


def test_a_replayed_nonce_and_a_tampered_signature_are_refused() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = ScramServer("SCRAM-SHA-256", nonce="another")
    server.start(parse_client_first(CLIENT_FIRST), credential)
    with pytest.raises(ScramError, match="nonce"):
        server.finish(CLIENT_FINAL)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    client.final(SERVER_FIRST)
    with pytest.raises(ScramError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


def test_plain_passwords_check_against_the_stored_credential() -> None:
    credential = make_credential("SCRAM-SHA-512", "pencil", 4096)
    assert password_matches(credential, "pencil")
    assert not password_matches(credential, "pencil ")


@pytest.mark.parametrize("message", [b"", b"n,,", b"p=tls-unique,,n=u,r=x", b"n,,r=x,n=u", b"n,,n=u=x,r=y", b"\xff"])
def test_malformed_client_first_messages(message: bytes) -> None:
    with pytest.raises(ScramError):
        parse_client_first(message)


def test_iterations_out_of_kafkas_range_are_refused() -> None:
    with pytest.raises(ScramError):
        make_credential("SCRAM-SHA-256", "p", 1000)


def test_librdkafka_2_0_doubled_client_nonce_is_accepted() -> None:
    """librdkafka 2.0.x (Debian's kcat) repeats its nonce before the server's in client-final."""
    credential = make_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE)
    first = parse_client_first(CLIENT_FIRST)
    server.start(first, credential)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    doubled = SERVER_FIRST.replace(b"r=", b"r=" + CLIENT_NONCE.encode(), 1)
    final = client.final(doubled)  # what librdkafka 2.0 computes its proof over
    assert final.startswith(b"c=biws,r=" + (CLIENT_NONCE * 2).encode())
    with pytest.raises(ScramError, match="invalid proof"):  # the nonce passes; the proof is over another server-first
        server.finish(final)
