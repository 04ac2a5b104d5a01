"""Response classes read in place of kio's generated ones (by our client, and by the broker
asking another broker), where kio's reading of a field refuses what Kafka brokers send.

DescribeTransactions v0 (KIP-664): `transaction_start_time` is an int64 of epoch milliseconds,
-1 when no transaction has started (a transactional id in state Empty, after InitProducerId),
as Kafka's TransactionCoordinator answers. kio types it `datetime_i64` and refuses a negative
value ("Cannot parse negative timestamp"); here it is read as a plain int64, byte for byte the
same field. Every other field is kio's.

No `from __future__ import annotations` here: kio's readers take the field types from the
class, and refuse annotations left as strings.
"""

from dataclasses import dataclass, field

from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.static.primitive import i64


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionState(describe_transactions_v0.TransactionState):
    transaction_start_time: i64 = field(metadata={"kafka_type": "int64"})
    """Epoch milliseconds when the transaction started; -1: none started."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse(describe_transactions_v0.DescribeTransactionsResponse):
    transaction_states: tuple[TransactionState, ...]


# (api_key, version): the class read in place of kio's
RESPONSE_CLASSES = {(65, 0): DescribeTransactionsResponse}
