"""Which object-store failures to retry, and how long to wait between tries. Pure.

Backoff is exponential with full jitter (AWS Architecture Blog, "Exponential Backoff And
Jitter", 2015): before retry n (n >= 1) wait uniformly in
[0, min(max_backoff_ms, base_backoff_ms * 2**(n-1))). Full jitter spreads brokers that were
throttled together, so they do not come back in lockstep.

Retried: connection failures and timeouts (decided by the adapter, which knows its library's
exception types), HTTP 5xx except 501, HTTP 429, and the S3 error codes in RETRYABLE_CODES
(throttling, internal errors, and 409 ConditionalRequestConflict, which S3 asks clients to
retry). Everything else is final on the first answer.
"""

from __future__ import annotations

from dataclasses import dataclass

RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`max_attempts` counts every try, the first included: 1 means never retry."""

    max_attempts: int = 5
    base_backoff_ms: float = 100.0
    max_backoff_ms: float = 5_000.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_backoff_ms < 0 or self.max_backoff_ms < 0:
            raise ValueError("backoff times must be >= 0")


def is_retryable_response(code: str, http_status: int | None) -> bool:
    """Whether an error answer from the store is worth another try."""
    if code in RETRYABLE_CODES:
        return True
    if http_status is None:
        return False
    return http_status == 429 or (http_status >= 500 and http_status != 501)


def backoff_ms(policy: RetryPolicy, retry_number: int, random01: float) -> float:
    """The wait before retry `retry_number` (1 for the first retry); `random01` is in [0, 1)."""
    ceiling = min(policy.max_backoff_ms, policy.base_backoff_ms * 2.0 ** (retry_number - 1))
    return random01 * ceiling
