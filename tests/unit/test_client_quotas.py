"""Client quotas' cores (diskless/broker/quotas/): Kafka's rate and throttle arithmetic, the
token bucket of controller mutations, which entity's quota applies to a client and who shares
its rate, AlterClientQuotas' checks, DescribeClientQuotas' matching, the store encoding, and
the step timing of request_percentage."""

from __future__ import annotations

import math

import asyncio
import datetime

import pytest
from kio.schema.fetch.v12 import response as fetch_v12
from kio.schema.errors import ErrorCode

from diskless.broker.quotas.client_quotas import (
    ClientQuotas,
    MutationQuota,
    QuotaWindows,
    charge_request,
    charge_response,
    fetched_bytes,
    user_of,
)
from diskless.broker.quotas.enforcement import on_loop
from diskless.broker.quotas.entities import (
    FilterComponent,
    InvalidQuota,
    altered,
    check_filter,
    entity_of,
    from_store,
    matches,
    resource_name,
    to_store,
)
from diskless.broker.quotas.rate import Rate, TokenBucket
from diskless.broker.quotas.throttling import client_throttles, throttle_of, with_throttle

# --- rates ------------------------------------------------------------------------------------


def test_rate_counts_the_missing_windows_and_throttles_as_kafka() -> None:
    rate = Rate(11, 1000)
    rate.record(1000, 0)
    # 10 windows of 1 s counted at least: 1000 B over 10 s.
    assert rate.window_size_ms(0) == 10_000 and rate.measure(0) == 100.0
    assert rate.throttle_time_ms(100.0, 0) == 0
    rate.record(1000, 500)
    # 2000 B over 10.5 s = 190.47 B/s; against 100 B/s: (190.47 - 100) / 100 x 10.5 s = 9.5 s.
    assert rate.window_size_ms(500) == 10_500
    assert rate.throttle_time_ms(100.0, 500) == 9500


def test_rate_forgets_windows_past_all_samples() -> None:
    rate = Rate(2, 1000)
    rate.record(500, 0)
    rate.record(500, 1000)
    assert rate.measure(1500) == 1000 / 1.5
    rate.record(0, 3000)  # the window of 0 is two windows old: gone; that of 1000 too at 3000
    assert rate.measure(3000) == 0.0


def test_token_bucket_lets_one_burst_below_zero_then_refuses_until_refilled() -> None:
    bucket = TokenBucket(2, 1000)  # burst: 2 windows x 1 s x rate
    assert not bucket.exceeded(5.0, 0)
    bucket.record(13, 5.0, 0)  # 10 tokens - 13 = -3
    assert bucket.exceeded(5.0, 0) and bucket.throttle_time_ms(5.0, 0) == 600
    assert bucket.exceeded(5.0, 500)  # -0.5
    assert not bucket.exceeded(5.0, 600) and bucket.throttle_time_ms(5.0, 600) == 0
    assert not bucket.exceeded(5.0, 60_000)  # refilled to the burst, no more
    bucket.record(10, 5.0, 60_000)
    assert not bucket.exceeded(5.0, 60_000)


# --- which quota applies ------------------------------------------------------------------------


def quotas_of(configured: dict, windows: QuotaWindows = QuotaWindows(2, 1000, 2, 1000)) -> ClientQuotas:
    quotas = ClientQuotas(windows)
    quotas.set_configured(configured)
    return quotas


