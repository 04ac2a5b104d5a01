"""The Kafka APIs this broker implements, with the version ranges it speaks.

ApiVersions advertises this table, so an entry is added here only together with its handler
in the broker (a unit test checks that the two agree). One exception, copied from Kafka 4
(KAFKA-18659): Produce is advertised from v0 although v0-v2 are refused, because older
librdkafka (2.0.2, which Debian's kcat is built on) sends gzip, snappy and lz4 batches
uncompressed unless the broker lists Produce v0. Clients use the highest version both sides
list, so none sends v0-v2 to a broker that speaks v3.
"""

from __future__ import annotations

from types import MappingProxyType

API_VERSIONS_KEY = 18

# api_key: (name, min_version, max_version)
SUPPORTED = MappingProxyType(
    {
        0: ("Produce", 3, 11),
        1: ("Fetch", 4, 12),
        2: ("ListOffsets", 1, 8),
        3: ("Metadata", 0, 12),
        8: ("OffsetCommit", 2, 9),
        9: ("OffsetFetch", 1, 9),
        10: ("FindCoordinator", 0, 4),
        11: ("JoinGroup", 0, 9),
        12: ("Heartbeat", 0, 4),
        13: ("LeaveGroup", 0, 5),
        14: ("SyncGroup", 0, 5),
        15: ("DescribeGroups", 0, 6),
        16: ("ListGroups", 0, 5),
        17: ("SaslHandshake", 1, 1),  # v0 (raw SASL tokens after it) is not spoken; advertised, see below
        18: ("ApiVersions", 0, 3),
        19: ("CreateTopics", 2, 7),
        20: ("DeleteTopics", 1, 6),
        21: ("DeleteRecords", 0, 2),
        22: ("InitProducerId", 0, 4),
        23: ("OffsetForLeaderEpoch", 2, 4),  # v0-v1 removed in Kafka 4 (KIP-896)
        24: ("AddPartitionsToTxn", 0, 3),
        25: ("AddOffsetsToTxn", 0, 4),
        26: ("EndTxn", 0, 4),
        27: ("WriteTxnMarkers", 1, 1),  # broker to broker: the transaction coordinator to partition leaders
        28: ("TxnOffsetCommit", 0, 4),
        29: ("DescribeAcls", 1, 3),
        30: ("CreateAcls", 1, 3),
        31: ("DeleteAcls", 1, 3),
        32: ("DescribeConfigs", 1, 4),
        33: ("AlterConfigs", 0, 2),
        36: ("SaslAuthenticate", 0, 2),
        35: ("DescribeLogDirs", 1, 4),
        37: ("CreatePartitions", 0, 3),
        42: ("DeleteGroups", 0, 2),
        43: ("ElectLeaders", 0, 2),
        44: ("IncrementalAlterConfigs", 0, 1),
        45: ("AlterPartitionReassignments", 0, 0),
        46: ("ListPartitionReassignments", 0, 0),
        47: ("OffsetDelete", 0, 0),
        48: ("DescribeClientQuotas", 0, 1),
        49: ("AlterClientQuotas", 0, 1),
        50: ("DescribeUserScramCredentials", 0, 0),
        51: ("AlterUserScramCredentials", 0, 0),
        60: ("DescribeCluster", 0, 1),
        61: ("DescribeProducers", 0, 0),
        65: ("DescribeTransactions", 0, 0),
        66: ("ListTransactions", 0, 1),
        68: ("ConsumerGroupHeartbeat", 0, 1),
        69: ("ConsumerGroupDescribe", 0, 1),
    }
)


# api_key: min_version advertised in ApiVersions when it differs from SUPPORTED's.
# SaslHandshake: librdkafka (2.0.2 and 2.x) takes a broker for one without SASL unless it lists
# v0, though it then sends v1 with SaslAuthenticate; v0 itself is refused like Produce v0-v2.
ADVERTISED_MIN_VERSION = MappingProxyType({0: 0, 17: 0})


def supported_range(api_key: int) -> tuple[int, int] | None:
    entry = SUPPORTED.get(api_key)
    return None if entry is None else (entry[1], entry[2])


def advertised_range(api_key: int) -> tuple[int, int] | None:
    """The range ApiVersions lists for `api_key` (see the module header)."""
    entry = SUPPORTED.get(api_key)
    return None if entry is None else (ADVERTISED_MIN_VERSION.get(api_key, entry[1]), entry[2])
