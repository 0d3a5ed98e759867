"""diagnose compare on committed real reports (tests/data/compare) and on small made-up ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose import compare
from diagnose.render import compare as render
from diagnose.report import io
from diagnose.report.model import Finding, IterationStats, OperatorRow, Report, Run, Stake, TargetInfo

DATA = Path(__file__).resolve().parents[1] / "data" / "compare"


def load(name: str) -> Report:
    return io.load(str(DATA / f"{name}.json"))


def stats(median, iqr_pct, n=20):
    half = median * iqr_pct / 200
    return IterationStats(n=n, median_s=median, q1_s=median - half, q3_s=median + half, min_s=median - 2 * half,
                          max_s=median + 2 * half)


def rep(wall=1.0, iqr_pct=None, ops=(), findings=(), mode=None) -> Report:
    function = iqr_pct is not None if mode is None else mode == "function"
    r = Report(target=TargetInfo(script="m.py", mode="function" if function else "script",
                                 function="step" if function else None),
               run=Run(wall_s=wall * 20 if function else wall, instrumented_wall_s=wall * 40))
    if function:
        r.run.iterations = stats(wall, iqr_pct)
        r.run.instrumented_iterations = stats(2 * wall, iqr_pct, n=10)
    r.operators = [OperatorRow(name=n, input_shapes=s, dtypes=["float"], calls=10, self_cpu_us=us, total_cpu_us=us,
                               self_pct=100.0 * us / sum(o[2] for o in ops), source="m.py:3") for n, s, us in ops]
    r.findings = list(findings)
    return r


def finding(kind, severity, op=None, location="m.py:3", also=(), pct=10.0):
    return Finding(kind, severity, f"{kind} title", op, location, {}, "s", stake=Stake(pct, "b"), also=list(also))


# ------------------------------------------------------------------------- the committed real pair

def test_the_planted_fix_helped_outside_the_noise():
    cmp = compare.compare(load("row_loop_before"), load("row_loop_after"))
    wall = cmp["wall"]
    before, after = wall["before"], wall["after"]
    assert before["unit"] == after["unit"] == "iteration" and before["n"] == after["n"] == 20
    assert wall["speedup"] == pytest.approx(before["seconds"] / after["seconds"], rel=1e-3)
    assert wall["speedup"] > 5 and wall["direction"] == "faster" and wall["significant"]
    # the floor is the mean of both sides' IQR/median, never below 5%
    assert wall["noise_floor_pct"] == pytest.approx(max(5.0, (before["noise_pct"] + after["noise_pct"]) / 2), abs=0.01)
    assert cmp["verdict"].startswith(f"the fix helped: wall time {wall['speedup']:.2f}x lower")
    assert "outside the noise" in cmp["verdict"] and cmp["regression_pct"] == 0.0
    gone = {(f["kind"], f["status"]) for f in cmp["findings"]}
    assert ("python_overhead", "gone") in gone
    rows = {(r["name"], repr(r["input_shapes"])): r for r in cmp["operators"]["rows"]}
    assert rows[("aten::mean", "[[64], []]")]["status"] == "gone"
    assert cmp["operators"]["unit"] == "iteration"


def test_the_same_pair_the_other_way_round_is_a_regression():
    cmp = compare.compare(load("row_loop_after"), load("row_loop_before"))
    assert cmp["wall"]["direction"] == "slower" and cmp["regression_pct"] > 100
    assert cmp["verdict"].startswith("regression: wall time") and "outside the noise" in cmp["verdict"]
    assert ("python_overhead", "new") in {(f["kind"], f["status"]) for f in cmp["findings"]}


def test_script_mode_says_the_noise_is_unknown():
    cmp = compare.compare(load("row_loop_before_script"), load("row_loop_after_script"))
    wall = cmp["wall"]
    assert wall["before"]["noise_pct"] is None and wall["unit"] == "run"
    assert wall["noise_floor_pct"] == 5.0 and "noise unknown" in wall["noise_basis"]
    assert "single runs: noise unknown" in cmp["verdict"] and wall["direction"] == "faster"


# ------------------------------------------------------------------------------- the noise rule

@pytest.mark.parametrize("after, direction", [(1.03, "same"), (0.97, "same"), (1.08, "slower"), (0.9, "faster")])
def test_single_runs_call_nothing_under_five_percent(after, direction):
    wall = compare.compare_wall(rep(1.0), rep(after))
    assert wall["direction"] == direction and wall["significant"] == (direction != "same")


def test_noisy_iterations_widen_the_floor():
    noisy = compare.compare_wall(rep(1.0, iqr_pct=30), rep(1.15, iqr_pct=30))
    assert noisy["noise_floor_pct"] == pytest.approx(30.0) and noisy["direction"] == "same"
    quiet = compare.compare_wall(rep(1.0, iqr_pct=2), rep(1.15, iqr_pct=2))
    assert quiet["noise_floor_pct"] == 5.0 and quiet["direction"] == "slower"
    cmp = compare.compare(rep(1.0, iqr_pct=30), rep(1.15, iqr_pct=30))
    assert cmp["verdict"].startswith("no significant change: wall time +15.0%") and cmp["regression_pct"] == 0.0


def test_a_side_without_a_wall_time_cannot_be_compared():
    broken = rep(1.0)
    broken.run.wall_s = None
    cmp = compare.compare(rep(1.0), broken)
    assert cmp["wall"]["direction"] == "unknown" and cmp["verdict"].startswith("cannot compare wall times: AFTER")


# ------------------------------------------------------------------------- operators and findings

def test_operators_per_shape_matched_gone_and_new():
    before = rep(1.0, ops=[("aten::mm", [[64, 64], [64, 64]], 1000.0), ("aten::add", [[64]], 500.0),
                           ("aten::tiny", [[1]], 1.0)])
    after = rep(0.5, ops=[("aten::mm", [[64, 64], [64, 64]], 400.0), ("aten::mm", [[128, 64], [64, 64]], 300.0)])
    rows = compare.compare_operators(before, after)["rows"]
    got = [(r["name"], r["input_shapes"], r["status"], r["ratio"]) for r in rows]
    assert got == [("aten::mm", [[64, 64], [64, 64]], "faster", 0.4), ("aten::add", [[64]], "gone", None),
                   ("aten::mm", [[128, 64], [64, 64]], "new", None)]  # tiny: under 1% on both sides


def test_findings_gone_new_worse_and_a_moved_line():
    before = rep(findings=[finding("python_overhead", "high", "aten::mean", "m.py:10",
                                   also=[finding("hot_operator", "medium", "aten::mean", "m.py:10", pct=7.0)]),
                           finding("copy_overhead", "medium", "aten::copy_", "m.py:20")])
    after = rep(findings=[finding("copy_overhead", "high", "aten::copy_", "m.py:22"),
                          finding("oversubscription", "high", None, None)])
    cmp = compare.compare_findings(before, after)
    got = {(f["kind"], f["status"], f["before_severity"], f["after_severity"]) for f in cmp}
    assert got == {("python_overhead", "gone", "high", None), ("hot_operator", "gone", "medium", None),
                   ("copy_overhead", "worse", "medium", "high"), ("oversubscription", "new", None, "high")}
    # a merged finding is compared at its finding's line, with its own stake
    (merged,) = [f for f in cmp if f["kind"] == "hot_operator"]
    assert (merged["before_location"], merged["before_stake_pct"]) == ("m.py:10", 7.0)


# ---------------------------------------------------------------------------------------- renderers

def test_terminal_and_markdown_lead_with_the_verdict_and_carry_the_noise():
    cmp = compare.compare(load("row_loop_before"), load("row_loop_after"))
    text = render.terminal(cmp)
    assert text.splitlines()[2] == cmp["verdict"]
    assert "IQR ±" in text and "gone" in text and "python_overhead" in text
    md = render.markdown(cmp)
    assert md.startswith("# diagnose compare: `examples/fix/row_loop_before.py:step`")
    assert f"**{cmp['verdict']}**" in md
    assert "| operator | input shapes | before /iter | after /iter | after/before | source |" in md
    assert "| `aten::mean` | `[64]` |" in md and "| gone |" in md
