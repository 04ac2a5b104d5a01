"""A partition this broker leads: its one owner (`PartitionLeader`), the topic configs it
applies (`PartitionRules`) and its producer-state snapshots."""

from .leader import PartitionLeader, UploadSignals
from .rules import PartitionRules

__all__ = ["PartitionLeader", "PartitionRules", "UploadSignals"]
