"""One contract, every ObjectStore adapter: a local directory, and S3 as served by moto over HTTP.

The contract is written down in cold_tier/store.py; each test here checks one clause of it
against both adapters. S3-only and local-only tests at the end cover what only one of them
has: prefixes, multipart uploads and network faults; temp files and key conflicts.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from cold_tier.errors import (
    InvalidObjectStoreUrl,
    ObjectNotFound,
    PreconditionFailed,
    StoreClosed,
    StoreRequestRejected,
    StoreUnavailable,
)
from cold_tier.retry import RetryPolicy
from cold_tier.store import TEMP_PREFIX, ObjectStore
from cold_tier.url import open_object_store

from .moto_s3 import MotoS3, moto_s3_server

pytestmark = pytest.mark.timeout(60)

FAST_RETRY = RetryPolicy(max_attempts=3, base_backoff_ms=5, max_backoff_ms=20)
S3_MIN_PART_BYTES = 5 * 1024 * 1024  # S3 (and moto) refuse smaller parts, except the last one
S3_PREFIX = "cluster-a"


@pytest.fixture(scope="module")
def s3_server():
    with moto_s3_server() as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store_url(request, tmp_path) -> tuple[str, dict[str, str]]:
    if request.param == "local":
        return (tmp_path / "bucket").as_uri(), {}
    server: MotoS3 = request.getfixturevalue("s3_server")
    return server.url(server.create_bucket(), prefix=S3_PREFIX), server.env()


@pytest.fixture
async def store(store_url):
    url, env = store_url
    async with open_object_store(url, env=env, retry=FAST_RETRY, connect_timeout_ms=2_000) as opened:
        yield opened


@pytest.fixture
def seed(request, store):
    """Put many objects quickly: through the store for a local directory, straight into
    moto's backend for S3 (1000 PUTs over HTTP would take 10 s). Reads stay over HTTP."""

    async def seed(items: dict[str, bytes]) -> None:
        if not is_s3(store):
            await put_all(store, items, concurrency=32)
            return
        server: MotoS3 = request.getfixturevalue("s3_server")
        server.seed_objects(store.config.bucket, {store.config.prefix + key: data for key, data in items.items()})

    return seed


def is_s3(store: ObjectStore) -> bool:
    return type(store).__name__ == "S3ObjectStore"


async def put_all(store: ObjectStore, items: dict[str, bytes], concurrency: int = 16) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def put(key: str, data: bytes) -> None:
        async with gate:
            await store.put(key, data)

    await asyncio.gather(*(put(key, data) for key, data in items.items()))


# --- put / get ------------------------------------------------------------------------------


async def test_put_then_get_returns_the_bytes_and_put_overwrites(store):
    await store.put("orders/0/a.log", b"first")
    assert await store.get("orders/0/a.log") == b"first"
    await store.put("orders/0/a.log", b"second, longer")
    assert await store.get("orders/0/a.log") == b"second, longer"


async def test_empty_object(store):
    await store.put("empty", b"")
    assert await store.get("empty") == b""
    assert await store.get("empty", start=0, end=10) == b""
    info = await store.head("empty")
    assert (info.key, info.size_bytes) == ("empty", 0)
    assert [(i.key, i.size_bytes) for i in await store.list("")] == [("empty", 0)]


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (None, None),  # whole object
        (None, 16),  # first bytes
        (0, 16),
        (100, 200),  # middle
        (1000, None),  # to the end
        (1000, 1024),
        (1000, 5000),  # end past the size is clamped
        (1023, 1024),  # last byte
        (1024, None),  # start at the size: nothing
        (5000, None),  # start past the size: nothing
        (5000, 6000),
        (10, 10),  # empty range
    ],
)
async def test_ranged_get_is_half_open_and_clamped_like_a_slice(store, start, end):
    data = bytes(range(256)) * 4
    await store.put("ranged", data)
    expected = data[(start or 0) : end]
    assert await store.get("ranged", start=start, end=end) == expected


async def test_bad_ranges_are_value_errors(store):
    await store.put("ranged", b"0123456789")
    with pytest.raises(ValueError):
        await store.get("ranged", start=-1)
    with pytest.raises(ValueError):
        await store.get("ranged", start=5, end=4)


