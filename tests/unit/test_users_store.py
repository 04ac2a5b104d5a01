"""The credential `diskless users create --metadata` stores (diskless/cli/users_store.py): the
one the broker derives from an AlterUserScramCredentials upsertion, checked by the broker's own
password check and by a whole SCRAM exchange against our client."""

from __future__ import annotations

import pytest

from diskless.broker.security.sasl import scram_finish, scram_first, scram_start
from diskless.cli.users_store import SALT_BYTES, new_credential
from diskless.wire.scram import ScramClient, ScramCredential, credential_from_salted_password, password_matches, salted_password


def _as_scram(stored) -> ScramCredential:
    return ScramCredential(stored.mechanism, stored.salt, stored.iterations, stored.stored_key, stored.server_key)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_stored_credential_is_the_wire_paths(mechanism: str) -> None:
    salt = bytes(range(SALT_BYTES))
    stored = new_credential("alice", "pencil", mechanism, 8192, salt=salt)
    wire = credential_from_salted_password(mechanism, salted_password(mechanism, b"pencil", salt, 8192), salt, 8192)
    assert (stored.user, _as_scram(stored)) == ("alice", wire)
    assert password_matches(_as_scram(stored), "pencil") and not password_matches(_as_scram(stored), "pencil2")


def test_a_whole_scram_exchange_logs_in() -> None:
    stored = _as_scram(new_credential("alice", "pencil", "SCRAM-SHA-512", 4096))
    client = ScramClient("SCRAM-SHA-512", "alice", "pencil")
    exchange, server_first = scram_start("SCRAM-SHA-512", scram_first(client.first()), stored)
    server_final = scram_finish(exchange, client.final(server_first), "alice")
    client.verify(server_final)  # raises ScramError unless the server proved it holds ServerKey


def test_salts_are_random_and_bad_input_refused() -> None:
    one, two = (new_credential("alice", "pw", "SCRAM-SHA-256", 4096) for _ in range(2))
    assert len(one.salt) == len(two.salt) == SALT_BYTES and one.salt != two.salt
    with pytest.raises(ValueError, match="iterations must be between 4096 and 16384, got 16385"):
        new_credential("alice", "pw", "SCRAM-SHA-256", 16385)
    with pytest.raises(ValueError, match="a user name must not be empty"):
        new_credential("", "pw", "SCRAM-SHA-256", 4096)
