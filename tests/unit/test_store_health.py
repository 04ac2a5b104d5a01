"""cold_tier.health: when an object store's outage is logged (the decisions; no event loop)."""

from __future__ import annotations

from cold_tier.health import StoreHealth, health_of

NAME = "s3://bucket/prefix/ at http://127.0.0.1:9000"


def test_one_warning_when_the_store_stops_answering_then_a_reminder_per_interval() -> None:
    health = StoreHealth(NAME, reminder_interval_ms=30_000)
    assert health.reachable
    assert health.no_answer("put of 'a'", "ReadTimeoutError: Read timeout", 1_000) == (
        f"object store {NAME} does not answer: put of 'a' failed: ReadTimeoutError: Read timeout; retrying, and probing until it answers"
    )
    assert not health.reachable
    assert health.no_answer("head of 'b'", "ReadTimeoutError: Read timeout", 2_000) is None
    assert health.no_answer("head of 'b'", "ReadTimeoutError: Read timeout", 30_999) is None
    assert health.no_answer("list", "EndpointConnectionError: refused", 31_000) == (
        f"object store {NAME} still does not answer after 30 s (4 request(s) failed); last: list: EndpointConnectionError: refused"
    )
    assert health.no_answer("list", "x", 60_999) is None
    assert health.answered(62_500) == f"object store {NAME} answers again after 61.5 s (5 request(s) failed)"
    assert (health.reachable, health.failed_requests, health.recoveries) == (True, 0, 1)


def test_answers_while_reachable_say_nothing() -> None:
    health = StoreHealth(NAME)
    assert health.answered(5) is None
    assert health.recoveries == 0
    assert health.no_answer("get of 'k'", "r", 10) is not None  # a new outage warns again
    assert health.answered(20) == f"object store {NAME} answers again after 0.0 s (1 request(s) failed)"
    assert health.no_answer("get of 'k'", "r", 30) is not None


def test_stores_without_health_get_a_plain_sleep() -> None:
    class Plain:
        pass

    class Kept:
        health = StoreHealth(NAME)

    assert health_of(Plain()) is None
    assert health_of(Kept()) is Kept.health