async def test_keys_with_characters_a_url_must_escape_round_trip(store):
    # S3's PUT is signed by hand-picked botocore parts (cold_tier/s3.py): the signed path must be
    # the sent path, whatever the key holds.
    keys = ["a b/c+d", "100%/done", "ünïcödé/ключ", "q?x=1&y=#frag", "tilde~/semi;colon", "wal~/7/0001-x.wal"]
    for key in keys:
        await store.put(key, key.encode())
        await store.put(key, b"again " + key.encode())  # overwritten, as S3 does
    for key in keys:
        assert await store.get(key) == b"again " + key.encode()
    with pytest.raises(PreconditionFailed):
        await store.put(keys[0], b"x", if_none_match=True)
    assert sorted(i.key for i in await store.list("")) == sorted(keys)


async def test_missing_keys_raise_object_not_found(store):
    for start, end in [(None, None), (0, 10), (5, None), (3, 3)]:
        with pytest.raises(ObjectNotFound) as caught:
            await store.get("orders/0/missing.log", start=start, end=end)
        assert caught.value.key == "orders/0/missing.log"


async def test_reader_sees_a_whole_object_while_it_is_overwritten(store):
    size = 256 * 1024
    versions = [bytes([n]) * size for n in range(2)]
    await store.put("hot", versions[0])

    async def write() -> None:
        for round in range(1, 11):
            await store.put("hot", versions[round % 2])

    async def read() -> None:
        for _ in range(15):
            data = await store.get("hot")
            assert len(data) == size and data in versions

    await asyncio.gather(write(), read(), read())
    assert await store.get("hot") == versions[0]


# --- head -----------------------------------------------------------------------------------


async def test_head_reports_size_and_an_etag_that_follows_the_contents(store):
    await store.put("t/1/x", b"abc")
    first = await store.head("t/1/x")
    assert first is not None
    assert (first.key, first.size_bytes) == ("t/1/x", 3)
    assert first.etag
    await store.put("t/1/x", b"abcdef")
    second = await store.head("t/1/x")
    assert (second.key, second.size_bytes) == ("t/1/x", 6)
    assert second.etag != first.etag
    assert await store.head("t/1/y") is None
    assert await store.head("t/1") is None  # a prefix of a key is not an object


# --- list -----------------------------------------------------------------------------------


async def test_list_filters_by_string_prefix_and_sorts_by_key(store):
    items = {"a/2": b"22", "a/1": b"1", "ab/1": b"333", "b/1": b"", "a/sub/deep": b"4444"}
    await put_all(store, items)
    assert [(i.key, i.size_bytes) for i in await store.list("a/")] == [("a/1", 1), ("a/2", 2), ("a/sub/deep", 4)]
    assert [i.key for i in await store.list("a")] == ["a/1", "a/2", "a/sub/deep", "ab/1"]
    assert [i.key for i in await store.list("")] == ["a/1", "a/2", "a/sub/deep", "ab/1", "b/1"]
    assert [i.key for i in await store.list("a/s")] == ["a/sub/deep"]
    assert await store.list("c") == []
    assert await store.list("a//") == []
    etags = {info.key: info.etag for info in await store.list("")}
    for key in items:
        assert etags[key] == (await store.head(key)).etag


async def test_list_returns_every_page_beyond_1000_keys(store, seed):
    keys = [f"many/{n:05d}" for n in range(1005)]
    await seed({key: b"x" for key in keys} | {"other/0": b"y"})
    listed = await store.list("many/")
    assert [info.key for info in listed] == keys
    assert {info.size_bytes for info in listed} == {1}
    await store.delete_many(keys)  # more than one DeleteObjects request for S3
    assert await store.list("many/") == []
    assert [info.key for info in await store.list("")] == ["other/0"]


# --- delete ---------------------------------------------------------------------------------


async def test_delete_and_delete_many_are_idempotent(store):
    await put_all(store, {"d/1": b"1", "d/2": b"2", "d/3": b"3"})
    await store.delete("d/1")
    await store.delete("d/1")
    assert await store.head("d/1") is None
    await store.delete_many(["d/2", "d/404", "d/2"])
    await store.delete_many([])
    assert [info.key for info in await store.list("d/")] == ["d/3"]
    with pytest.raises(ObjectNotFound):
        await store.get("d/2")


# --- conditional put ------------------------------------------------------------------------


async def test_conditional_put_creates_once(store):
    await store.put("c/commit", b"mine", if_none_match=True)
    with pytest.raises(PreconditionFailed) as caught:
        await store.put("c/commit", b"theirs", if_none_match=True)
    assert caught.value.key == "c/commit"
    assert await store.get("c/commit") == b"mine"
    await store.delete("c/commit")
    await store.put("c/commit", b"again", if_none_match=True)
    assert await store.get("c/commit") == b"again"


