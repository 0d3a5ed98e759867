"""Severity thresholds judged against the measured interval (diagnose/report/borderline.py): a number near a
line gets the same severity whichever side of it a run lands on, says it is borderline, with both ends."""

from __future__ import annotations

import pytest
from test_findings import row

from diagnose import findings
from diagnose.findings import stake
from diagnose.findings.operators import HOT_HIGH_PCT
from diagnose.render import fmt
from diagnose.report import borderline
from diagnose.report.model import (
    Efficiency,
    Finding,
    IterationStats,
    Peaks,
    ProcessSpread,
    Report,
    Roofs,
    Run,
    SpreadGroup,
    Stake,
    TargetInfo,
)

LEVELS = ((30.0, "high"), (10.0, "medium"))


def test_a_number_at_a_line_takes_the_milder_side_and_names_the_other_with_both_ends():
    severity, b = borderline.grade(30.0, 0.1, LEVELS, "share of operator CPU time")
    assert severity == "medium"
    assert (b.low, b.high, b.threshold, b.would_be, b.unit) == (27.273, 33.0, 30.0, "high", "%")
    assert fmt.borderline_text(b) == ("borderline high: share of operator CPU time 27.3-33% within this run's noise, "
                                      "the high line at 30%")


@pytest.mark.parametrize("line, milder", [(30.0, "medium"), (10.0, "low")])
def test_runs_landing_on_either_side_of_a_line_within_the_noise_agree(line, milder):
    # the point rule flips between these (a run at 28.6% and one at 31.4%); the interval rule does not
    for value in (0.955 * line, 0.99 * line, line, 1.01 * line, 1.045 * line):
        severity, b = borderline.grade(value, 0.1, LEVELS, "share")
        assert severity == milder and b is not None and b.threshold == line, value


def test_numbers_clear_of_every_line_are_graded_as_before_without_a_borderline():
    assert borderline.grade(50.0, 0.1, LEVELS, "share") == ("high", None)
    assert borderline.grade(20.0, 0.1, LEVELS, "share") == ("medium", None)
    assert borderline.grade(5.0, 0.1, LEVELS, "share") == (None, None)
    # lower is worse (efficiency against the roof): under 10% high, under 25% medium
    eff = ((10.0, "high"), (25.0, "medium"))
    assert borderline.grade(5.0, 0.1, eff, "efficiency", lower_is_worse=True) == ("high", None)
    severity, b = borderline.grade(10.0, 0.1, eff, "efficiency", lower_is_worse=True)
    assert (severity, b.would_be, b.threshold) == ("medium", "high", 10.0)


def test_the_noise_is_the_window_medians_interval_at_least_the_run_to_run_floor():
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0))
    assert borderline.noise(r) == borderline.RUN_NOISE_MIN  # no steps
    r.run.iterations = IterationStats(n=20, median_s=0.1, q1_s=0.099, q3_s=0.101, min_s=0.09, max_s=0.2)
    assert borderline.noise(r) == borderline.RUN_NOISE_MIN  # a quiet run: 2% IQR, the floor holds
    # steps spreading 30% over 20 steps: their median is known to 1.82 x 0.3 / sqrt(20) = 12%, past the floor
    r.run.iterations = IterationStats(n=20, median_s=0.1, q1_s=0.085, q3_s=0.115, min_s=0.08, max_s=0.2)
    assert borderline.noise(r) == pytest.approx(1.82 * 0.3 / 20 ** 0.5)
    # the same spread over 100 steps pins the median closer: the floor again
    r.run.iterations = IterationStats(n=100, median_s=0.1, q1_s=0.085, q3_s=0.115, min_s=0.08, max_s=0.2)
    assert borderline.noise(r) == borderline.RUN_NOISE_MIN
    # a loaded run's steps spread 86%: the interval divides by 1.86, it never reaches 0 nor below
    assert borderline.interval(10.0, 0.86) == pytest.approx((10.0 / 1.86, 18.6))


def _spread(pct: float, contended: bool = False, share_pct: float | None = None) -> Efficiency:
    """A probe whose GEMM call spread pct% (and the step's shares share_pct%, else as much)."""
    share = pct if share_pct is None else share_pct
    groups = [SpreadGroup(name="gemm share", what="", low=0.1, high=0.1, spread_pct=share),
              SpreadGroup(name="gemm call", what="", low=55.0, high=68.0, spread_pct=pct)]
    peaks = Peaks(process_spread=ProcessSpread(processes=8, threads=2, window_s=0.3, groups=groups, spread_pct=pct,
                                               contended=contended))
    return Efficiency(peaks=peaks, roofs=Roofs(threads=2, gflops_per_s=None, gb_per_s=None, ridge_flop_per_byte=None))


