"""The columns of Spark's own Kafka source, as a Spark DDL string and as the Arrow schema that
`read()` yields.

    column         Spark type                              Arrow type
    key            binary                                  binary             null for a null key
    value          binary                                  binary             null for a tombstone
    topic          string                                  string
    partition      int                                     int32
    offset         bigint                                  int64
    timestamp      timestamp                               timestamp[us, UTC] record ms x 1000
    timestampType  int                                     int32              0 CreateTime, 1 LogAppendTime
    headers        array<struct<key: string, value: binary>>                  only with includeHeaders;
                                                                              null when a record has none

Every column is nullable, as in Spark's KafkaRecordToRowConverter. Spark checks the schema of
every yielded RecordBatch against `to_arrow_schema(schema, timezone="UTC")` exactly (names,
types, nullability): `arrow_schema` must match it, and a unit test holds it to that.
"""

from __future__ import annotations

from functools import cache

import pyarrow as pa

BASE_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT,"
    " timestamp TIMESTAMP, timestampType INT"
)
HEADERS_DDL = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

_BASE_FIELDS = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
)


def spark_ddl(include_headers: bool) -> str:
    return f"{BASE_DDL}, {HEADERS_DDL}" if include_headers else BASE_DDL


@cache
def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    schema = arrow_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], field.type) for field in schema], schema=schema)