def test_the_most_specific_entity_with_the_key_applies_in_kafkas_order() -> None:
    quotas = quotas_of({
        (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 1.0},
        (("client-id", None), ("user", "alice")): {"producer_byte_rate": 2.0},
        (("user", "alice"),): {"producer_byte_rate": 3.0, "consumer_byte_rate": 3.0},
        (("client-id", "app"), ("user", None)): {"producer_byte_rate": 4.0},
        (("user", None),): {"request_percentage": 6.0},
        (("client-id", "app"),): {"request_percentage": 7.0, "controller_mutation_rate": 7.0},
        (("client-id", None),): {"producer_byte_rate": 8.0},
    })  # fmt: skip
    assert quotas.bound("consumer_byte_rate", "alice", "app") == (1.0, ("alice", "app"))
    assert quotas.bound("producer_byte_rate", "alice", "app") == (2.0, ("alice", "app"))
    assert quotas.bound("consumer_byte_rate", "alice", "other") == (3.0, ("alice", ""))  # alice's client ids share
    assert quotas.bound("producer_byte_rate", "bob", "app") == (4.0, ("bob", "app"))
    assert quotas.bound("request_percentage", "bob", "app") == (6.0, ("bob", ""))
    assert quotas.bound("controller_mutation_rate", "bob", "app") == (7.0, ("", "app"))  # every user of app shares
    assert quotas.bound("producer_byte_rate", "bob", "x") == (8.0, ("", "x"))
    assert quotas.bound("consumer_byte_rate", "bob", "x") is None
    assert not quotas.has("connection_creation_rate") and quotas.active


def test_clients_sharing_an_entity_share_one_rate() -> None:
    quotas = quotas_of({(("user", "alice"),): {"producer_byte_rate": 100.0}})
    assert quotas.record("producer_byte_rate", "alice", "a", 100, 0) == 0  # 100 B over 1 s
    # The second client id of alice adds to the same rate: 200 B/s against 100.
    assert quotas.record("producer_byte_rate", "alice", "b", 100, 0) == 1000
    assert quotas.record("producer_byte_rate", "bob", "a", 10**9, 0) == 0  # no quota for bob
    assert quotas.measured == 1


def test_a_changed_quota_applies_at_once_and_a_removed_one_stops_throttling() -> None:
    quotas = quotas_of({(("client-id", "c"),): {"producer_byte_rate": 100.0}})
    assert quotas.record("producer_byte_rate", "u", "c", 300, 0) == 2000
    quotas.set_configured({(("client-id", "c"),): {"producer_byte_rate": 1000.0}})
    assert quotas.record("producer_byte_rate", "u", "c", 0, 0) == 0
    quotas.set_configured({})
    assert not quotas.active and quotas.record("producer_byte_rate", "u", "c", 10**9, 0) == 0


def test_ip_connection_rate_uses_the_ip_then_its_default_bounded_by_a_window() -> None:
    quotas = quotas_of({(("ip", "10.0.0.1"),): {"connection_creation_rate": 1.0}, (("ip", None),): {"connection_creation_rate": 100.0}})
    assert quotas.record_ip_connection("10.0.0.1", 0) == 0
    assert quotas.record_ip_connection("10.0.0.1", 0) == 1000  # (2 - 1) / 1 x 1 s
    for _ in range(3):
        quotas.record_ip_connection("10.0.0.1", 0)
    assert quotas.record_ip_connection("10.0.0.1", 0) == 1000  # at most one window
    assert [quotas.record_ip_connection("10.0.0.2", 0) for _ in range(5)] == [0] * 5
    # Refused connections are not counted (as Kafka): the rate is the one admitted, over a second.
    assert quotas._ip_rates["10.0.0.1"].measure(0) == 1.0


def test_a_consumers_fetch_is_capped_at_what_its_rate_allows_over_the_windows() -> None:
    quotas = quotas_of({(("client-id", "c"),): {"consumer_byte_rate": 1000.0}}, QuotaWindows(11, 1000, 11, 1000))
    assert quotas.max_fetch_bytes("u", "c") == 10_000  # 1000 B/s x 10 whole windows of 1 s
    assert quotas.max_fetch_bytes("u", "other") is None


