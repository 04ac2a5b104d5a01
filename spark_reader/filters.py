"""Filter pushdown: the filters on topic, partition, offset and timestamp that the reader
applies itself, turned into one `Pushdown`.

Spark hands `pushFilters` the conjuncts of a WHERE clause (pyspark.sql.datasource.Filter);
those accepted here are not evaluated again by Spark, so each is applied exactly:

    topic      = 'a', IN ('a', 'b')                     prunes topics before any LIST
    partition  = 3, IN (...), <, <=, >, >=              prunes partitions before listing commits;
                                                        a few named ones are listed one by one
    offset     = n, <, <=, >, >=                        narrows each offset range: fewer segments,
                                                        and byte ranges from the offset index
    timestamp  = t, <, <=, >, >=                        a row filter (timestamps need not grow with
                                                        offsets); lower bounds also skip segments and
                                                        batches whose max_timestamp is older, and the
                                                        prefix of a segment the time index rules out
    IS NOT NULL on any of the four                      always true: these columns are never null

Everything else (OR, NOT, LIKE, filters on key or value, ...) goes back to Spark. Timestamps
compare in microseconds, as Spark does; a record's timestamp is its milliseconds x 1000.
Pushdown happens only with spark.sql.python.filterPushdown.enabled=true. Pure.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, replace

from .decode import MAX_TIMESTAMP_US, MIN_TIMESTAMP_US, NO_LIMIT, RecordBounds

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)
_MAX_PARTITION = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Pushdown:
    """The conjunction of the accepted filters. `topics` and `partitions` None mean any."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_partition: int = 0
    max_partition: int = _MAX_PARTITION
    bounds: RecordBounds = RecordBounds()

    def allows_topic(self, topic: str) -> bool:
        return self.topics is None or topic in self.topics

    def allows_partition(self, partition: int) -> bool:
        if not self.min_partition <= partition <= self.max_partition:
            return False
        return self.partitions is None or partition in self.partitions

    def named_partitions(self, most: int) -> frozenset[int] | None:
        """The partitions the filters leave, when they are a set of at most `most` (an IN, or
        a range such as `partition = 1` or `partition BETWEEN 2 AND 5`): planning then LISTs
        those partitions' commits rather than the whole topic. None: too many, or unbounded."""
        if self.partitions is not None:
            named = frozenset(p for p in self.partitions if self.allows_partition(p))
            return named if len(named) <= most else None
        if self.max_partition - self.min_partition + 1 > most:
            return None
        return frozenset(range(self.min_partition, self.max_partition + 1))

    @property
    def is_empty(self) -> bool:
        return (
            self.bounds.is_empty()
            or self.min_partition > self.max_partition
            or self.topics == frozenset()
            or self.partitions == frozenset()
        )


def push_filters(filters: Iterable[object], pushdown: Pushdown = Pushdown()) -> tuple[Pushdown, list[object]]:
    """Fold the filters this reader can apply exactly into `pushdown`; return it and the
    filters Spark must still evaluate (the very objects it passed in)."""
    rejected: list[object] = []
    for filter_ in filters:
        narrowed = _push_one(filter_, pushdown)
        if narrowed is None:
            rejected.append(filter_)
        else:
            pushdown = narrowed
    return pushdown, rejected


def _push_one(filter_: object, pushdown: Pushdown) -> Pushdown | None:
    kind = type(filter_).__name__
    attribute = getattr(filter_, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None
    column = attribute[0]
    if column not in ("topic", "partition", "offset", "timestamp"):
        return None
    if kind == "IsNotNull":
        return pushdown
    value = getattr(filter_, "value", None)
    if kind == "EqualNullSafe":
        kind = "EqualTo"
    if column == "topic":
        return _topic(kind, value, pushdown)
    if column == "partition":
        return _partition(kind, value, pushdown)
    if column == "offset":
        return _offset(kind, value, pushdown)
    return _timestamp(kind, value, pushdown)


def _topic(kind: str, value: object, pushdown: Pushdown) -> Pushdown | None:
    if kind == "EqualTo" and isinstance(value, str):
        wanted = frozenset([value])
    elif kind == "In" and isinstance(value, (tuple, list)) and all(isinstance(v, str) or v is None for v in value):
        wanted = frozenset(v for v in value if v is not None)
    else:
        return None
    topics = wanted if pushdown.topics is None else pushdown.topics & wanted
    return replace(pushdown, topics=topics)


def _partition(kind: str, value: object, pushdown: Pushdown) -> Pushdown | None:
    if kind == "In":
        if not isinstance(value, (tuple, list)) or not all(_is_int(v) or v is None for v in value):
            return None
        wanted = frozenset(v for v in value if v is not None)
        partitions = wanted if pushdown.partitions is None else pushdown.partitions & wanted
        return replace(pushdown, partitions=partitions)
    low, high = _integer_interval(kind, value)
    if low is None and high is None:
        return None
    return replace(
        pushdown,
        min_partition=max(pushdown.min_partition, low if low is not None else 0),
        max_partition=min(pushdown.max_partition, high if high is not None else _MAX_PARTITION),
    )


def _offset(kind: str, value: object, pushdown: Pushdown) -> Pushdown | None:
    low, high = _integer_interval(kind, value)
    if low is None and high is None:
        return None
    bounds = pushdown.bounds
    start = max(bounds.start_offset, low if low is not None else 0)
    end = min(bounds.end_offset, high + 1 if high is not None else NO_LIMIT)
    return replace(pushdown, bounds=replace(bounds, start_offset=start, end_offset=end))


def _timestamp(kind: str, value: object, pushdown: Pushdown) -> Pushdown | None:
    micros = _micros(value)
    if micros is None:
        return None
    low, high = _interval(kind, micros)
    if low is None and high is None:
        return None
    bounds = pushdown.bounds
    return replace(
        pushdown,
        bounds=replace(
            bounds,
            min_timestamp_us=max(bounds.min_timestamp_us, low if low is not None else MIN_TIMESTAMP_US),
            max_timestamp_us=min(bounds.max_timestamp_us, high if high is not None else MAX_TIMESTAMP_US),
        ),
    )


def _integer_interval(kind: str, value: object) -> tuple[int | None, int | None]:
    """Inclusive [low, high] of an integer comparison; (None, None) if not one we take."""
    if not _is_int(value):
        return None, None
    return _interval(kind, value)  # type: ignore[arg-type]


def _interval(kind: str, value: int) -> tuple[int | None, int | None]:
    if kind == "EqualTo":
        return value, value
    if kind == "GreaterThan":
        return value + 1, None
    if kind == "GreaterThanOrEqual":
        return value, None
    if kind == "LessThan":
        return None, value - 1
    if kind == "LessThanOrEqual":
        return None, value
    return None, None


def _micros(value: object) -> int | None:
    """Microseconds since the epoch of an aware datetime (Spark sends TIMESTAMP literals in
    the session time zone); naive ones are left to Spark."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    return (value - _EPOCH) // _MICROSECOND


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
