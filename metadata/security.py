"""What the metadata store keeps for authentication and authorisation: SCRAM credentials
(KIP-554) and ACL bindings (Kafka's `AclBinding`), as plain values.

A SCRAM credential is what Kafka stores in its `__cluster_metadata` UserScramCredentialRecord:
the salt, the iteration count, StoredKey and ServerKey (RFC 5802), never the password. One row
per (user, mechanism).

An ACL binding uses Kafka's numeric codes, so that the wire, the store and the authoriser
speak one language (org.apache.kafka.common.resource.ResourceType, PatternType,
acl.AclOperation, acl.AclPermissionType):

    resource_type    2 TOPIC, 3 GROUP, 4 CLUSTER, 5 TRANSACTIONAL_ID
    pattern_type     3 LITERAL, 4 PREFIXED
    operation        2 ALL, 3 READ, 4 WRITE, 5 CREATE, 6 DELETE, 7 ALTER, 8 DESCRIBE,
                     9 CLUSTER_ACTION, 10 DESCRIBE_CONFIGS, 11 ALTER_CONFIGS, 12 IDEMPOTENT_WRITE
    permission_type  2 DENY, 3 ALLOW

Bindings are a set: creating one that exists changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoredScramCredential:
    user: str
    mechanism: str  # "SCRAM-SHA-256" or "SCRAM-SHA-512"
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str  # "User:alice", or "User:*"
    host: str  # an address, or "*"
    operation: int
    permission_type: int
