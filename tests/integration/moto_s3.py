"""A real S3 server for tests: moto's ThreadedMotoServer on 127.0.0.1, over HTTP.

    from tests.integration.moto_s3 import moto_s3_server

    with moto_s3_server() as s3:
        bucket = s3.create_bucket()               # a fresh, randomly named bucket
        url = s3.url(bucket, prefix="cluster-a")  # s3://bucket/cluster-a?endpoint_url=...
        store = open_object_store(url, env=s3.env())
        ...
        s3.stop()      # the port now refuses connections
        s3.restart()   # same port again; recreate buckets with s3.create_bucket(bucket)

moto keeps every bucket in memory, in process-wide backends: buckets outlive a stop/restart
of one server and are shared by every moto server in the test process, hence random bucket
names. Credentials are arbitrary; moto accepts any.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import boto3
from botocore.config import Config
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

HOST = "127.0.0.1"
REGION = "us-east-1"
ACCESS_KEY_ID = "diskless-test"
SECRET_ACCESS_KEY = "diskless-test-secret"


class _ClosingMotoServer(ThreadedMotoServer):
    """moto's stop() shuts the serve loop down but leaves the listening socket open: clients
    would hang instead of being refused, and the port could not be bound again."""

    def stop(self) -> None:
        super().stop()
        if self._server is not None:
            self._server.server_close()
            self._server = None


class MotoS3:
    """One moto S3 server; `port` 0 picks a free port on first start and keeps it after."""

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self._server: _ClosingMotoServer | None = None
        self._client: Any = None

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("the server has not been started yet")
        return self._port

    @property
    def endpoint_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("already running")
        # werkzeug logs every request at INFO; a failing test would drown in them.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = _ClosingMotoServer(ip_address=HOST, port=self._port, verbose=False)
        server.start()
        self._port = server.get_host_and_port()[1]
        self._server = server

    def stop(self) -> None:
        """Stop listening; the port refuses connections until `start()` or `restart()`."""
        if self._client is not None:  # its pooled connections die with the server
            self._client.close()
            self._client = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def restart(self) -> None:
        """Stop if running, then listen on the same port again."""
        self.stop()
        self.start()

    def env(self) -> dict[str, str]:
        """The AWS_* variables a CLI would read, pointing at this server."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": REGION,
        }

    def url(self, bucket: str, prefix: str = "") -> str:
        path = f"/{quote(prefix.strip('/'))}" if prefix.strip("/") else ""
        return f"s3://{bucket}{path}?endpoint_url={quote(self.endpoint_url, safe='')}&region={REGION}"

    def client(self) -> Any:
        """A synchronous boto3 S3 client, for tests to look behind a store's back. Cached until
        the server stops: creating one takes a third of a second."""
        if self._client is None:
            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=REGION,
                aws_access_key_id=ACCESS_KEY_ID,
                aws_secret_access_key=SECRET_ACCESS_KEY,
                config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1}),
            )
        return self._client

    def create_bucket(self, name: str | None = None) -> str:
        """Create `name` (default: a random name) if it does not exist yet; return it."""
        bucket = name or f"test-{secrets.token_hex(6)}"
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return bucket

    def seed_objects(self, bucket: str, objects: Mapping[str, bytes]) -> None:
        """Create many objects fast, straight in moto's in-process backend instead of one
        HTTP PUT each (about 10 ms apiece here). For setting the stage only: the code under
        test must still read and write over HTTP."""
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        for key, data in objects.items():
            backend.put_object(bucket, key, data)


@contextmanager
def moto_s3_server(port: int = 0) -> Iterator[MotoS3]:
    """A started `MotoS3`, stopped on exit."""
    server = MotoS3(port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
