"""Compression codecs of RecordBatch v2: the records section is compressed as one block.

The codec id sits in bits 0-2 of the batch attributes (Kafka's CompressionType):

    0 none
    1 gzip    RFC 1952 gzip members (Java's GZIPOutputStream)
    2 snappy  raw snappy (librdkafka), or xerial framing (Java's SnappyOutputStream):
                  8  magic  b"\\x82SNAPPY\\x00"
                  4  version, 4 min compatible version (both big-endian, ignored)
                  then repeated: 4 big-endian block length, that many bytes of raw snappy
    3 lz4     LZ4 frame format (KIP-57, Kafka >= 0.10)
    4 zstd    zstd frames (KIP-110); Java and librdkafka may omit the content size

We write what every client can read: gzip members, raw snappy, lz4 frames with independent
64 KiB blocks and no content size (Kafka's Lz4BlockInputStream decodes blocks independently),
zstd frames. Functions are pure and safe to call from any thread.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptBatch, UnsupportedCompression


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16
_BLOCK_LENGTH = struct.Struct(">i")

# Generous bounds on how far each format can expand: a snappy element yields at most 64
# bytes from at least 3 (about 21x); an lz4 match grows by at most 255 bytes per input byte.
_SNAPPY_MAX_RATIO = 64
_LZ4_MAX_RATIO = 256

GZIP_LEVEL = 6  # Kafka's compression.gzip.level default (zlib's default)
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default

# What the codec libraries raise on bad input (gzip.BadGzipFile is an OSError; lz4 raises
# RuntimeError; our xerial parser raises ValueError).
_CODEC_ERRORS = (
    ValueError, RuntimeError, EOFError, OSError, zlib.error, cramjam.DecompressionError, zstandard.ZstdError
)  # fmt: skip


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a records section with `codec` (a `Compression` or its id)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return zlib.compress(data, GZIP_LEVEL, wbits=31)
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    raise UnsupportedCompression(codec)


def decompress(codec: int, data: bytes | bytearray | memoryview, *, position: int = 0) -> bytes:
    """Decompress a records section; `position` is the batch's position, for errors.

    Raises `UnsupportedCompression` for an unknown codec id and `CorruptBatch` when `data` is
    not a whole, valid stream of that codec.
    """
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            if not data:
                raise EOFError("empty gzip stream")
            return gzip.decompress(data)  # every member; EOFError when one is cut short
        if codec == Compression.SNAPPY:
            return _unsnappy(data)
        if codec == Compression.LZ4:
            return _unlz4(data)
        if codec == Compression.ZSTD:
            return _unzstd(data)
    except _CODEC_ERRORS as exc:
        raise CorruptBatch(position, f"{Compression(codec).name.lower()} data does not decompress: {exc}") from exc
    raise UnsupportedCompression(codec)


def _unsnappy(data: bytes | bytearray | memoryview) -> bytes:
    if bytes(data[:8]) != XERIAL_MAGIC:
        return _unsnappy_raw(data)
    view = memoryview(data)
    end = len(view)
    if end < _XERIAL_HEADER_BYTES:
        raise ValueError(f"xerial header needs {_XERIAL_HEADER_BYTES} bytes, only {end} present")
    chunks = []
    at = _XERIAL_HEADER_BYTES
    while at < end:
        if end - at < 4:
            raise ValueError(f"xerial block length at byte {at} is cut short")
        (length,) = _BLOCK_LENGTH.unpack_from(view, at)
        at += 4
        if length < 0 or at + length > end:
            raise ValueError(f"xerial block at byte {at} claims {length} bytes, {end - at} remain")
        chunks.append(_unsnappy_raw(view[at : at + length]))
        at += length
    return b"".join(chunks)


def _unsnappy_raw(data: bytes | bytearray | memoryview) -> bytes:
    # The length prefix is checked first so a forged one cannot make us allocate gigabytes.
    claimed = cramjam.snappy.decompress_raw_len(data)
    if claimed > _SNAPPY_MAX_RATIO * len(data):
        raise ValueError(f"snappy block claims {claimed} bytes, impossible from {len(data)} compressed bytes")
    return bytes(cramjam.snappy.decompress_raw(data))


def _unlz4(data: bytes | bytearray | memoryview) -> bytes:
    # lz4.frame.decompress stops after one frame and ignores what follows: walk every frame.
    # A content size in the frame header is allocated up front: check it is possible first.
    view = memoryview(data)
    chunks = []
    at = 0
    while True:
        claimed = lz4.frame.get_frame_info(view[at:])["content_size"]
        if claimed > _LZ4_MAX_RATIO * (len(view) - at):
            raise ValueError(f"lz4 frame claims {claimed} bytes, impossible from {len(view) - at} compressed bytes")
        chunk, read = lz4.frame.decompress(view[at:], return_bytes_read=True)
        if read <= 0:
            raise ValueError(f"lz4 frame at byte {at} is empty")
        chunks.append(chunk)
        at += read
        if at >= len(view):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _unzstd(data: bytes | bytearray | memoryview) -> bytes:
    # Streaming, frame by frame: works whether or not a frame records its content size,
    # and `eof` tells a whole frame from a truncated one.
    dctx = zstandard.ZstdDecompressor()
    chunks = []
    remaining: bytes | bytearray | memoryview = data
    while True:
        obj = dctx.decompressobj()
        chunks.append(obj.decompress(remaining))
        if not obj.eof:
            raise ValueError("zstd frame is truncated")
        remaining = obj.unused_data
        if not remaining:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
