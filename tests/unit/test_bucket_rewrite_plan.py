"""Which bucket segments the cleaned local copies replace, and how they are merged (sans-IO)."""

from __future__ import annotations

from pathlib import Path

from cold_tier.layout import CommittedSegment
from diskless.broker.compaction.bucket import plan_rewrites
from hot_tier import SegmentInfo


def bucket(base: int, next_offset: int, size: int) -> CommittedSegment:
    return CommittedSegment("t", 0, base, next_offset - 1, 0, 0, size, 0, f"u{base}")


def local(base: int, next_offset: int, size: int, active: bool = False) -> SegmentInfo:
    path = Path(f"/nowhere/{base:020d}")
    return SegmentInfo(base, next_offset, size, 0, path.with_suffix(".log"), path.with_suffix(".index"), path.with_suffix(".timeindex"), active)


def plan(remote, locals_, max_bytes=1000):
    return [([s.base_offset for s in r.replaced], [s.base_offset for s in r.local]) for r in plan_rewrites(remote, locals_, max_bytes)]


def test_unchanged_copies_are_left_alone() -> None:
    remote = [bucket(0, 10, 500), bucket(10, 20, 500)]
    assert plan(remote, [local(0, 10, 500), local(10, 20, 500), local(20, 20, 0, active=True)]) == []


def test_a_copy_known_cleaned_is_rewritten_though_its_size_is_the_same() -> None:
    # Stamping a delete horizon may leave a batch its size: the pass's own list says so.
    remote = [bucket(0, 10, 500), bucket(10, 20, 500)]
    locals_ = [local(0, 10, 500), local(10, 20, 500), local(20, 20, 0, active=True)]
    rewrites = plan_rewrites(remote, locals_, 1000, cleaned={10})
    assert [([s.base_offset for s in r.replaced], [s.base_offset for s in r.local]) for r in rewrites] == [([0, 10], [0, 10])]


def test_cleaned_copies_are_merged_up_to_segment_bytes() -> None:
    remote = [bucket(0, 10, 900), bucket(10, 20, 900), bucket(20, 30, 900), bucket(30, 40, 900)]
    locals_ = [local(0, 10, 400), local(10, 20, 500), local(20, 30, 300), local(30, 40, 900), local(40, 40, 0, active=True)]
    # 400 + 500 fit in 1000; 300 starts the next group, 300 + 900 does not fit; 900 is unchanged alone.
    assert plan(remote, locals_) == [([0, 10], [0, 10]), ([20], [20])]


def test_an_unchanged_neighbour_joins_a_changed_segment_it_fits_with() -> None:
    remote = [bucket(0, 20, 300), bucket(20, 30, 900)]  # 0-19: merged by an earlier rewrite
    locals_ = [local(0, 10, 100), local(10, 20, 200), local(20, 30, 100), local(30, 30, 0, active=True)]
    assert plan(remote, locals_) == [([0, 20], [0, 10, 20])]


def test_a_bucket_segment_the_local_log_does_not_cover_exactly_breaks_the_run() -> None:
    # 0-9 has no local copy (deleted disk: the local log starts later); 20-29 ends inside a
    # local segment (boundaries differ): neither is rewritten nor merged across.
    remote = [bucket(0, 10, 900), bucket(10, 20, 900), bucket(20, 30, 900), bucket(30, 40, 900)]
    locals_ = [local(10, 20, 100), local(20, 35, 100), local(35, 40, 100), local(40, 40, 0, active=True)]
    assert plan(remote, locals_) == [([10], [10])]


def test_the_active_segment_is_never_a_source() -> None:
    remote = [bucket(0, 10, 900)]
    assert plan(remote, [local(0, 10, 100, active=True)]) == []