def test_the_floor_is_this_machines_measured_process_spread_where_wider_than_ten_percent():
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0))
    assert borderline.floor(r) == borderline.RUN_NOISE_MIN  # no probe: the 10% assumed
    r.efficiency = _spread(4.0)
    assert borderline.floor(r) == borderline.RUN_NOISE_MIN  # a host whose processes agree within 4%: 10% still
    r.efficiency = _spread(25.0)
    assert borderline.floor(r) == borderline.noise(r) == pytest.approx(0.25)
    r.efficiency = _spread(25.0, contended=True)  # others took the CPUs while it was measured: not used
    assert borderline.noise(r) == borderline.RUN_NOISE_MIN


def test_a_hot_operator_near_its_line_is_borderline_where_processes_spread_wider_than_the_run():
    # 12% of operator time: clear of the 10% line on the 10% floor (10.9-13.2%), medium; where the probe measured
    # processes spreading 25% on the same work, 9.6-15%: low, borderline medium, whichever side a run lands on
    def hot(spread_pct: float | None) -> Finding:
        r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0, instrumented_wall_s=1.0))
        r.operators = [row("aten::addmm", 88.0, source="m.py:2"), row("aten::tanh", 12.0)]
        if spread_pct is not None:
            r.efficiency = _spread(spread_pct)
        return next(f for f in findings.derive(r) if f.op == "aten::tanh")

    assert hot(None).severity == "medium" and hot(None).borderline is None
    wide = hot(25.0)
    assert wide.severity == "low" and wide.borderline.would_be == "medium"
    assert (wide.borderline.low, wide.borderline.high) == (pytest.approx(9.6), pytest.approx(15.0))


def _at_stake(pct: float, severity: str) -> Finding:
    low, high = borderline.interval(pct, 0.1)
    return Finding("hot_operator", severity, "t", "aten::mul", "m.py:3", {}, "s", "operators",
                   stake=Stake(pct, "b", low=low, high=high))


def test_the_stakes_lines_are_judged_on_its_interval():
    near = stake.settle(_at_stake(21.0, "high"))  # 18.9-23.1% of wall time: straddles the 20% line
    assert near.severity == "medium" and near.rule_severity == "high"
    assert (near.borderline.measure, near.borderline.threshold, near.borderline.would_be) == (
        "expected time at stake", 20.0, "high")
    assert fmt.severity_tag(near) == "medium, borderline high"
    clear = stake.settle(_at_stake(30.0, "high"))
    assert clear.severity == "high" and clear.borderline is None and fmt.severity_tag(clear) == "high"


def test_a_hot_operator_at_the_high_line_is_medium_borderline_high_in_the_report():
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0, instrumented_wall_s=1.0))
    r.operators = [row("aten::addmm", 100 - HOT_HIGH_PCT, source=None), row("aten::mul", HOT_HIGH_PCT)]
    (f,) = [f for f in findings.derive(r) if f.op == "aten::mul"]
    assert f.severity == "medium" and f.borderline.would_be == "high" and f.borderline.threshold == HOT_HIGH_PCT
    assert ("borderline", fmt.borderline_text(f.borderline)) in fmt.evidence_items(f)


@pytest.mark.parametrize("faults_per_step, status, borderline_named", [
    (400, "ok", False),   # 4% of a 10 ms step: 3.6-4.4%, clear of the 5% line
    (500, "warn", True),  # 5%: 4.5-5.5%, the line inside: the trials measure it, in every run
    (600, "warn", False),  # 6%: 5.5-6.6%, over the line: the allocator trials run
])
def test_the_page_fault_line_that_starts_the_allocator_trials_is_judged_on_the_interval(
        faults_per_step, status, borderline_named):
    from diagnose.doctor.workload import check_page_faults

    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0))
    r.run.iterations = IterationStats(n=20, median_s=0.01, q1_s=0.0099, q3_s=0.0101, min_s=0.009, max_s=0.02)
    r.run.minor_faults = 20 * faults_per_step
    check = check_page_faults(r)
    assert check.status == status, check
    from diagnose.doctor.workload import BORDERLINE_FACT
    assert any(f.name == BORDERLINE_FACT for f in check.facts) == borderline_named, check.facts


