"""The client's one retry helper: retriable errors retried with backoff, others raised at once."""

from __future__ import annotations

import asyncio

import pytest

from diskless.client.errors import KafkaTimeoutError, NotCoordinatorError, for_code
from diskless.client.retry import retrying

TopicAuthorizationFailedError = for_code(29)  # not retriable


def _run(attempts: list, **kwargs):
    calls = []
    retried = []

    async def attempt():
        calls.append(len(calls))
        outcome = attempts[len(calls) - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def main():
        return await retrying(attempt, retry_backoff_ms=1, on_retry=retried.append, **kwargs)

    return asyncio.run(main()), calls, retried


def test_retriable_errors_are_retried_until_success() -> None:
    result, calls, retried = _run([NotCoordinatorError(), NotCoordinatorError(), "done"], timeout_ms=10000)
    assert (result, len(calls), [type(e) for e in retried]) == ("done", 3, [NotCoordinatorError] * 2)


def test_an_error_that_is_not_retriable_is_raised_at_once() -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        _run([TopicAuthorizationFailedError(), "never"], timeout_ms=10000)


def test_the_caller_narrows_what_is_retriable() -> None:
    with pytest.raises(NotCoordinatorError):
        _run([NotCoordinatorError(), "never"], timeout_ms=10000, retriable=lambda exc: exc.errno != 16)


def test_at_the_deadline_the_last_error_or_its_replacement_is_raised() -> None:
    with pytest.raises(NotCoordinatorError):
        _run([NotCoordinatorError()] * 3, timeout_ms=0)
    with pytest.raises(KafkaTimeoutError) as info:
        _run([NotCoordinatorError()] * 3, timeout_ms=0, on_deadline=lambda exc: KafkaTimeoutError("x", 0))
    assert isinstance(info.value.__cause__, NotCoordinatorError)