# --- put_file -------------------------------------------------------------------------------


async def test_put_file_below_the_part_size_is_one_put(store, tmp_path):
    source = tmp_path / "small.log"
    source.write_bytes(os.urandom(1000))
    await store.put_file("f/small.log", source, part_bytes=S3_MIN_PART_BYTES)
    assert await store.get("f/small.log") == source.read_bytes()
    info = await store.head("f/small.log")
    assert info.size_bytes == 1000
    if is_s3(store):
        assert "-" not in info.etag  # a multipart etag is "<md5 of md5s>-<parts>"


async def test_put_file_above_the_part_size_is_multipart(store, tmp_path):
    source = tmp_path / "big.log"
    source.write_bytes(os.urandom(S3_MIN_PART_BYTES + 1000))
    await store.put_file("f/big.log", source, part_bytes=S3_MIN_PART_BYTES)
    assert await store.get("f/big.log") == source.read_bytes()
    assert await store.get("f/big.log", start=S3_MIN_PART_BYTES - 10, end=S3_MIN_PART_BYTES + 10) == (
        source.read_bytes()[S3_MIN_PART_BYTES - 10 : S3_MIN_PART_BYTES + 10]
    )
    info = await store.head("f/big.log")
    assert info.size_bytes == S3_MIN_PART_BYTES + 1000
    if is_s3(store):
        assert info.etag.strip('"').endswith("-2")


async def test_put_file_of_a_missing_file_is_file_not_found(store, tmp_path):
    with pytest.raises(FileNotFoundError):
        await store.put_file("f/none.log", tmp_path / "none.log")
    assert await store.head("f/none.log") is None


# --- keys and lifecycle ---------------------------------------------------------------------


async def test_invalid_keys_are_value_errors(store):
    bad_keys = ["", "/a", "a/", "a//b", "a/../b", "./a", "a/.", "a\x00b", f"a/{TEMP_PREFIX}x", "k" * 1025]
    for key in bad_keys:
        with pytest.raises(ValueError):
            await store.put(key, b"x")
        with pytest.raises(ValueError):
            await store.get(key)
        with pytest.raises(ValueError):
            await store.delete_many(["fine", key])
    assert await store.list("") == []


async def test_a_closed_store_raises_store_closed(store_url):
    url, env = store_url
    store = open_object_store(url, env=env, retry=FAST_RETRY)
    async with store:
        await store.put("k", b"v")
    with pytest.raises(StoreClosed) as caught:
        await store.get("k")
    assert caught.value.operation == "get"
    with pytest.raises(StoreClosed):
        await store.put("k", b"v")
    await store.close()  # closing twice is harmless


# --- S3 only --------------------------------------------------------------------------------


async def test_s3_url_prefix_is_applied_to_every_key_and_hidden_from_callers(s3_server):
    bucket = s3_server.create_bucket()
    env = s3_server.env()
    async with (
        open_object_store(s3_server.url(bucket, "cluster-a"), env=env) as a,
        open_object_store(s3_server.url(bucket, "cluster-b/x"), env=env) as b,
        open_object_store(f"s3://{bucket}", env=env) as root,  # endpoint from AWS_ENDPOINT_URL
    ):
        await a.put("t/0/k", b"a")
        await b.put("t/0/k", b"b")
        assert [i.key for i in await a.list("")] == ["t/0/k"]
        assert await b.get("t/0/k") == b"b"
        assert [i.key for i in await root.list("")] == ["cluster-a/t/0/k", "cluster-b/x/t/0/k"]
        await a.delete_many(["t/0/k"])
        assert [i.key for i in await root.list("")] == ["cluster-b/x/t/0/k"]


async def test_s3_failed_multipart_upload_is_aborted(s3_server, tmp_path):
    bucket = s3_server.create_bucket()
    source = tmp_path / "parts.log"
    source.write_bytes(os.urandom(2 * 1024 * 1024 + 10))
    async with open_object_store(s3_server.url(bucket), env=s3_server.env(), retry=FAST_RETRY) as store:
        # 1 MiB parts are below S3's minimum: the server refuses to complete the upload.
        with pytest.raises(StoreRequestRejected) as caught:
            await store.put_file("f/parts.log", source, part_bytes=1024 * 1024)
        assert (caught.value.code, caught.value.key) == ("EntityTooSmall", "f/parts.log")
        assert await store.head("f/parts.log") is None
    client = s3_server.client()
    try:
        assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    finally:
        client.close()


