"""Transactions (Kafka's exactly-once): the coordinator's sans-IO state machine
(coordinator.py) and its async shell (transactions.py). Each partition's view of its
transactions, markers and last stable offset is pure and shared with the Spark reader:
hot_tier/records/transactions.py."""
