"""Worker counters and fixed-bucket duration histograms: no database."""

from __future__ import annotations

import threading

import pytest

from django_dbqueue.worker.counters import (
    CLAIM_BUCKETS,
    COUNTERS,
    RUN_BUCKETS,
    Histogram,
    HistogramSnapshot,
    WorkerCounters,
)


def test_histogram_counts_each_value_in_the_first_bucket_whose_bound_it_does_not_exceed() -> None:
    histogram = Histogram((0.1, 1.0, 10.0))
    for seconds in (0.05, 0.1, 0.5, 1.0, 3.0, 10.0, 11.0, 500.0):
        histogram.observe(seconds)
    snapshot = histogram.snapshot()
    # <=0.1: 0.05, 0.1 | <=1: +0.5, 1.0 | <=10: +3, 10 | above: 11, 500 (only in count)
    assert snapshot == HistogramSnapshot(
        buckets=(0.1, 1.0, 10.0),
        cumulative=(2, 4, 6),
        sum=pytest.approx(525.65),
        count=8,
    )


def test_empty_histogram_snapshot_is_all_zeros() -> None:
    snapshot = Histogram((1.0, 2.0)).snapshot()
    assert (snapshot.cumulative, snapshot.sum, snapshot.count) == ((0, 0), 0.0, 0)


def test_histogram_snapshot_is_a_copy_later_observations_do_not_change() -> None:
    histogram = Histogram((1.0,))
    histogram.observe(0.5)
    before = histogram.snapshot()
    histogram.observe(0.5)
    assert (before.count, histogram.snapshot().count) == (1, 2)


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (1.0, 1.0)])
def test_histogram_rejects_buckets_that_are_not_strictly_increasing(
    buckets: tuple[float, ...],
) -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        Histogram(buckets)


def test_concurrent_observations_are_all_counted() -> None:
    histogram = Histogram((0.5, 1.0))
    threads, per_thread = 8, 2_000
    start = threading.Barrier(threads)

    def observe_many() -> None:
        start.wait()
        for _ in range(per_thread):
            histogram.observe(0.25)

    workers = [threading.Thread(target=observe_many) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    snapshot = histogram.snapshot()
    assert snapshot.count == snapshot.cumulative[0] == threads * per_thread
    assert snapshot.sum == pytest.approx(0.25 * threads * per_thread)


def test_snapshot_still_returns_exactly_the_counters() -> None:
    counters = WorkerCounters()
    counters.add("claimed", 3)
    counters.add("renew_failures")
    counters.run_duration.observe(0.2)
    assert counters.snapshot() == {
        "claimed": 3,
        "succeeded": 0,
        "retried": 0,
        "dead": 0,
        "cancelled": 0,
        "lease_lost": 0,
        "unrecorded": 0,
        "renew_failures": 1,
    }
    assert tuple(counters.snapshot()) == COUNTERS


def test_each_worker_has_its_own_claim_and_run_histograms() -> None:
    first, second = WorkerCounters(), WorkerCounters()
    first.claim_duration.observe(0.002)
    first.run_duration.observe(2.0)
    assert first.claim_duration.buckets == CLAIM_BUCKETS
    assert first.run_duration.buckets == RUN_BUCKETS
    assert (first.claim_duration.snapshot().count, first.run_duration.snapshot().count) == (1, 1)
    assert (second.claim_duration.snapshot().count, second.run_duration.snapshot().count) == (0, 0)


def test_adding_to_an_unknown_counter_is_refused() -> None:
    with pytest.raises(ValueError, match="not a worker counter"):
        WorkerCounters().add("claim_duration")
