"""`diskless users create|list|delete --metadata URL`: SCRAM credentials written straight into
the metadata store, without a broker, as Kafka's `kafka-storage format --add-scram` writes them
into a new cluster's metadata. With SASL on every listener nobody can log in to create the
first user over the wire; this creates it before (or while) the brokers run.

The credential is the one AlterUserScramCredentials stores: a random 32-byte salt, the
salted password PBKDF2-HMAC-H(password, salt, iterations), and from it StoredKey and
ServerKey (diskless.wire.scram's `salted_password` and `credential_from_salted_password`,
the two functions the client and the broker run on the wire path), one row per user and
mechanism. Brokers read credentials from the store at each login, so a running broker accepts
a user written here at its next login.

The store is opened as `diskless serve` opens it (open_metadata_store: a new SQLite file or an
empty PostgreSQL database gets the current schema). Errors are the store's typed errors and
`NoSuchCredential`; the command turns them into one line on standard error.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from diskless.wire.scram import MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted_password, salted_password
from metadata.security import StoredScramCredential
from metadata.url import open_metadata_store

SALT_BYTES = 32  # as the admin client's upsert_user_scram_credential (admin_security.py)


class NoSuchCredential(LookupError):
    """Deleting or listing a user (or a user's mechanism) that has no credential in the store."""

    def __init__(self, user: str, mechanism: str | None = None) -> None:
        what = f"{mechanism} credential" if mechanism else "SCRAM credentials"
        super().__init__(f"user {user} has no {what} in the metadata store")
        self.user = user
        self.mechanism = mechanism


def new_credential(user: str, password: str, mechanism: str, iterations: int, salt: bytes | None = None) -> StoredScramCredential:
    """What the broker stores for `password` (pure; `salt` is random unless a test gives one)."""
    if not user:
        raise ValueError("a user name must not be empty")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, got {iterations}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    c = credential_from_salted_password(mechanism, salted_password(mechanism, password.encode(), salt, iterations), salt, iterations)
    return StoredScramCredential(user, c.mechanism, c.salt, c.iterations, c.stored_key, c.server_key)


async def upsert_credentials(url: str, credentials: Sequence[StoredScramCredential]) -> None:
    async with await open_metadata_store(url) as store:
        await store.alter_scram_credentials(credentials, [])


async def list_credentials(url: str, users: Sequence[str] | None) -> list[StoredScramCredential]:
    async with await open_metadata_store(url) as store:
        found = await store.list_scram_credentials(users)
    for user in users or ():
        if not any(c.user == user for c in found):
            raise NoSuchCredential(user)
    return found


async def delete_credentials(url: str, user: str, mechanisms: Sequence[str] | None) -> list[str]:
    """Delete `user`'s credentials of `mechanisms` (None: every one); the mechanisms deleted."""
    async with await open_metadata_store(url) as store:
        have = [c.mechanism for c in await store.list_scram_credentials([user])]
        if not have:
            raise NoSuchCredential(user)
        for mechanism in mechanisms or ():
            if mechanism not in have:
                raise NoSuchCredential(user, mechanism)
        chosen = list(mechanisms or have)
        await store.alter_scram_credentials([], [(user, mechanism) for mechanism in chosen])
    return chosen
