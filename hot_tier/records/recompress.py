"""Recompress one RecordBatch v2 with another codec, as Kafka's LogValidator does when a topic's
compression.type is not `producer` and differs from the batch's codec.

Kafka (LogValidator.validateMessagesAndAssignOffsetsCompressed, buildRecordsAndAssignOffsets)
decodes the records and writes a new batch of the target codec. What stays and what changes:

    header field             result
    base_offset              kept (the broker assigns offsets after this step)
    batch_length, crc        recomputed for the new records section
    partition_leader_epoch   kept
    attributes               bits 0-2 set to the target codec; bit 6 (delete horizon)
                             cleared, as Kafka's rebuilt batch has none; every other bit
                             kept (timestamp type, transactional, control)
    last_offset_delta        kept
    base_timestamp           the first record's timestamp (what every producer writes)
    max_timestamp            the largest record timestamp; kept as is on a LogAppendTime batch
    producer_id, producer_epoch, base_sequence, records_count   kept
    records                  the same offset deltas, timestamps, keys, values and headers;
                             record attributes are written as 0, as Kafka does

For a batch already flagged LogAppendTime the records' own timestamp deltas are kept too
(readers ignore them, but the bytes stay what the producer sent). The input's CRC is checked
first: a corrupt batch is never given a fresh, valid CRC. Pure; safe from any thread.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from .batch import decode_batch, encode_batch
from .codecs import Compression, compress
from .errors import CorruptBatch, UnsupportedCompression
from .header import ATTR_CODEC_MASK, ATTR_CONTROL, ATTR_DELETE_HORIZON, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, CRC_START, HEADER_BYTES, LOG_OVERHEAD, read_header

# Offsets of the header fields patched here (see header.py for the whole layout).
_LENGTH_AT = 8
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_LAST_OFFSET_DELTA_AT = 23
_MAX_TIMESTAMP_AT = 35
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")


def recompress(batch: bytes | bytearray | memoryview, codec: Compression | int, *, max_bytes: int | None = None) -> bytes:
    """The one batch that fills `batch`, with its records compressed by `codec`.

    Returns the input's bytes unchanged when the batch already uses `codec`. Raises a
    `CorruptBatch` subclass for a bad header, CRC, compressed block or record (also when
    `batch` holds more or less than one whole batch), `UnsupportedCompression` for a codec
    id unknown on either side, and `DecompressedTooLarge` when its compressed records
    decompress to more than `max_bytes` (no bound without it).
    """
    try:
        codec = Compression(codec)
    except ValueError:
        raise UnsupportedCompression(codec) from None
    header = read_header(batch, 0, check_crc=True)
    if header.size_bytes != len(batch):
        raise CorruptBatch(0, f"expected one batch of {header.size_bytes} bytes, the buffer holds {len(batch)}")
    if header.codec == codec:
        return bytes(batch)
    log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    if header.records_count == 0:
        out = bytearray(memoryview(batch)[:HEADER_BYTES])
        out += compress(codec, b"")
    else:
        source = batch
        if log_append_time:
            # The decoder gives every record of a LogAppendTime batch max_timestamp; clear the
            # flag in a copy (its CRC was checked above) to read the records' own timestamps.
            source = bytearray(batch)
            _INT16.pack_into(source, _ATTRIBUTES_AT, header.attributes & ~ATTR_TIMESTAMP_TYPE)
        decoded = decode_batch(source, 0, check_crc=False, max_bytes=max_bytes)
        out = bytearray(
            encode_batch(
                decoded.records,
                base_offset=header.base_offset,
                compression=codec,
                producer_id=header.producer_id,
                producer_epoch=header.producer_epoch,
                base_sequence=header.base_sequence,
                partition_leader_epoch=header.partition_leader_epoch,
                is_transactional=bool(header.attributes & ATTR_TRANSACTIONAL),
                is_control=bool(header.attributes & ATTR_CONTROL),
            )
        )
        if log_append_time:
            _INT64.pack_into(out, _MAX_TIMESTAMP_AT, header.max_timestamp)
    _INT32.pack_into(out, _LENGTH_AT, len(out) - LOG_OVERHEAD)
    # base_timestamp is now the first record's: a delete horizon there (bit 6) is gone with it.
    _INT16.pack_into(out, _ATTRIBUTES_AT, (header.attributes & ~ATTR_CODEC_MASK & ~ATTR_DELETE_HORIZON) | codec)
    _INT32.pack_into(out, _LAST_OFFSET_DELTA_AT, header.last_offset_delta)
    _UINT32.pack_into(out, _CRC_AT, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
