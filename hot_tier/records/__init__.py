"""Kafka RecordBatch v2 (magic 2): the bytes of the log, which are also the bytes on the wire.

Pure, no I/O. `header` reads and patches batch headers without decoding records (the
broker's path); `batch` encodes and decodes records (broker tools, Spark); `decoder` is the
one record decoder under `batch` and the client (`iter_record_tuples`: plain tuples, no
objects); `codecs` holds the compression codecs; `errors` the typed errors they raise.
"""

from .batch import DecodedBatch, Record, decode_batch, decode_batches, encode_batch
from .codecs import Compression, compress, decompress
from .decoder import RecordTuple, iter_record_keys, iter_record_tuples, records_section
from .errors import (
    BadCrc,
    BadLength,
    BadMagic,
    CorruptBatch,
    DecompressedTooLarge,
    ImpossibleRecordsCount,
    RecordsError,
    TruncatedBatch,
    UnsupportedCompression,
)
from .header import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_START,
    HEADER_BYTES,
    LOG_OVERHEAD,
    MAGIC,
    MIN_RECORD_BYTES,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    iter_headers,
    peek_size,
    peek_transactional,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)

__all__ = [
    "ATTR_CODEC_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "CRC_START",
    "HEADER_BYTES",
    "LOG_OVERHEAD",
    "MAGIC",
    "MIN_RECORD_BYTES",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "BadCrc",
    "BadLength",
    "BadMagic",
    "BatchHeader",
    "Compression",
    "CorruptBatch",
    "DecodedBatch",
    "DecompressedTooLarge",
    "ImpossibleRecordsCount",
    "Record",
    "RecordTuple",
    "RecordsError",
    "TruncatedBatch",
    "UnsupportedCompression",
    "compress",
    "decode_batch",
    "decode_batches",
    "decompress",
    "encode_batch",
    "iter_headers",
    "iter_record_keys",
    "iter_record_tuples",
    "peek_size",
    "peek_transactional",
    "read_header",
    "records_section",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
]
