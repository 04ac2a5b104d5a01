"""A write-ahead object damaged at rest: the partition whose batch it was cannot be rebuilt and
stays offline with Kafka's KAFKA_STORAGE_ERROR (never served with a hole), the broker and its
other partitions keep serving, and the log says which object and offsets."""

from __future__ import annotations

import shutil
import time

from kio.schema.errors import ErrorCode

from cold_tier.wal_format import FOOTER_BYTES, decode_footer, decode_index

from .broker_process import BrokerProcess
from .test_broker_wire import batch, fetch, fetch_result, metadata, produce_result
from .test_broker_wire import produce as wire_produce
from .test_tiering_reads import as_log, consume, create_topic, make_records, produce


def recent(i: int) -> int:
    return int(time.time() * 1000) - 60_000 + i


def test_a_damaged_write_ahead_object_takes_only_its_partition_offline(tmp_path, wire) -> None:
    bucket = tmp_path / "bucket"
    metadata_url = f"sqlite:///{(tmp_path / 'metadata.db').resolve()}"
    broker = BrokerProcess(tmp_path / "data", "--object-store", f"file://{bucket}", "--metadata", metadata_url).start()
    try:
        topic = create_topic(broker.bootstrap, 2, {})
        records = {p: make_records(p, 0, 20, recent) for p in (0, 1)}
        assert produce(broker.bootstrap, topic, records) == {p: list(range(20)) for p in (0, 1)}
        broker.stop()

        # Flip a byte inside one of partition 0's batches, in every object holding one.
        damaged = 0
        for path in sorted((bucket / "wal~").rglob("*.wal")):
            data = bytearray(path.read_bytes())
            index_position, index_length, count, crc = decode_footer(bytes(data[-FOOTER_BYTES:]))
            for entry in decode_index(bytes(data[index_position : index_position + index_length]), count, crc):
                if (entry.topic, entry.partition) == (topic, 0):
                    data[entry.position + entry.size_bytes - 1] ^= 0xFF  # the last record byte, inside the CRC
                    damaged += 1
            path.write_bytes(bytes(data))
        assert damaged > 0
        shutil.rmtree(tmp_path / "data")  # the local copy is gone: the tail must come from the bucket

        broker.start()
        # Partition 1 is whole; partition 0 answers KAFKA_STORAGE_ERROR, it never serves a hole.
        assert consume(broker.bootstrap, topic, {1: 0}, {1: 20}) == {1: as_log(records[1])}
        client = wire(broker.bootstrap)
        assert fetch_result(client.request(fetch(topic, 0))).error_code == ErrorCode.kafka_storage_error
        assert produce_result(client.request(wire_produce(topic, batch()))).error_code == ErrorCode.kafka_storage_error
        (described,) = client.request(metadata(topic)).topics
        offline = {p.partition_index: (p.error_code, tuple(p.offline_replicas)) for p in described.partitions}
        assert offline == {0: (ErrorCode.kafka_storage_error, (1,)), 1: (ErrorCode.none, ())}
        log = broker.log_text()
        assert f"{topic}-0 cannot be opened and stays offline" in log
        assert "wal~/" in log
    finally:
        broker.close()
