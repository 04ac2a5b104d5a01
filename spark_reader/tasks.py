"""Running one planned task on an executor, for the batch and the streaming readers alike.

Both readers (source.py, stream.py) plan picklable tasks (plan.py) on the driver and hand them
to `read_task` on the executors; keeping it here, below both, means neither reader imports the
other. A task opens its own bucket client (or broker connection) and closes it when done.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

from .bucket import BucketLocation, open_bucket, resolve_location
from .filters import Pushdown
from .options import ReadOptions
from .plan import BrokerRange, BucketRange, Task
from .read import read_bucket_range


def locate(options: ReadOptions) -> BucketLocation:
    """The bucket of `options`, resolved with the driver's environment."""
    return resolve_location(options.path, options.store_env, os.environ)


def read_task(task: Task | None, location: BucketLocation, options: ReadOptions, pushdown: Pushdown) -> Iterator[pa.RecordBatch]:
    """The records of one task (None: Spark's stand-in when a plan has no tasks)."""
    if isinstance(task, BucketRange):
        bucket = open_bucket(location)
        try:
            yield from read_bucket_range(bucket, task, pushdown.bounds, options.include_headers, options.fail_on_data_loss)
        finally:
            bucket.close()
    elif isinstance(task, BrokerRange):
        from .hot_tail import read_broker_range  # imported here: diskless.wire loads asyncio

        yield from read_broker_range(task, pushdown.bounds, options.include_headers, options.fail_on_data_loss)
