"""The pure parts of the broker's network and remote-read metrics: a response's size from its
encoded parts, and the remote reader's counts as Prometheus families."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cold_tier.remote_log import ReaderStats
from diskless.broker.metrics import RemoteReaderCollector
from diskless.broker.network_metrics import response_size_bytes


@dataclass
class FileRange:
    size_bytes: int


def test_a_response_size_counts_bytes_and_file_ranges_without_the_size_prefix() -> None:
    parts = [b"\x00\x00\x01\x00" + b"h" * 20, FileRange(200), memoryview(b"m" * 30), FileRange(6)]
    assert response_size_bytes(parts) == 20 + 200 + 30 + 6
    assert response_size_bytes([b"\x00\x00\x00\x04corr"]) == 4


def test_the_reader_counts_become_counters_and_gauges() -> None:
    stats = ReaderStats(
        read_hits=3, read_misses=2, chunk_hits=7, chunk_misses=4, index_hits=1, index_misses=5,
        chunk_gets=4, prefetch_gets=6, index_gets=5, cached_chunk_bytes=1234, cached_indexes=5,
    )  # fmt: skip

    class Registry:
        def collect(self):
            return RemoteReaderCollector(stats).collect()

    text = generate_latest(Registry()).decode()  # type: ignore[arg-type]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples == {
        ("diskless_remote_cache_hits_total", (("cache", "fetch"),)): 3,
        ("diskless_remote_cache_hits_total", (("cache", "chunk"),)): 7,
        ("diskless_remote_cache_hits_total", (("cache", "index"),)): 1,
        ("diskless_remote_cache_misses_total", (("cache", "fetch"),)): 2,
        ("diskless_remote_cache_misses_total", (("cache", "chunk"),)): 4,
        ("diskless_remote_cache_misses_total", (("cache", "index"),)): 5,
        ("diskless_remote_get_requests_total", (("purpose", "fetch"),)): 4,
        ("diskless_remote_get_requests_total", (("purpose", "prefetch"),)): 6,
        ("diskless_remote_get_requests_total", (("purpose", "index"),)): 5,
        ("diskless_remote_cache_chunk_bytes", ()): 1234,
        ("diskless_remote_cache_indexes", ()): 5,
    }
