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

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from .errors import CorruptBatch, DecompressedTooLarge, UnsupportedCompression


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
# Steps of a bounded decompression (`decompress`'s max_bytes). zstd's largest expansion is an
# RLE block, 4 bytes (3 of block header, 1 of content) for up to 128 KiB: a step of N input
# bytes yields at most 32768 * N bytes, plus one block the decompressor held back; steps are
# at least 256 bytes (at most 8 MiB past the limit). lz4 allocates max_length up front: its
# output goes in steps of a few times the input, not of the whole limit.
_ZSTD_MAX_RATIO = 32768
_ZSTD_MIN_STEP = 256
_LZ4_MIN_STEP = 256 * 1024
_UNBOUNDED = 2**63 - 1  # no max_bytes: readers of the log

GZIP_LEVEL = 6  # Kafka's compression.gzip.level default (zlib's default)
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default

# What the codec libraries raise on bad input (zlib.error; lz4 raises RuntimeError; our
# xerial parser and frame walks raise ValueError or EOFError).
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


def decompress(
    codec: int, data: bytes | bytearray | memoryview, *, position: int = 0, max_bytes: int | None = None
) -> bytes:
    """Decompress a records section; `position` is the batch's position, for errors.

    Raises `UnsupportedCompression` for an unknown codec id and `CorruptBatch` when `data` is
    not a whole, valid stream of that codec. With `max_bytes`, raises `DecompressedTooLarge`
    as soon as the output passes `max_bytes`: every codec is decompressed in steps whose output
    is bounded (zlib's and lz4's max_length, snappy's length prefix, zstd's input fed a few KiB
    at a time), so the output stops one step past `max_bytes`. Without it (readers of the
    log), there is no bound.
    """
    if codec == Compression.NONE:
        return bytes(data)
    limit = _UNBOUNDED if max_bytes is None else max_bytes
    try:
        if codec == Compression.GZIP:
            return _ungzip(data, limit)
        if codec == Compression.SNAPPY:
            return _unsnappy(data, limit)
        if codec == Compression.LZ4:
            return _unlz4(data, limit)
        if codec == Compression.ZSTD:
            return _unzstd(data, limit)
    except _TooLarge:
        raise DecompressedTooLarge(position, Compression(codec).name.lower(), limit) from None
    except _CODEC_ERRORS as exc:
        raise CorruptBatch(position, f"{Compression(codec).name.lower()} data does not decompress: {exc}") from exc
    raise UnsupportedCompression(codec)


class _TooLarge(Exception):
    """The output passed the limit: `decompress` raises DecompressedTooLarge for it."""


def _ungzip(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    # Every member, as gzip.decompress reads them (zero padding between members skipped); zlib
    # checks each member's CRC-32 and length. max_length bounds each call's output.
    if not data:
        raise EOFError("empty gzip stream")
    chunks = []
    produced = 0
    remaining: bytes | bytearray | memoryview = data
    while True:
        member = zlib.decompressobj(wbits=31)  # 16 + 15: a gzip header and trailer
        chunk = member.decompress(remaining, 0 if limit == _UNBOUNDED else limit - produced + 1)
        produced += len(chunk)
        if produced > limit:
            raise _TooLarge()
        if not member.eof:  # less than max_length out and no end: the input ran out
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        chunks.append(chunk)
        remaining = member.unused_data.lstrip(b"\x00")
        if not remaining:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _unsnappy(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    if bytes(data[:8]) != XERIAL_MAGIC:
        return _unsnappy_raw(data, limit)
    view = memoryview(data)
    end = len(view)
    if end < _XERIAL_HEADER_BYTES:
        raise ValueError(f"xerial header needs {_XERIAL_HEADER_BYTES} bytes, only {end} present")
    chunks = []
    produced = 0
    at = _XERIAL_HEADER_BYTES
    while at < end:
        if end - at < 4:
            raise ValueError(f"xerial block length at byte {at} is cut short")
        (length,) = _BLOCK_LENGTH.unpack_from(view, at)
        at += 4
        if length < 0 or at + length > end:
            raise ValueError(f"xerial block at byte {at} claims {length} bytes, {end - at} remain")
        chunks.append(_unsnappy_raw(view[at : at + length], limit - produced))
        produced += len(chunks[-1])
        at += length
    return b"".join(chunks)


def _unsnappy_raw(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    # The length prefix is checked first so a forged one cannot make us allocate gigabytes,
    # and the decompressor writes exactly that many bytes or fails.
    claimed = cramjam.snappy.decompress_raw_len(data)
    if claimed > _SNAPPY_MAX_RATIO * len(data):
        raise ValueError(f"snappy block claims {claimed} bytes, impossible from {len(data)} compressed bytes")
    if claimed > limit:
        raise _TooLarge()
    return bytes(cramjam.snappy.decompress_raw(data))


def _unlz4(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    # Every frame (lz4.frame.decompress would stop after the first and ignore what follows).
    # A content size in the frame header is checked first: it must be possible and within the
    # limit; max_length bounds each frame's output whether or not it has one.
    view = memoryview(data)
    chunks = []
    produced = 0
    at = 0
    while True:
        claimed = lz4.frame.get_frame_info(view[at:])["content_size"]  # 0: not recorded
        if claimed > _LZ4_MAX_RATIO * (len(view) - at):
            raise ValueError(f"lz4 frame claims {claimed} bytes, impossible from {len(view) - at} compressed bytes")
        if claimed > limit - produced:
            raise _TooLarge()
        if limit == _UNBOUNDED:  # readers of the log: lz4's one-shot call (streaming is 18% slower on sized frames)
            chunk, read = lz4.frame.decompress(view[at:], return_bytes_read=True)
            if read <= 0:
                raise ValueError(f"lz4 frame at byte {at} is empty")
            chunks.append(chunk)
            at += read
        else:
            frame = lz4.frame.LZ4FrameDecompressor()
            step = max(_LZ4_MIN_STEP, 4 * (len(view) - at))
            chunk = frame.decompress(view[at:], max_length=min(step, limit - produced + 1))
            while True:
                produced += len(chunk)
                if produced > limit:
                    raise _TooLarge()
                chunks.append(chunk)
                if frame.eof or frame.needs_input or not chunk:
                    break
                chunk = frame.decompress(b"", max_length=min(step, limit - produced + 1))
            if not frame.eof:  # all input taken and no end
                raise ValueError(f"lz4 frame at byte {at} is truncated")
            at = len(view) - len(frame.unused_data or b"")
        if at >= len(view):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _unzstd(data: bytes | bytearray | memoryview, limit: int) -> bytes:
    # Streaming, frame by frame: works whether or not a frame records its content size (one
    # that does is not trusted to size anything), and `eof` tells a whole frame from a
    # truncated one. python-zstandard's decompressobj has no max_length: with a limit, the input
    # goes in steps small enough that one step cannot yield much more than what is left of it.
    dctx = zstandard.ZstdDecompressor()
    chunks = []
    produced = 0
    remaining = memoryview(data)
    while True:
        obj = dctx.decompressobj()
        at = 0
        while at < len(remaining) and not obj.eof:
            step = len(remaining) if limit == _UNBOUNDED else max(_ZSTD_MIN_STEP, (limit - produced) // _ZSTD_MAX_RATIO)
            chunk = obj.decompress(remaining[at : at + step])
            at += step
            produced += len(chunk)
            if produced > limit:
                raise _TooLarge()
            chunks.append(chunk)
        if not obj.eof:
            raise ValueError("zstd frame is truncated")
        remaining = memoryview(obj.unused_data if at >= len(remaining) else obj.unused_data + remaining[at:])
        if not remaining:
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
