"""ACL decisions (diskless/broker/security/authorizer.py) as Kafka's StandardAuthorizer makes them."""

from __future__ import annotations

import pytest

from diskless.broker.security.authorizer import (
    ALL, ALLOW, ALTER, ALTER_CONFIGS, ANY_OPERATION, ANY_PATTERN, CLUSTER, CREATE, DELETE, DENY, DESCRIBE, DESCRIBE_CONFIGS,
    GROUP, LITERAL, MATCH, PREFIXED, READ, TOPIC, WRITE, AclFilter, Authorizer, decide,
)  # fmt: skip
from metadata.security import AclBinding


def allow(rtype: int, name: str, principal: str, op: int, pattern: int = LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, ALLOW)


def deny(rtype: int, name: str, principal: str, op: int, pattern: int = LITERAL, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, DENY)


def test_literal_allow_and_nothing_else() -> None:
    bindings = [allow(TOPIC, "orders", "User:alice", WRITE)]
    assert decide(bindings, frozenset(), False, "User:alice", "10.0.0.1", WRITE, TOPIC, "orders")
    assert not decide(bindings, frozenset(), False, "User:alice", "10.0.0.1", READ, TOPIC, "orders")
    assert not decide(bindings, frozenset(), False, "User:bob", "10.0.0.1", WRITE, TOPIC, "orders")
    assert not decide(bindings, frozenset(), False, "User:alice", "10.0.0.1", WRITE, TOPIC, "orders2")


def test_implied_describe_and_describe_configs() -> None:
    for op in (READ, WRITE, DELETE, ALTER):
        assert decide([allow(TOPIC, "t", "User:a", op)], frozenset(), False, "User:a", "h", DESCRIBE, TOPIC, "t")
    assert decide([allow(TOPIC, "t", "User:a", ALTER_CONFIGS)], frozenset(), False, "User:a", "h", DESCRIBE_CONFIGS, TOPIC, "t")
    assert not decide([allow(TOPIC, "t", "User:a", DESCRIBE)], frozenset(), False, "User:a", "h", READ, TOPIC, "t")
    # DENY is not widened: a DENY READ does not deny DESCRIBE.
    assert decide([allow(TOPIC, "t", "User:a", DESCRIBE), deny(TOPIC, "t", "User:a", READ)], frozenset(), False, "User:a", "h", DESCRIBE, TOPIC, "t")


def test_deny_beats_allow_and_all_covers_every_operation() -> None:
    bindings = [allow(TOPIC, "t", "User:*", ALL), deny(TOPIC, "t", "User:mallory", WRITE)]
    assert decide(bindings, frozenset(), False, "User:alice", "h", WRITE, TOPIC, "t")
    assert decide(bindings, frozenset(), False, "User:mallory", "h", READ, TOPIC, "t")
    assert not decide(bindings, frozenset(), False, "User:mallory", "h", WRITE, TOPIC, "t")


def test_prefixed_and_wildcard_patterns() -> None:
    bindings = [allow(TOPIC, "payments.", "User:a", READ, PREFIXED), allow(GROUP, "*", "User:a", READ)]
    assert decide(bindings, frozenset(), False, "User:a", "h", READ, TOPIC, "payments.eu")
    assert not decide(bindings, frozenset(), False, "User:a", "h", READ, TOPIC, "payment")
    assert decide(bindings, frozenset(), False, "User:a", "h", READ, GROUP, "any-group")


def test_host_must_match() -> None:
    bindings = [allow(TOPIC, "t", "User:a", READ, host="10.0.0.1")]
    assert decide(bindings, frozenset(), False, "User:a", "10.0.0.1", READ, TOPIC, "t")
    assert not decide(bindings, frozenset(), False, "User:a", "10.0.0.2", READ, TOPIC, "t")


@pytest.mark.parametrize("allow_if_no_acl", [True, False])
def test_allow_everyone_if_no_acl_found_concerns_resources_without_any_binding(allow_if_no_acl: bool) -> None:
    bindings = [allow(TOPIC, "guarded", "User:a", READ)]
    assert decide(bindings, frozenset(), allow_if_no_acl, "User:b", "h", READ, TOPIC, "open") is allow_if_no_acl
    assert not decide(bindings, frozenset(), allow_if_no_acl, "User:b", "h", READ, TOPIC, "guarded")  # a binding exists


def test_super_users_pass_everything() -> None:
    bindings = [deny(CLUSTER, "kafka-cluster", "User:admin", ALL)]
    assert decide(bindings, frozenset({"User:admin"}), False, "User:admin", "h", CREATE, CLUSTER, "kafka-cluster")


def test_authorizer_caches_and_forgets_on_change() -> None:
    authorizer = Authorizer(frozenset(), allow_everyone_if_no_acl_found=False)
    assert not authorizer.allowed("User:a", "h", READ, TOPIC, "t")
    assert authorizer.replace([allow(TOPIC, "t", "User:a", READ)])
    assert authorizer.allowed("User:a", "h", READ, TOPIC, "t")
    assert not authorizer.replace([allow(TOPIC, "t", "User:a", READ)])  # the same set: nothing to drop
    assert authorizer.authorized_operations("User:a", "h", TOPIC, "t") == (1 << READ) | (1 << DESCRIBE)
    assert authorizer.replace([])
    assert not authorizer.allowed("User:a", "h", READ, TOPIC, "t")


def test_filters_as_describe_and_delete_acls_use_them() -> None:
    literal = allow(TOPIC, "orders", "User:a", READ)
    prefixed = allow(TOPIC, "ord", "User:b", WRITE, PREFIXED)
    wildcard = allow(TOPIC, "*", "User:c", READ)
    group = allow(GROUP, "g", "User:a", READ)
    everything = [literal, prefixed, wildcard, group]
    assert [b for b in everything if AclFilter().matches(b)] == everything
    assert [b for b in everything if AclFilter(TOPIC, "orders", LITERAL).matches(b)] == [literal]
    assert [b for b in everything if AclFilter(TOPIC, "orders", MATCH).matches(b)] == [literal, prefixed, wildcard]
    assert [b for b in everything if AclFilter(principal="User:a", operation=ANY_OPERATION, pattern_type=ANY_PATTERN).matches(b)] == [literal, group]