def test_the_page_fault_line_is_the_medium_line_so_no_churn_is_graded_medium_on_an_unmeasured_estimate():
    # memory_churn takes the fault estimate as its stake where the check did not warn (findings/operators.py
    # _churn_stake): below the medium line, so only the trials' measurement can make it medium
    from diagnose.doctor.workload import PAGE_FAULT_WARN_PCT

    assert PAGE_FAULT_WARN_PCT == stake.MEDIUM_MIN_PCT


@pytest.mark.parametrize("share, severity, would_be", [
    (0.08, None, None),      # 7.3-8.8% of the step: clear of the 10% line, no finding
    (0.10, "low", "medium"),  # 9.1-11%: the line inside, low and borderline in every run
    (0.12, "medium", None),  # 10.9-13.2%: over it
    (0.30, "medium", "high"),
])
def test_outside_torchs_share_lines_are_judged_on_its_interval(share, severity, would_be):
    from diagnose.findings.budget import outside_torch
    from diagnose.report.model import BudgetItem, BudgetSlice, StepBudget

    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0))
    native = BudgetSlice("native", share * 0.1, "call-graph pass",
                         items=[BudgetItem("numpy", share * 0.1, share=share, location="f at m.py:4")], share=share)
    r.step_budget = StepBudget(unit="step", step_s=0.1, slices=[native])
    found = outside_torch(r)
    assert [f.severity for f in found] == ([severity] if severity else [])
    if found:
        assert (found[0].borderline.would_be if found[0].borderline else None) == would_be


@pytest.mark.parametrize("share, severity", [(1.7, None), (2.0, "low"), (2.4, "medium")])
def test_input_growths_share_line_is_judged_on_its_interval(share, severity):
    from diagnose.findings.trends import input_growth
    from diagnose.report.model import OperatorSummary, SiteTrend, TrendSlope

    grows = SiteTrend(source="m.py:3", library=None, module=None, function="cat", calls=20, share_pct=share,
                      bytes_per_step=[1000 * (i + 1) for i in range(20)], bytes_grow=True,
                      bytes_slope=TrendSlope(per_step=1000.0, ci_low=990.0, ci_high=1010.0, late_per_step=1000.0))
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0), operator_summary=OperatorSummary(trends=[grows]))
    found = input_growth(r)
    assert [f.severity for f in found] == ([severity] if severity else [])
    if severity == "low":
        assert found[0].borderline.would_be == "medium" and found[0].borderline.threshold == 2.0


def test_the_machines_spread_history_is_the_floor_once_it_holds_enough_samples():
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0))
    r.efficiency = _spread(5.2)  # a probe that sat in one speed state of the vCPUs
    assert borderline.floor(r) == borderline.RUN_NOISE_MIN
    # the machine's last 40 diagnoses timed the same step across its states: 23%, the floor for every run now
    r.efficiency.peaks.spread_history = ProcessSpread(processes=40, threads=2, window_s=0.3, spread_pct=23.0,
                                                      span_h=5.0)
    assert borderline.process_spread(r) is r.efficiency.peaks.spread_history
    assert borderline.floor(r) == pytest.approx(0.23)
    r.efficiency = _spread(31.6)  # a probe that caught a change of state: its 31.6% until the history holds enough
    assert borderline.floor(r) == pytest.approx(0.316)
    r.efficiency.peaks.spread_history = ProcessSpread(processes=16, threads=2, window_s=0.3, spread_pct=23.0)
    assert borderline.floor(r) == pytest.approx(0.23)


def test_a_share_and_a_time_have_floors_of_their_own():
    # a slower vCPU slows each operator of the step alike: the GEMM call spread 40%, the step's shares 14%
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0))
    r.efficiency = _spread(40.0, share_pct=14.0)
    assert borderline.floor(r) == borderline.noise(r) == pytest.approx(0.14)
    assert borderline.floor(r, "time") == borderline.noise(r, "time") == pytest.approx(0.40)
    r.efficiency = _spread(40.0, share_pct=4.0)  # shares that agree within 4%: the 10% assumed still holds for them
    assert borderline.floor(r) == borderline.RUN_NOISE_MIN and borderline.floor(r, "time") == pytest.approx(0.40)