def test_mutation_quota_is_strict_only_from_kip_599_versions() -> None:
    quotas = quotas_of({(("client-id", "c"),): {"controller_mutation_rate": 1.0}})
    now = [0]
    strict = MutationQuota(quotas, "User:alice", "c", True, lambda: now[0])
    permissive = MutationQuota(quotas, "User:alice", "c", False, lambda: now[0])
    assert not strict.exceeded()
    strict.record(5)  # 2 tokens - 5
    assert strict.exceeded() and not permissive.exceeded()
    assert strict.throttle_time() == datetime.timedelta(seconds=3)
    now[0] = 3000
    assert not strict.exceeded()


def test_charges_count_produce_bytes_as_read_and_fetched_records_once_handled() -> None:
    quotas = quotas_of({(("client-id", "c"),): {"producer_byte_rate": 100.0, "consumer_byte_rate": 100.0}})
    assert charge_request(quotas, 0, "ANONYMOUS", "c", 300, 0) == 2000
    assert charge_request(quotas, 3, "ANONYMOUS", "c", 10**9, 0) == 0  # only Produce counts as read
    records = b"r" * 250
    response = fetch_v12.FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(fetch_v12.FetchableTopicResponse(topic="t", partitions=(
            fetch_v12.PartitionData(partition_index=0, error_code=ErrorCode.none, high_watermark=1, last_stable_offset=1,
                                    log_start_offset=0, diverging_epoch=fetch_v12.EpochEndOffset(epoch=-1, end_offset=-1),
                                    current_leader=fetch_v12.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                                    snapshot_id=fetch_v12.SnapshotId(end_offset=-1, epoch=-1),
                                    aborted_transactions=None, preferred_read_replica=-1, records=records),
        )),),
    )  # fmt: skip
    assert fetched_bytes(response) == 250
    assert charge_response(quotas, 1, object(), response, "ANONYMOUS", "c", 0, 0) == 1500


def test_request_percentage_counts_event_loop_time_except_before_authentication() -> None:
    quotas = quotas_of({(("client-id", "c"),): {"request_percentage": 1.0}})
    # 20 ms on the loop = 2 percent-seconds over 1 s against 1 %: (2 - 1) / 1 x 1 s.
    assert charge_response(quotas, 3, object(), None, "ANONYMOUS", "c", 20_000_000, 0) == 1000
    assert charge_response(quotas, 18, object(), None, "ANONYMOUS", "c", 10**12, 0) == 0  # ApiVersions: exempt


def test_principal_names_are_the_user_entity() -> None:
    assert user_of("User:alice") == "alice" and user_of("User:ANONYMOUS") == "ANONYMOUS" and user_of("bare") == "bare"


# --- AlterClientQuotas and DescribeClientQuotas --------------------------------------------------


