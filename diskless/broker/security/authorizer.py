"""ACL decisions as Kafka's StandardAuthorizer makes them. Sans-IO: bindings in, decisions out.

A request is allowed when the principal is a super user; else it is denied if any DENY binding
matches it, allowed if an ALLOW binding matches it, and, when no binding at all concerns the
resource, allowed exactly when `allow.everyone.if.no.acl.found` is true.

A binding matches a request when its resource type is the request's, its pattern matches the
resource name (LITERAL: the same name, or the wildcard "*"; PREFIXED: a prefix of the name),
its principal is the request's or "User:*", its host the client's address or "*", and its
operation the request's or ALL. As in Kafka, READ, WRITE, DELETE and ALTER each imply DESCRIBE,
and ALTER_CONFIGS implies DESCRIBE_CONFIGS, for ALLOW bindings.

Codes are Kafka's (metadata/security.py lists them). `Authorizer` keeps the bindings indexed by
resource type and a bounded cache of decisions, dropped whenever the bindings change. Used by
one event loop; nothing here awaits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from metadata.security import AclBinding

# ResourceType
ANY_RESOURCE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 1, 2, 3, 4, 5
RESOURCE_TYPES = {"TOPIC": TOPIC, "GROUP": GROUP, "CLUSTER": CLUSTER, "TRANSACTIONAL_ID": TRANSACTIONAL_ID}
CLUSTER_NAME = "kafka-cluster"
# PatternType
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
PATTERN_TYPES = {"LITERAL": LITERAL, "PREFIXED": PREFIXED}
WILDCARD = "*"
# AclOperation
ANY_OPERATION, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 1, 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
OPERATIONS = {
    "ALL": ALL, "READ": READ, "WRITE": WRITE, "CREATE": CREATE, "DELETE": DELETE, "ALTER": ALTER,
    "DESCRIBE": DESCRIBE, "CLUSTER_ACTION": CLUSTER_ACTION, "DESCRIBE_CONFIGS": DESCRIBE_CONFIGS,
    "ALTER_CONFIGS": ALTER_CONFIGS, "IDEMPOTENT_WRITE": IDEMPOTENT_WRITE,
}  # fmt: skip
# AclPermissionType
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
PERMISSIONS = {"DENY": DENY, "ALLOW": ALLOW}

# The operations each resource type has (Kafka's AclEntry.supportedOperations), for the
# authorized-operations bit fields of Metadata, DescribeCluster and DescribeGroups.
SUPPORTED_OPERATIONS = {
    TOPIC: (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
}
_IMPLIED_BY = {DESCRIBE: (DESCRIBE, READ, WRITE, DELETE, ALTER), DESCRIBE_CONFIGS: (DESCRIBE_CONFIGS, ALTER_CONFIGS)}


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls / DeleteAcls filters: None (or the ANY codes) match anything; pattern MATCH
    matches every binding that would apply to `resource_name`."""

    resource_type: int = ANY_RESOURCE
    resource_name: str | None = None
    pattern_type: int = ANY_PATTERN
    principal: str | None = None
    host: str | None = None
    operation: int = ANY_OPERATION
    permission_type: int = ANY_PERMISSION

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ANY_RESOURCE and b.resource_type != self.resource_type:
            return False
        if self.pattern_type == MATCH:
            if self.resource_name is not None and not _pattern_matches(b, self.resource_name):
                return False
        else:
            if self.pattern_type != ANY_PATTERN and b.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and b.resource_name != self.resource_name:
                return False
        return (
            (self.principal is None or b.principal == self.principal)
            and (self.host is None or b.host == self.host)
            and (self.operation == ANY_OPERATION or b.operation == self.operation)
            and (self.permission_type == ANY_PERMISSION or b.permission_type == self.permission_type)
        )


def _pattern_matches(b: AclBinding, name: str) -> bool:
    if b.pattern_type == LITERAL:
        return b.resource_name == name or b.resource_name == WILDCARD
    if b.pattern_type == PREFIXED:
        return name.startswith(b.resource_name)
    return False


def decide(
    bindings: Iterable[AclBinding], super_users: frozenset[str], allow_if_no_acl: bool,
    principal: str, host: str, operation: int, resource_type: int, resource_name: str,
) -> bool:  # fmt: skip
    """The decision for one request; `bindings` may hold any resource types."""
    if principal in super_users:
        return True
    found = allowed = False
    implied = _IMPLIED_BY.get(operation, (operation,))
    for b in bindings:
        if b.resource_type != resource_type or not _pattern_matches(b, resource_name):
            continue
        found = True
        if b.principal not in (principal, "User:*") or b.host not in (host, WILDCARD):
            continue
        if b.permission_type == DENY and b.operation in (operation, ALL):
            return False
        if b.permission_type == ALLOW and (b.operation == ALL or b.operation in implied):
            allowed = True
    return allowed or (not found and allow_if_no_acl)


class Authorizer:
    """Bindings indexed by resource type, and a bounded cache of decisions."""

    def __init__(self, super_users: frozenset[str], allow_everyone_if_no_acl_found: bool, max_cached: int = 100_000) -> None:
        self.super_users = super_users
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self.max_cached = max_cached
        self._by_type: dict[int, tuple[AclBinding, ...]] = {}
        self._bindings: frozenset[AclBinding] = frozenset()
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    def replace(self, bindings: Iterable[AclBinding]) -> bool:
        """Take a new set of bindings; whether it differs from the last."""
        new = frozenset(bindings)
        if new == self._bindings:
            return False
        self._bindings = new
        by_type: dict[int, list[AclBinding]] = {}
        for b in new:
            by_type.setdefault(b.resource_type, []).append(b)
        self._by_type = {key: tuple(value) for key, value in by_type.items()}
        self._cache.clear()
        return True

    def allowed(self, principal: str, host: str, operation: int, resource_type: int, resource_name: str) -> bool:
        key = (principal, host, operation, resource_type, resource_name)
        decision = self._cache.get(key)
        if decision is None:
            decision = decide(
                self._by_type.get(resource_type, ()), self.super_users, self.allow_if_no_acl,
                principal, host, operation, resource_type, resource_name,
            )  # fmt: skip
            if len(self._cache) >= self.max_cached:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def authorized_operations(self, principal: str, host: str, resource_type: int, resource_name: str) -> int:
        """Kafka's authorized-operations bit field: bit N set when operation N is allowed."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS[resource_type]:
            if self.allowed(principal, host, operation, resource_type, resource_name):
                bits |= 1 << operation
        return bits
