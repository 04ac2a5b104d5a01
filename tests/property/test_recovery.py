"""Recovery after a crash at any byte: the log keeps exactly the batches wholly before the
damage, its indexes are consistent, reads return only valid batches, appends continue at
the right offset; and missing or torn index files are rebuilt byte for byte.

A crash is simulated by dropping the Log without close() (no clean-shutdown marker, nothing
fsynced beyond what the log chose to), then cutting or corrupting the files it left.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hot_tier import Log, LogConfig
from hot_tier.records import Compression, Record, encode_batch, iter_headers, read_header

CONFIG = LogConfig(segment_bytes=1_000_000, index_interval_bytes=120)
# Bytes 12-15 of a batch (partition_leader_epoch) are outside the CRC by design (Kafka's
# format, so the broker can stamp them); damage there cannot be detected, by Kafka either.
UNCHECKED = range(12, 16)


def producer_batch(timestamps: list[int], value_bytes: int, compression: int = Compression.NONE) -> bytearray:
    records = [Record(i, ts, b"k%d" % i, b"v" * value_bytes) for i, ts in enumerate(timestamps)]
    return bytearray(encode_batch(records, compression=compression))


def write_log(dir: Path, batches: list[bytearray], config: LogConfig = CONFIG) -> list[bytes]:
    """Append `batches`, crash, and return each batch's bytes as stored."""
    log = Log.open(dir, config, now_ms=0)
    stored = []
    for buf in batches:
        log.append(buf, now_ms=0)
        stored.append(bytes(buf))
    del log  # kill -9: no close, no marker
    return stored


def snapshot(dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in dir.iterdir()}


