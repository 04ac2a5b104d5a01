"""Transactions (Kafka's exactly-once): the coordinator's sans-IO state machine
(coordinator.py) and its async shell (transactions.py), and each partition's view of its
transactions, markers and last stable offset (partition_txns.py)."""
