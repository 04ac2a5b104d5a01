"""Object storage: the store adapters and the bucket layout.

    store    the `ObjectStore` contract (async) and `ObjectInfo`
    s3       S3-compatible adapter (aiobotocore)
    local    local-directory adapter, the embedded default bucket
    url      `open_object_store(url, env=...)`, `parse_object_store_url`
    config   `S3Config`, `LocalStoreConfig`: a parsed URL
    retry    `RetryPolicy` and the pure retry/backoff decisions
    health   `StoreHealth`: whether a store answers, its outage log lines, waking retries when it is back
    layout   object keys of committed segments: the contract Spark reads
    errors   every error this package raises

Nothing is imported here on purpose: `cold_tier.layout` must stay importable by the Spark
reader without loading asyncio or aiobotocore.
"""
