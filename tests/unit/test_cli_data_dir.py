"""The data directory claim: lock and meta.properties (diskless/broker/data_dir.py)."""

from __future__ import annotations

import os

import pytest

from diskless.broker.data_dir import (
    CorruptMetaProperties,
    DataDirLocked,
    DataDirMismatch,
    MetaProperties,
    claim_data_dir,
    meta_from_pairs,
    parse_meta_properties,
)


def test_first_claim_writes_meta_properties_and_pid(tmp_path):
    lock = claim_data_dir(tmp_path / "d", node_id=3)
    try:
        text = (tmp_path / "d" / "meta.properties").read_text()
        assert text == f"version=1\ncluster.id={lock.cluster_id}\nnode.id=3\ndirectory.id={lock.meta.directory_id}\n"
        assert len(lock.cluster_id) == len(lock.meta.directory_id) == 22
        assert lock.cluster_id != lock.meta.directory_id
        assert (tmp_path / "d" / ".lock").read_text() == f"{os.getpid()}\n"
    finally:
        lock.release()


def test_second_claim_is_refused_while_held_and_allowed_after_release(tmp_path):
    first = claim_data_dir(tmp_path, node_id=1)
    with pytest.raises(DataDirLocked) as refused:
        claim_data_dir(tmp_path, node_id=1)
    assert refused.value.holder_pid == os.getpid()
    assert str(refused.value) == (
        f"data directory {tmp_path} is in use by process {os.getpid()} (another broker); stop it or use another data directory"
    )
    first.release()
    first.release()  # idempotent
    again = claim_data_dir(tmp_path, node_id=1)
    assert again.cluster_id == first.cluster_id
    again.release()


def test_another_node_or_cluster_is_refused(tmp_path):
    claim_data_dir(tmp_path, node_id=1, cluster_id="c-1").release()
    with pytest.raises(DataDirMismatch) as node:
        claim_data_dir(tmp_path, node_id=2)
    assert (node.value.key, node.value.found, node.value.expected) == ("node.id", "1", "2")
    with pytest.raises(DataDirMismatch) as cluster:
        claim_data_dir(tmp_path, node_id=1, cluster_id="c-2")
    assert (cluster.value.key, cluster.value.found, cluster.value.expected) == ("cluster.id", "c-1", "c-2")
    claim_data_dir(tmp_path, node_id=1, cluster_id="c-1").release()


def test_kafka_meta_properties_are_read():
    text = "#\n#Tue Nov 24 10:00:00 UTC 2026\ncluster.id=abc\nversion=1\nnode.id=5\n"
    assert meta_from_pairs(parse_meta_properties(text), None) == MetaProperties(1, "abc", 5)
    zookeeper_era = "version=0\nbroker.id=7\ncluster.id=xyz\n"
    assert meta_from_pairs(parse_meta_properties(zookeeper_era), None) == MetaProperties(0, "xyz", 7)


def test_meta_properties_without_cluster_id_is_refused(tmp_path):
    (tmp_path / "meta.properties").write_text("version=1\nnode.id=1\n")
    with pytest.raises(CorruptMetaProperties) as corrupt:
        claim_data_dir(tmp_path, node_id=1)
    assert str(corrupt.value) == f"{tmp_path}/meta.properties is not a valid meta.properties (no cluster.id); fix or remove it"
