"""The pure parts of the broker's metrics: a response's size from its encoded parts, the remote
reader's counts as Prometheus families, and the partition state read at scrape time (offsets,
tiers, upload lag in seconds, consumer lag) with exact values."""

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


def test_partition_state_at_scrape_time(tmp_path) -> None:
    """Offsets, both tiers, upload lag in segments, bytes and the age of the oldest waiting
    segment (from its last write), and consumer lag, from one fake leader."""
    import os
    from types import SimpleNamespace

    from diskless.broker.metrics import BrokerStateCollector, GroupOffset

    def segment(base: int, size_bytes: int, mtime_s: float) -> SimpleNamespace:
        path = tmp_path / f"{base:020d}.log"
        path.write_bytes(b"x" * size_bytes)
        os.utime(path, (mtime_s, mtime_s))
        return SimpleNamespace(base_offset=base, size_bytes=size_bytes, log_path=path)

    now_s = 1_000_000.0
    waiting = [segment(40, 300, now_s - 42.5), segment(60, 200, now_s - 3)]
    active = segment(80, 50, now_s)
    leader = SimpleNamespace(
        topic="orders", index=3, high_watermark=85, last_stable_offset=81, closed=False, tiered=True, log_start_offset=10,
        local_log_start_offset=40, log_end_offset=90, local_segments=(*waiting, active),
        remote=SimpleNamespace(segments=(SimpleNamespace(size_bytes=1000), SimpleNamespace(size_bytes=24))),
        segments_to_upload=lambda: waiting,
    )  # fmt: skip
    collector = BrokerStateCollector([leader], [GroupOffset("g", "orders", 3, 70), GroupOffset("g", "orders", 4, 1)], now_s)

    class Registry:
        def collect(self):
            return collector.collect()

    text = generate_latest(Registry()).decode()  # type: ignore[arg-type]
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text) for s in f.samples}
    p = (("partition", "3"), ("topic", "orders"))
    expected = {
        "kafka_log_log_logstartoffset": 10, "diskless_log_locallogstartoffset": 40, "diskless_log_highwatermark": 85,
        "kafka_log_log_logendoffset": 90, "kafka_log_log_size": 550, "kafka_log_log_numlogsegments": 3,
        "kafka_server_brokertopicmetrics_remotelogsizebytes": 1024, "kafka_server_brokertopicmetrics_remotelogmetadatacount": 2,
        "kafka_server_brokertopicmetrics_remotecopylagsegments": 2, "kafka_server_brokertopicmetrics_remotecopylagbytes": 500,
        "diskless_remote_copy_lag_seconds": 42.5, "kafka_cluster_partition_laststableoffsetlag": 4,
    }  # fmt: skip
    assert {name: samples[(name, p)] for name in expected} == expected
    g = (("consumergroup", "g"), ("partition", "3"), ("topic", "orders"))
    assert (samples[("kafka_consumergroup_current_offset", g)], samples[("kafka_consumergroup_lag", g)]) == (70, 15)
    # A partition this broker does not lead: its committed offset, no lag.
    g4 = (("consumergroup", "g"), ("partition", "4"), ("topic", "orders"))
    assert ("kafka_consumergroup_lag", g4) not in samples and samples[("kafka_consumergroup_current_offset", g4)] == 1
    assert samples[("kafka_server_replicamanager_leadercount", ())] == 1
