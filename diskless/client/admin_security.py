"""The security half of the admin client: SCRAM credentials (KIP-554) and ACLs (KIP-140),
as Kafka's Admin has them. Requests go to any broker: every broker serves them from the
shared metadata store.

A mixin of `Admin` (admin.py), which supplies `_cluster` and `_retrying`. The password of an
upsertion never leaves the client: it sends the salted password (PBKDF2 with a fresh salt), as
the Java client does, and the broker keeps only StoredKey and ServerKey.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from diskless.wire import request_type
from diskless.wire.scram import DEFAULT_ITERATIONS, MECHANISM_TYPE_OF, MECHANISM_TYPES, salted_password

from .cluster import Cluster
from .errors import UnsupportedByBroker, check, error_for

T = TypeVar("T")
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
_CLIENT_VERSIONS = {DESCRIBE_ACLS: (1, 3), CREATE_ACLS: (1, 3), DELETE_ACLS: (1, 3), DESCRIBE_SCRAM: (0, 0), ALTER_SCRAM: (0, 0)}


@dataclass(frozen=True, slots=True, order=True)
class Acl:
    """One ACL binding, Kafka's codes (see metadata/security.py for the table)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class AclFilter:
    resource_type: int = 1  # ANY
    resource_name: str | None = None
    pattern_type: int = 1  # ANY
    principal: str | None = None
    host: str | None = None
    operation: int = 1  # ANY
    permission_type: int = 1  # ANY


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    user: str
    mechanism: str
    iterations: int


class SecurityAdmin:
    _cluster: Cluster

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], final: frozenset[int] = frozenset()) -> T:
        """Admin's retries through retry.retrying (this class is a mixin of Admin, which defines it)."""
        ...

    async def _security_request(self, api_key: int, make: Callable[[int], Any]) -> Any:
        async def attempt() -> Any:
            connection = await self._cluster.any_connection()
            low, high = _CLIENT_VERSIONS[api_key]
            broker = connection.api_versions.get(api_key)
            if broker is None or min(high, broker[1]) < max(low, broker[0]):
                raise UnsupportedByBroker(f"api {api_key}", (low, high), broker)
            return await connection.request(make(min(high, broker[1])))

        return await self._retrying(attempt)

    # --- SCRAM credentials -----------------------------------------------------------------

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None) -> list[ScramCredentialInfo]:
        """Every credential of `users` (all users when None). An unknown user named raises RESOURCE_NOT_FOUND."""
        names = None if users is None else list(users)
        response = await self._security_request(
            DESCRIBE_SCRAM,
            lambda v: request_type(DESCRIBE_SCRAM, v)(users=None if names is None else tuple(_user_name(v, n) for n in names)),
        )
        check(response.error_code, response.error_message)
        found = []
        for result in response.results:
            check(result.error_code, result.error_message, user=result.user)
            found += [ScramCredentialInfo(result.user, MECHANISM_TYPES[i.mechanism], i.iterations) for i in result.credential_infos]
        return found

    async def upsert_user_scram_credential(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512",
                                           iterations: int = DEFAULT_ITERATIONS) -> None:  # fmt: skip
        salt = secrets.token_bytes(32)
        salted = salted_password(mechanism, password.encode(), salt, iterations)
        await self._alter_scram(user, lambda mod: ((), (mod.ScramCredentialUpsertion(
            name=user, mechanism=MECHANISM_TYPE_OF[mechanism], iterations=iterations, salt=salt, salted_password=salted),)))  # fmt: skip

    async def delete_user_scram_credential(self, user: str, mechanism: str = "SCRAM-SHA-512") -> None:
        await self._alter_scram(user, lambda mod: ((mod.ScramCredentialDeletion(name=user, mechanism=MECHANISM_TYPE_OF[mechanism]),), ()))

    async def _alter_scram(self, user: str, parts: Callable[[Any], tuple[tuple, tuple]]) -> None:
        import importlib

        def make(version: int) -> Any:
            mod = importlib.import_module(request_type(ALTER_SCRAM, version).__module__)
            deletions, upsertions = parts(mod)
            return request_type(ALTER_SCRAM, version)(deletions=deletions, upsertions=upsertions)

        response = await self._security_request(ALTER_SCRAM, make)
        for result in response.results:
            check(result.error_code, result.error_message, user=result.user)

    # --- ACLs ------------------------------------------------------------------------------

    async def create_acls(self, acls: Sequence[Acl]) -> None:
        import importlib

        def make(version: int) -> Any:
            mod = importlib.import_module(request_type(CREATE_ACLS, version).__module__)
            return request_type(CREATE_ACLS, version)(creations=tuple(
                mod.AclCreation(resource_type=a.resource_type, resource_name=a.resource_name, resource_pattern_type=a.pattern_type,
                                principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type)
                for a in acls))  # fmt: skip

        response = await self._security_request(CREATE_ACLS, make)
        for acl, result in zip(acls, response.results):
            check(result.error_code, result.error_message, acl=acl)

    async def describe_acls(self, acl_filter: AclFilter = AclFilter()) -> list[Acl]:
        f = acl_filter
        response = await self._security_request(DESCRIBE_ACLS, lambda v: request_type(DESCRIBE_ACLS, v)(
            resource_type_filter=f.resource_type, resource_name_filter=f.resource_name, pattern_type_filter=f.pattern_type,
            principal_filter=f.principal, host_filter=f.host, operation=f.operation, permission_type=f.permission_type))  # fmt: skip
        check(response.error_code, response.error_message)
        return sorted(
            Acl(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type)
            for r in response.resources
            for a in r.acls
        )

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[Acl]:
        import importlib

        def make(version: int) -> Any:
            mod = importlib.import_module(request_type(DELETE_ACLS, version).__module__)
            return request_type(DELETE_ACLS, version)(filters=tuple(
                mod.DeleteAclsFilter(resource_type_filter=f.resource_type, resource_name_filter=f.resource_name,
                                     pattern_type_filter=f.pattern_type, principal_filter=f.principal, host_filter=f.host,
                                     operation=f.operation, permission_type=f.permission_type)
                for f in filters))  # fmt: skip

        response = await self._security_request(DELETE_ACLS, make)
        deleted = []
        for result in response.filter_results:
            if result.error_code:
                raise error_for(result.error_code, result.error_message)
            deleted += [Acl(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation, m.permission_type)
                        for m in result.matching_acls]  # fmt: skip
        return deleted


def _user_name(version: int, name: str) -> Any:
    import importlib

    return importlib.import_module(request_type(DESCRIBE_SCRAM, version).__module__).UserName(name=name)
