"""The Kafka APIs this broker implements, with the version ranges it speaks.

ApiVersions advertises exactly this table, so an entry is added here only together with its
handler in the broker (a unit test checks that the two agree).
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
        18: ("ApiVersions", 0, 3),
        19: ("CreateTopics", 2, 7),
        20: ("DeleteTopics", 1, 6),
        21: ("DeleteRecords", 0, 2),
        32: ("DescribeConfigs", 1, 4),
        37: ("CreatePartitions", 0, 3),
        44: ("IncrementalAlterConfigs", 0, 1),
        60: ("DescribeCluster", 0, 1),
    }
)


def supported_range(api_key: int) -> tuple[int, int] | None:
    entry = SUPPORTED.get(api_key)
    return None if entry is None else (entry[1], entry[2])
