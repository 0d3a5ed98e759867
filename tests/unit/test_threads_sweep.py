"""The thread sweep's choice of points, interleaving and recommendation (exact, fake runs)."""

from __future__ import annotations

import pytest

from diagnose.layers.threads import sweep


def test_thread_values_cover_one_to_usable_and_the_configured_count():
    assert sweep.thread_values(2, 8) == [1, 2, 8]
    assert sweep.thread_values(2, 2) == [1, 2]
    assert sweep.thread_values(12, None) == [1, 2, 4, 8, 12]
    assert sweep.worker_values(2, 4) == [0, 1, 2, 4]


def test_points_are_interleaved_and_the_smallest_within_tolerance_wins():
    calls = []
    # seconds per iteration: 2 threads is best; 1 thread 3% slower (within 5%); 8 threads much slower
    timing = {1: [1.03, 1.031], 2: [1.0, 1.0], 8: [2.0, 1.9]}

    def run_point(threads, workers):
        calls.append(threads)
        return timing[threads][sum(1 for c in calls if c == threads) - 1]

    result = sweep.run_sweep(run_point, usable_cpus=2, configured_threads=8, configured_workers=None,
                             has_dataloader=False, repeats=2)
    assert calls == [1, 2, 8, 1, 2, 8]  # rounds, not blocks
    rec = result["recommendation"]
    assert rec["intra_op_threads"] == 1 and rec["best"]["intra_op_threads"] == 2
    assert rec["env"] == "OMP_NUM_THREADS=1 MKL_NUM_THREADS=1" and rec["code"] == "torch.set_num_threads(1)"
    eight = next(p for p in result["threads"] if p["intra_op_threads"] == 8)
    assert eight["median_s"] == pytest.approx(1.95) and eight["spread_pct"] == pytest.approx(5.1)
    assert rec["gain_vs_configured_pct"] == pytest.approx(100 * (1.95 / 1.0305 - 1), abs=0.1)


def test_failed_runs_are_counted_not_averaged_and_workers_are_swept_at_the_chosen_threads():
    seen = []

    def run_point(threads, workers):
        seen.append((threads, workers))
        if threads == 1:
            return None  # e.g. the target crashed at this setting
        if workers is None:
            return 1.0
        return {0: 3.0, 1: 1.6, 2: 1.0, 4: 1.02}[workers]

    result = sweep.run_sweep(run_point, usable_cpus=2, configured_threads=2, configured_workers=4,
                             has_dataloader=True, repeats=1)
    one = next(p for p in result["threads"] if p["intra_op_threads"] == 1)
    assert one["failed_runs"] == 1 and one["throughput_per_s"] is None
    assert result["recommendation"]["intra_op_threads"] == 2
    assert {w for t, w in seen if w is not None} == {0, 1, 2, 4}
    assert all(t == 2 for t, w in seen if w is not None)
    assert result["recommendation"]["dataloader_workers"] == 2
    assert "num_workers=2" in result["recommendation"]["code"]


def _fixed(timing):
    """run_point replaying `timing[threads]` run by run."""
    seen: dict[int, int] = {}

    def run_point(threads, workers):
        seen[threads] = seen.get(threads, 0) + 1
        return timing[threads][seen[threads] - 1]
    return run_point


def test_more_threads_than_cpus_with_an_unclear_lead_is_passed_over():
    # the CI run that recommended 8 threads on 2 CPUs: one run each, 8 ahead by 5.6%
    result = sweep.run_sweep(_fixed({1: [0.338], 2: [0.206], 8: [0.195]}), usable_cpus=2, configured_threads=8,
                             configured_workers=None, has_dataloader=False, repeats=1)
    rec = result["recommendation"]
    assert rec["intra_op_threads"] == 8  # one run each: a lead above the tolerance is all there is to go on
    # the same lead with two runs each that overlap is noise: the usable CPUs win
    result = sweep.run_sweep(_fixed({1: [0.338, 0.33], 2: [0.206, 0.19], 8: [0.195, 0.18]}), usable_cpus=2,
                             configured_threads=8, configured_workers=None, has_dataloader=False, repeats=2)
    rec = result["recommendation"]
    assert rec["intra_op_threads"] == 2 and rec["best"]["intra_op_threads"] == 2
    assert rec["passed_over"]["intra_op_threads"] == 8
    assert rec["passed_over"]["lead_pct"] == pytest.approx(100 * (0.198 / 0.1875 - 1), abs=0.1)
    # a lead under the tolerance is passed over even with one run
    result = sweep.run_sweep(_fixed({1: [0.338], 2: [0.2], 8: [0.195]}), usable_cpus=2, configured_threads=8,
                             configured_workers=None, has_dataloader=False, repeats=1)
    assert result["recommendation"]["intra_op_threads"] == 2
    assert result["recommendation"]["passed_over"]["lead_pct"] == pytest.approx(2.6)


def test_more_threads_than_cpus_that_win_in_every_run_are_recommended():
    # e.g. a workload blocked on I/O in its pool: more threads than CPUs really help
    result = sweep.run_sweep(_fixed({1: [1.0, 1.0], 2: [0.6, 0.62], 8: [0.3, 0.32]}), usable_cpus=2,
                             configured_threads=8, configured_workers=None, has_dataloader=False, repeats=2)
    rec = result["recommendation"]
    assert rec["intra_op_threads"] == 8 and rec["passed_over"] is None
