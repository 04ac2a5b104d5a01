"""Request handlers: one async function per Kafka API, registered in `HANDLERS` by api key.

A handler takes the broker and a parsed request and returns the kio response entity, or
None when Kafka sends no response (Produce with acks=0). Each is wrapped by
`metrics.instrument`, which counts and times it under its API's name (Kafka's RequestMetrics)
and counts bytes and messages per topic for Produce and Fetch.
"""

from __future__ import annotations

from .. import metrics
from . import cluster, commits, configs, consumer_groups, fetch, groups, log_dirs, offsets, produce, quotas, security, topics, transactions

HANDLERS = metrics.instrument({
    0: produce.handle_produce,
    1: fetch.handle_fetch,
    2: offsets.handle_list_offsets,
    3: cluster.handle_metadata,
    8: commits.handle_offset_commit,
    9: commits.handle_offset_fetch,
    10: groups.handle_find_coordinator,
    11: groups.handle_join_group,
    12: groups.handle_heartbeat,
    13: groups.handle_leave_group,
    14: groups.handle_sync_group,
    15: groups.handle_describe_groups,
    16: groups.handle_list_groups,
    17: security.handle_sasl_handshake,
    18: cluster.handle_api_versions,
    19: topics.handle_create_topics,
    20: topics.handle_delete_topics,
    21: offsets.handle_delete_records,
    22: produce.handle_init_producer_id,
    23: offsets.handle_offset_for_leader_epoch,
    24: transactions.handle_add_partitions_to_txn,
    25: transactions.handle_add_offsets_to_txn,
    26: transactions.handle_end_txn,
    27: transactions.handle_write_txn_markers,
    28: transactions.handle_txn_offset_commit,
    29: security.handle_describe_acls,
    30: security.handle_create_acls,
    31: security.handle_delete_acls,
    32: configs.handle_describe_configs,
    33: configs.handle_alter_configs,
    36: security.handle_sasl_authenticate,
    35: log_dirs.handle_describe_log_dirs,
    37: topics.handle_create_partitions,
    42: groups.handle_delete_groups,
    43: cluster.handle_elect_leaders,
    44: configs.handle_incremental_alter_configs,
    45: cluster.handle_alter_partition_reassignments,
    46: cluster.handle_list_partition_reassignments,
    47: commits.handle_offset_delete,
    48: quotas.handle_describe_client_quotas,
    49: quotas.handle_alter_client_quotas,
    50: security.handle_describe_user_scram_credentials,
    51: security.handle_alter_user_scram_credentials,
    60: cluster.handle_describe_cluster,
    61: transactions.handle_describe_producers,
    65: transactions.handle_describe_transactions,
    66: transactions.handle_list_transactions,
    68: consumer_groups.handle_consumer_group_heartbeat,
    69: consumer_groups.handle_consumer_group_describe,
})