def restore(dir: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(dir)
    dir.mkdir()
    for name, data in files.items():
        (dir / name).write_bytes(data)


def read_all(log: Log) -> bytes:
    """Every byte a consumer can fetch, batch by batch, checking each batch's CRC."""
    out = bytearray()
    offset = log.log_start_offset
    while (piece := log.read(offset, 1 << 30)) is not None:
        data = piece.read_bytes()
        headers = list(iter_headers(data, check_crc=True))
        offset = headers[-1].next_offset
        out += data
    assert offset == log.log_end_offset
    return bytes(out)


def check_indexes(log: Log) -> None:
    """Every offset index entry points at the batch ending at its offset; every time index
    entry names the first batch that reached its timestamp; entries follow Kafka's rule."""
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        batches = list(iter_headers(data, check_crc=True))
        assert segment.size_bytes == len(data)
        assert segment.next_offset == (batches[-1].next_offset if batches else segment.base_offset)
        entries = [(segment.base_offset + rel, pos) for rel, pos in struct.iter_unpack(">ii", segment.index_path.read_bytes())]
        expected, last = [], 0
        for header in batches:
            if header.position - last > CONFIG.index_interval_bytes:
                expected.append((header.last_offset, header.position))
                last = header.position
        assert entries == expected
        running = -1
        first_reaching: dict[int, int] = {}
        for header in batches:
            if header.max_timestamp > running:
                running = header.max_timestamp
                first_reaching[running] = header.last_offset
        for timestamp, rel in struct.iter_unpack(">qi", segment.timeindex_path.read_bytes()):
            assert first_reaching[timestamp] == segment.base_offset + rel


def check_recovered(dir: Path, stored: list[bytes], kept: int, **open_args: int) -> None:
    log = Log.open(dir, CONFIG, now_ms=0, **open_args)
    expected_end = sum(read_header(b).records_count for b in stored[:kept])
    assert log.log_end_offset == expected_end
    assert read_all(log) == b"".join(stored[:kept])
    check_indexes(log)
    info = log.append(producer_batch([5], 3), now_ms=0)
    assert info.first_offset == expected_end
    assert log.read(expected_end, 1 << 20) is not None
    del log  # crash again: the next case restores the files anyway


def fixed_batches() -> list[bytearray]:
    sizes = [(3, 40), (1, 10), (2, 90), (4, 5), (1, 60), (2, 20), (3, 30), (1, 1), (2, 45)]
    return [producer_batch([1000 + 7 * i + j for j in range(n)], v) for i, (n, v) in enumerate(sizes)]


def test_cut_at_every_byte_of_the_last_three_batches(tmp_path: Path) -> None:
    dir = tmp_path / "t-0"
    stored = write_log(dir, fixed_batches())
    pristine = snapshot(dir)
    log_name = "00000000000000000000.log"
    starts = [sum(len(b) for b in stored[:i]) for i in range(len(stored) + 1)]
    first = len(stored) - 3
    for cut in range(starts[first], starts[-1] + 1):
        restore(dir, pristine)
        (dir / log_name).write_bytes(pristine[log_name][:cut])  # the indexes may now point past it
        kept = max(i for i in range(len(stored) + 1) if starts[i] <= cut)
        check_recovered(dir, stored, kept)


def test_corrupt_byte_anywhere_in_the_last_three_batches(tmp_path: Path) -> None:
    dir = tmp_path / "t-0"
    stored = write_log(dir, fixed_batches())
    pristine = snapshot(dir)
    log_name = "00000000000000000000.log"
    starts = [sum(len(b) for b in stored[:i]) for i in range(len(stored) + 1)]
    for batch in range(len(stored) - 3, len(stored)):
        for at in range(starts[batch], starts[batch + 1]):
            if at - starts[batch] in UNCHECKED:
                continue
            restore(dir, pristine)
            data = bytearray(pristine[log_name])
            data[at] ^= 0xFF
            (dir / log_name).write_bytes(data)
            check_recovered(dir, stored, batch)


def test_missing_or_torn_index_files_are_rebuilt_identically(tmp_path: Path) -> None:
    dir = tmp_path / "t-0"
    config = LogConfig(segment_bytes=400, index_interval_bytes=120)
    log = Log.open(dir, config, now_ms=0)
    for buf in fixed_batches() * 2:
        log.append(buf, now_ms=0)
    assert len(log.segments) >= 4
    log.close()
    pristine = snapshot(dir)
    indexes = [name for name in pristine if name.endswith("index")]
    assert any(pristine[name] for name in indexes)
    for damage in ("delete", "tear"):
        restore(dir, pristine)
        for name in indexes:
            if damage == "delete":
                (dir / name).unlink()
            elif pristine[name]:
                (dir / name).write_bytes(pristine[name][:-3])
        Log.open(dir, config, now_ms=0).close()
        after = snapshot(dir)
        assert {name: after[name] for name in indexes} == {name: pristine[name] for name in indexes}


compression = st.sampled_from([Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD])
batch_spec = st.tuples(st.lists(st.integers(0, 10**13), min_size=1, max_size=4), st.integers(0, 200), compression)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    specs=st.lists(batch_spec, min_size=2, max_size=12),
    damage=st.sampled_from(["cut", "flip"]),
    where=st.floats(0, 1, exclude_max=True),
    recovery_point_fraction=st.none() | st.floats(0, 1),
    data=st.data(),
)
def test_random_logs_recover_from_random_damage(
    tmp_path: Path, specs, damage: str, where: float, recovery_point_fraction, data
) -> None:
    dir = tmp_path / "random-0"
    if dir.exists():
        shutil.rmtree(dir)
    stored = write_log(dir, [producer_batch(ts, v, c) for ts, v, c in specs])
    starts = [sum(len(b) for b in stored[:i]) for i in range(len(stored) + 1)]
    position = int(where * starts[-1])
    batch = max(i for i in range(len(stored)) if starts[i] <= position)
    if damage == "flip" and position - starts[batch] in UNCHECKED:
        position = starts[batch] + 16
    log_path = dir / "00000000000000000000.log"
    raw = bytearray(log_path.read_bytes())
    if damage == "cut":
        del raw[position:]
    else:
        raw[position] ^= data.draw(st.integers(1, 255))
    log_path.write_bytes(raw)
    open_args = {}
    if recovery_point_fraction is not None:
        # the broker may only claim flushed what precedes the damage
        damaged_base = sum(read_header(b).records_count for b in stored[:batch])
        open_args["recovery_point"] = int(recovery_point_fraction * damaged_base)
    check_recovered(dir, stored, batch, **open_args)