def test_entities_are_checked_and_sorted() -> None:
    assert entity_of([("user", "alice"), ("client-id", None)]) == (("client-id", None), ("user", "alice"))
    for pairs, message in [
        ([], "Invalid empty client quota entity"),
        ([("user", "a"), ("user", "b")], "Duplicate user entity in the client quota entity"),
        ([("ip", None), ("client-id", "c")], "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        ([("ip", "::1x")], "::1x is not a valid IP address"),
        ([("topic", "t")], "Unhandled client quota entity type: topic"),
    ]:
        with pytest.raises(InvalidQuota) as refused:
            entity_of(pairs)
        assert str(refused.value) == message
    assert entity_of([("ip", "::1")]) == (("ip", "::1"),)
    # Kept as connections' addresses are compared.
    assert entity_of([("ip", "2001:DB8:0::1")]) == (("ip", "2001:db8::1"),)
    assert entity_of([("ip", "::ffff:10.0.0.1")]) == (("ip", "10.0.0.1"),)


def test_alterations_set_remove_and_check_values() -> None:
    entity = (("user", "alice"),)
    assert altered(entity, {"producer_byte_rate": 1.0}, [("consumer_byte_rate", 5.0, False), ("producer_byte_rate", 0.0, True)]) == {
        "consumer_byte_rate": 5.0
    }
    assert altered(entity, {}, [("request_percentage", 0.25, False)]) == {"request_percentage": 0.25}
    for ops, message in [
        ([("producer_byte_rate", 2.5, False)], "Configuration producer_byte_rate must be a Long value"),
        ([("controller_mutation_rate", 0.0, False)], "Configuration controller_mutation_rate must be greater than 0, not 0"),
        ([("connection_creation_rate", 1.0, False)], "Invalid configuration key connection_creation_rate"),
        ([("producer_byte_rate", math.nan, False)], "Configuration producer_byte_rate must be a finite number, not nan"),
        ([("consumer_byte_rate", math.inf, False)], "Configuration consumer_byte_rate must be a finite number, not inf"),
        ([("request_percentage", math.inf, False)], "Configuration request_percentage must be a finite number, not inf"),
    ]:
        with pytest.raises(InvalidQuota) as refused:
            altered(entity, {}, ops)
        assert str(refused.value) == message
    with pytest.raises(InvalidQuota, match="must be an Integer value"):
        altered((("ip", None),), {}, [("connection_creation_rate", 2.0**31, False)])


def test_filters_match_exact_default_and_any_names_strictly_or_not() -> None:
    alice_app = (("client-id", "app"), ("user", "alice"))
    default_user = (("user", None),)
    exact = FilterComponent("user", 0, "alice")
    default = FilterComponent("user", 1, None)
    any_user = FilterComponent("user", 2, None)
    assert matches(alice_app, [exact], False) and not matches(alice_app, [exact], True)
    assert matches(default_user, [default], True) and not matches(alice_app, [default], False)
    assert matches(default_user, [any_user], False) and matches(alice_app, [any_user], False)
    assert matches(alice_app, [any_user, FilterComponent("client-id", 0, "app")], True)
    assert matches(alice_app, [], False) and not matches(alice_app, [], True)
    check_filter([any_user, FilterComponent("client-id", 1, None)])


def test_store_encoding_keeps_defaults_apart_from_names() -> None:
    entity = (("client-id", None), ("user", "<default>"))
    name = resource_name(entity)
    assert name == '[["client-id",null],["user","<default>"]]'
    assert from_store({name: to_store({"producer_byte_rate": 1024.0})}) == {entity: {"producer_byte_rate": 1024.0}}


# --- throttling and step timing ---------------------------------------------------------------------


def test_kip_219_versions_and_the_throttle_field() -> None:
    assert not client_throttles(0, 5) and client_throttles(0, 6)
    assert not client_throttles(1, 7) and client_throttles(1, 8)
    assert not client_throttles(48, 0) and client_throttles(43, 0)  # Kafka says it of some later APIs only
    response = fetch_v12.FetchResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0, responses=())
    assert throttle_of(with_throttle(response, 1500)) == 1500
    assert with_throttle(None, 10) is None


class _Suspend:
    """An await that hands `value` to whoever drives the coroutine (the event loop's place)."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __await__(self):
        return (yield self.value)


async def _handler(fail: bool) -> str:
    resumed = await _Suspend("waiting for the store")
    if fail:
        raise ValueError(f"refused after {resumed}")
    return f"answer after {resumed}"


def test_on_loop_adds_up_the_steps_and_passes_results_errors_and_cancellation() -> None:
    spent = [0]
    driven = on_loop(_handler(False), spent)
    assert driven.send(None) == "waiting for the store"
    first = spent[0]
    assert first > 0
    with pytest.raises(StopIteration) as done:
        driven.send("the commit")
    assert done.value.value == "answer after the commit" and spent[0] > first

    failing = on_loop(_handler(True), [0])
    failing.send(None)
    with pytest.raises(ValueError, match="refused after the commit"):
        failing.send("the commit")

    cancelled = on_loop(_handler(False), [0])
    cancelled.send(None)
    with pytest.raises(asyncio.CancelledError):
        cancelled.throw(asyncio.CancelledError())
