"""The step budget (diagnose/budget.py) on the committed real reports: its slices add up to the step, and no
finding claims more of the step than the slice its time is part of."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose import budget, findings
from diagnose.render import fmt, markdown, terminal
from diagnose.report import io as report_io
from diagnose.report.model import CallCosts, Efficiency, Peaks

DATA = Path(__file__).resolve().parents[1] / "data"
REPORTS = sorted(p for p in DATA.rglob("*.json") if p.name.endswith("report.json") or "report" in p.name
                 or p.parent.name == "compare")


def _loaded(path: Path):
    try:
        return report_io.load(str(path))
    except Exception:  # noqa: BLE001 - data files that are not reports (traces, recordings)
        return None


CASES = [(p, r) for p in REPORTS if (r := _loaded(p)) is not None and r.run.wall_s
         and (r.operator_summary or r.python_summary)]  # a budget needs at least one pass to split the step


def test_the_committed_reports_are_many():
    assert len(CASES) >= 8, [str(p) for p, _ in CASES]


@pytest.mark.parametrize("path, report", CASES, ids=[str(p.relative_to(DATA)) for p, _ in CASES])
def test_slices_add_up_to_the_step_and_no_stake_exceeds_its_slice(path, report):
    b = budget.of(report)
    assert b is not None and b.step_s > 0
    assert b.slices[-1].name == "unexplained"  # always shown, last
    assert abs(sum(s.s for s in b.slices) - b.step_s) <= 1e-6 * max(1.0, b.step_s) + 1e-8
    assert abs(sum(s.share for s in b.slices) - 1.0) < 0.01
    assert all(s.s >= 0 for s in b.slices if s.name != "unexplained")
    report.step_budget = b
    for f in findings.derive(report):
        cap = budget.cap_pct(b, f.kind)
        if cap is not None and f.stake is not None and f.stake.pct is not None:
            assert f.stake.pct <= cap[0] + 0.01, (f.kind, f.stake, cap)
    line = fmt.budget_line(report)
    assert line.startswith(f"{b.unit} ") and "unexplained" in line
    assert f"step budget: {line}" in terminal.render(report) and line in markdown.render(report)


def test_a_stake_larger_than_its_slice_is_bounded_and_says_so():
    report = _loaded(DATA / "findings" / "gpt2_generate_window_report.json")
    report.step_budget = b = budget.of(report)
    python = next(s for s in b.slices if s.name == "python")
    found = findings.derive(report)
    overhead = [f for f in found if f.kind == "python_overhead"]
    assert overhead, [f.kind for f in found]
    limit = 100 * sum(s.share for s in b.slices if s.name in ("python", "dispatch"))
    assert all(f.stake.pct <= limit + 0.01 for f in overhead)
    bounded = [f for f in overhead if "at most the step budget" in f.stake.basis]
    assert python.share < 1 and (bounded or all(f.stake.pct <= limit for f in overhead))


def test_the_probes_call_costs_are_used_when_measured_and_defaults_said_otherwise():
    report = _loaded(DATA / "findings" / "resnet_train_window_report.json")
    assert budget.of(report).costs == budget.DEFAULT_COSTS.method
    measured = CallCosts(dispatch_us=2.0, autograd_dispatch_us=3.0, profiler_self_us=1.0, cprofile_call_us=0.2,
                         method="probe")
    report.efficiency = report.efficiency or Efficiency()
    report.efficiency.peaks = report.efficiency.peaks or Peaks()
    report.efficiency.peaks.call_costs = measured
    b = budget.of(report)
    assert b.costs == "probe" and "1 µs of each" in next(s for s in b.slices if s.name == "kernels").basis