async def test_s3_unreachable_server_is_store_unavailable_after_retries_then_recovers():
    with moto_s3_server() as server:
        bucket = server.create_bucket()
        async with open_object_store(server.url(bucket), env=server.env(), retry=FAST_RETRY) as store:
            await store.put("t/0/before", b"1")
            server.stop()
            with pytest.raises(StoreUnavailable) as caught:
                await store.get("t/0/before")
            assert (caught.value.operation, caught.value.key, caught.value.attempts) == ("get", "t/0/before", 3)
            with pytest.raises(StoreUnavailable):
                await store.put("t/0/during", b"2")
            server.restart()
            server.create_bucket(bucket)  # moto may or may not have kept it: make sure
            await store.put("t/0/after", b"3")
            assert await store.get("t/0/after") == b"3"
            assert await store.head("t/0/during") is None


async def test_s3_missing_bucket_is_rejected_not_retried(s3_server):
    url = s3_server.url("no-such-bucket-here")
    async with open_object_store(url, env=s3_server.env(), retry=FAST_RETRY) as store:
        with pytest.raises(StoreRequestRejected) as caught:
            await store.put("k", b"v")
        assert caught.value.code == "NoSuchBucket"


# --- local only -----------------------------------------------------------------------------


async def test_local_partial_writes_are_invisible(tmp_path):
    async with open_object_store((tmp_path / "bucket").as_uri()) as store:
        await store.put("t/0/seg.log", b"whole")
        # What a crash in the middle of a put leaves behind:
        (tmp_path / "bucket" / "t" / "0" / f"{TEMP_PREFIX}abc").write_bytes(b"part")
        assert [i.key for i in await store.list("")] == ["t/0/seg.log"]
        assert await store.get("t/0/seg.log") == b"whole"


async def test_local_key_that_is_also_a_directory_is_a_key_conflict(tmp_path):
    async with open_object_store((tmp_path / "bucket").as_uri()) as store:
        await store.put("a/b", b"1")
        with pytest.raises(StoreRequestRejected) as caught:
            await store.put("a/b/c", b"2")
        assert (caught.value.code, caught.value.key) == ("KeyConflict", "a/b/c")
        await store.put("x/y/z", b"3")
        with pytest.raises(StoreRequestRejected):
            await store.put("x/y", b"4")
        with pytest.raises(ObjectNotFound):
            await store.get("x/y")
        assert [i.key for i in await store.list("")] == ["a/b", "x/y/z"]


async def test_local_concurrent_conditional_puts_have_exactly_one_winner(tmp_path):
    async with open_object_store((tmp_path / "bucket").as_uri()) as store:

        async def create(n: int) -> int | None:
            try:
                await store.put("race/commit", str(n).encode(), if_none_match=True)
                return n
            except PreconditionFailed:
                return None

        winners = [n for n in await asyncio.gather(*(create(n) for n in range(8))) if n is not None]
        assert len(winners) == 1
        assert await store.get("race/commit") == str(winners[0]).encode()
        assert os.listdir(tmp_path / "bucket" / "race") == ["commit"]  # no temp file left


# --- URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "",
        "bucket/prefix",
        "gs://bucket",
        "file://relative/path",
        "file:///abs?x=1",
        "s3://",
        "s3://Upper",
        "s3://ab",
        "s3://user:pw@bucket",
        "s3://bucket:9000",
        "s3://bucket/a//b",
        "s3://bucket/../b",
        "s3://bucket?endpoint=http://x",
        "s3://bucket?endpoint_url=ftp://x",
        "s3://bucket?endpoint_url=",
        "s3://bucket?region=a&region=b",
        "s3://bucket#frag",
    ],
)
def test_bad_urls_are_rejected_with_the_reason(url):
    with pytest.raises(InvalidObjectStoreUrl) as caught:
        open_object_store(url)
    assert caught.value.url == url
    assert caught.value.reason


def test_half_a_credential_pair_is_rejected():
    with pytest.raises(InvalidObjectStoreUrl) as caught:
        open_object_store("s3://bucket", env={"AWS_ACCESS_KEY_ID": "only-the-id"})
    assert "AWS_SECRET_ACCESS_KEY" in caught.value.reason


async def test_file_url_names_the_directory(tmp_path):
    root = tmp_path / "with space"
    async with open_object_store(root.as_uri()) as store:
        await store.put("t/0/k", b"v")
    assert Path(root, "t", "0", "k").read_bytes() == b"v"
