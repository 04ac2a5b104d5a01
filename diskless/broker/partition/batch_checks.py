"""What the header of a client's batch must say before the partition looks further (sans-IO).

Produce does not decode records (DESIGN.md, Formats); these checks read only the 61-byte
header (hot_tier/records/header.py) and the batch's size, and refuse what Kafka's
LogValidator refuses once it has decoded the batch:

    attributes & 0x07 in 5..7        CORRUPT_MESSAGE   no such codec (Kafka's CompressionType
                                                       ids stop at 4, zstd)
    uncompressed, records_count * 7  CORRUPT_MESSAGE   the count cannot be true: every record
      > records section bytes                          takes 7 bytes at least (MIN_RECORD_BYTES);
                                                       offsets are assigned from it
    attributes & 0x20 (control)      INVALID_RECORD    only the broker writes control batches
                                                       (Kafka: "Clients are not allowed to write
                                                       control records")

What the log checks on append stays there: a records_count below 1, or one that does not match
last_offset_delta + 1, and the CRC (hot_tier/log.py). A compressed batch's count is known only
once decompressed: it is checked where records are decoded (compacted topics, recompression).
Called by the partition's owner, on the header of the one batch of a produce.
"""

from __future__ import annotations

from hot_tier.records import HEADER_BYTES, MIN_RECORD_BYTES, BatchHeader, Compression, ImpossibleRecordsCount, UnsupportedCompression

from ..errors import InvalidRecord

_KNOWN_CODECS = frozenset(Compression)


def check_produced_batch(header: BatchHeader) -> None:
    """Raise UnsupportedCompression or ImpossibleRecordsCount (CORRUPT_MESSAGE), or InvalidRecord
    for a control batch, if the header of a client's batch says what cannot be stored."""
    if header.codec not in _KNOWN_CODECS:
        raise UnsupportedCompression(header.codec)
    records_bytes = header.size_bytes - HEADER_BYTES
    if header.codec == Compression.NONE and header.records_count > records_bytes // MIN_RECORD_BYTES:
        raise ImpossibleRecordsCount(header.position, header.records_count, records_bytes)
    if header.is_control:
        raise InvalidRecord("clients may not write control batches")
