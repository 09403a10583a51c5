"""Worker counters and fixed-bucket duration histograms: no database."""

from __future__ import annotations

import threading

import pytest

from django_dbqueue.worker.counters import (
    CLAIM_BUCKETS,
    COUNTERS,
    MAX_TASK_LABELS,
    OTHER_TASKS,
    RUN_BUCKETS,
    WAIT_BUCKETS,
    Histogram,
    HistogramSnapshot,
    TaskHistograms,
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
    counters.add("leases_lost")
    counters.run_duration.observe(0.2)
    assert counters.snapshot() == {
        "claimed": 3,
        "succeeded": 0,
        "retried": 0,
        "dead": 0,
        "cancelled": 0,
        "lease_lost": 0,
        "unrecorded": 0,
        "leases_lost": 1,
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


def test_task_histograms_keep_one_histogram_per_task() -> None:
    by_task = TaskHistograms((1.0, 10.0))
    by_task.observe_all([("app.a", 0.5), ("app.b", 5.0), ("app.a", 20.0)])
    snapshot = by_task.snapshot()
    assert list(snapshot) == ["app.a", "app.b"]
    assert (snapshot["app.a"].cumulative, snapshot["app.a"].count) == ((1, 1), 2)
    assert (snapshot["app.b"].cumulative, snapshot["app.b"].count) == ((0, 1), 1)


def test_task_histograms_fold_tasks_past_the_cap_into_other() -> None:
    by_task = TaskHistograms((1.0,), max_labels=3)
    by_task.observe_all((f"app.t{n}", 0.5) for n in range(5))
    by_task.observe_all([("app.t0", 0.5), ("app.t4", 0.5), ("app.t9", 0.5)])
    snapshot = by_task.snapshot()
    assert set(snapshot) == {"app.t0", "app.t1", "app.t2", OTHER_TASKS}
    assert snapshot["app.t0"].count == 2  # a task labelled before the cap keeps its label
    assert snapshot[OTHER_TASKS].count == 4  # t3, t4, t4 again and t9
    assert sum(histogram.count for histogram in snapshot.values()) == 8


def test_task_histograms_default_cap_bounds_the_label_set() -> None:
    by_task = TaskHistograms(RUN_BUCKETS)
    by_task.observe_all((f"app.t{n}", 0.1) for n in range(MAX_TASK_LABELS * 3))
    snapshot = by_task.snapshot()
    assert len(snapshot) == MAX_TASK_LABELS + 1
    assert snapshot[OTHER_TASKS].count == MAX_TASK_LABELS * 2


def test_task_histograms_refuse_bad_buckets_at_once() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        TaskHistograms((2.0, 1.0))


def test_task_histograms_count_every_observation_from_many_threads() -> None:
    by_task = TaskHistograms(WAIT_BUCKETS, max_labels=5)
    start = threading.Barrier(4)

    def observe(thread: int) -> None:
        start.wait()
        for n in range(1000):
            by_task.observe_all([(f"app.t{(thread + n) % 10}", 0.01)])

    threads = [threading.Thread(target=observe, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    snapshot = by_task.snapshot()
    assert len(snapshot) == 6
    assert sum(histogram.count for histogram in snapshot.values()) == 4000
