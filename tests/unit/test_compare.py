"""diagnose compare on committed real reports (tests/data/compare) and on small made-up ones."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from diagnose import compare
from diagnose.layers import repeat as layers_repeat
from diagnose.protocol import PassResult, Scheduling
from diagnose.render import compare as render
from diagnose.report import comparison, io
from diagnose.report.model import (
    Finding,
    IterationStats,
    OperatorRow,
    Repeats,
    Report,
    Run,
    Stake,
    Steps,
    TargetInfo,
)
from microbench.stats import ratio_is_real

DATA = Path(__file__).resolve().parents[1] / "data" / "compare"


def load(name: str) -> Report:
    return io.load(str(DATA / f"{name}.json"))


def stats(median, iqr_pct, n=20):
    half = median * iqr_pct / 200
    return IterationStats(n=n, median_s=median, q1_s=median - half, q3_s=median + half, min_s=median - 2 * half,
                          max_s=median + 2 * half)


def rep(wall=1.0, iqr_pct=None, ops=(), findings=(), mode=None, runs=None) -> Report:
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
    if runs:  # --repeat: each run's median, the first the baseline's
        r.run.iterations = stats(runs[0], iqr_pct or 2)
        r.run.repeats = Repeats(unit="call", medians_s=list(runs), spread_pct=layers_repeat.spread_pct(list(runs)))
    return r


def finding(kind, severity, op=None, location="m.py:3", also=(), pct=10.0):
    return Finding(kind, severity, f"{kind} title", op, location, {}, "s", stake=Stake(pct, "b"), also=list(also))


# ------------------------------------------------------------------------- the committed real pair

def test_the_planted_fix_helped_outside_the_noise():
    cmp = compare.compare(load("row_loop_before"), load("row_loop_after"))
    wall = cmp.wall
    before, after = wall.before, wall.after
    assert before.unit == after.unit == "iteration" and before.n == after.n == 20
    assert wall.speedup == pytest.approx(before.seconds / after.seconds, rel=1e-3)
    assert wall.speedup > 5 and wall.direction == "faster" and wall.significant
    # single runs: the floor is the mean of both sides' IQR/median, never below the drift between single runs
    assert wall.noise_floor_pct == pytest.approx(
        max(compare.SINGLE_RUN_DRIFT_PCT, (before.noise_pct + after.noise_pct) / 2), abs=0.01)
    assert cmp.verdict.startswith(f"the fix helped: wall time {wall.speedup:.2f}x lower")
    assert "outside the noise" in cmp.verdict and cmp.regression_pct == 0.0
    gone = {(f.kind, f.status) for f in cmp.findings}
    assert ("python_overhead", "gone") in gone
    rows = {(r.name, repr(r.input_shapes)): r for r in cmp.operators.rows}
    assert rows[("aten::mean", "[[64], []]")].status == "gone"
    assert cmp.operators.unit == "iteration"


def test_the_same_pair_the_other_way_round_is_a_regression():
    cmp = compare.compare(load("row_loop_after"), load("row_loop_before"))
    assert cmp.wall.direction == "slower" and cmp.regression_pct > 100
    assert cmp.verdict.startswith("regression: wall time") and "outside the noise" in cmp.verdict
    assert ("python_overhead", "new") in {(f.kind, f.status) for f in cmp.findings}


def test_script_mode_says_the_noise_is_unknown():
    cmp = compare.compare(load("row_loop_before_script"), load("row_loop_after_script"))
    wall = cmp.wall
    assert wall.before.noise_pct is None and wall.unit == "run"
    assert wall.noise_floor_pct == compare.SINGLE_RUN_DRIFT_PCT and "noise unknown" in wall.noise_basis
    assert "single runs: run-to-run drift not measured" in cmp.verdict and wall.direction == "faster"


# ------------------------------------------------------------------------------- the noise rule

@pytest.mark.parametrize("after, direction", [(1.03, "same"), (0.97, "same"), (1.2, "same"), (1.3, "slower"),
                                              (0.7, "faster")])
def test_single_runs_call_nothing_under_their_unmeasured_drift(after, direction):
    """Two single A/A runs of examples/mlp.py measured 20% apart on a shared machine: without --repeat nothing
    under SINGLE_RUN_DRIFT_PCT (25%) is called, and the verdict says two single runs cannot call it."""
    wall = compare.compare_wall(rep(1.0), rep(after))
    assert wall.direction == direction and wall.significant == (direction != "same")
    assert wall.noise_floor_pct == compare.SINGLE_RUN_DRIFT_PCT and not wall.drift_measured
    if direction == "same":
        assert compare.verdict(wall, []).startswith("no verdict: ") and "two single runs cannot call" in \
            compare.verdict(wall, [])


def test_repeated_runs_set_the_floor_from_their_own_drift():
    quiet = compare.compare_wall(rep(runs=[1.0, 1.01, 0.99]), rep(runs=[1.15, 1.16, 1.14]))
    assert quiet.drift_measured and quiet.noise_floor_pct == 5.0  # 2% spreads: the 5% minimum
    assert quiet.direction == "slower" and quiet.change_pct == pytest.approx(15.0)
    assert compare.verdict(quiet, []).startswith("regression: wall time 1.15x higher")
    drifting = compare.compare_wall(rep(runs=[1.0, 1.3, 0.9]), rep(runs=[1.15, 1.4, 1.0]))
    assert drifting.noise_floor_pct == pytest.approx((40 + 40 / 1.15) / 2, abs=0.1)  # mean of the spreads
    assert drifting.direction == "same" and compare.verdict(drifting, []).startswith("no significant change")


def test_overlapping_runs_are_not_a_change():
    """Three runs a side: a median ratio outside the floor, but one AFTER run is faster than a BEFORE run."""
    wall = compare.compare_wall(rep(runs=[1.0, 1.01, 1.2]), rep(runs=[1.25, 1.26, 1.1]))
    assert wall.ratio > 1 + wall.noise_floor_pct / 100  # outside the floor...
    assert wall.direction == "same" and "overlap" in wall.noise_basis  # ...but not separated


def test_noisy_iterations_widen_the_floor():
    noisy = compare.compare_wall(rep(1.0, iqr_pct=30), rep(1.15, iqr_pct=30))
    assert noisy.noise_floor_pct == pytest.approx(30.0) and noisy.direction == "same"
    cmp = compare.compare(rep(1.0, iqr_pct=30), rep(1.15, iqr_pct=30))
    assert cmp.verdict.startswith("no verdict: wall time +15.0%") and cmp.regression_pct == 0.0
    noisy = compare.compare_wall(rep(runs=[1.0, 1.0, 1.0], iqr_pct=30), rep(runs=[1.15, 1.15, 1.15], iqr_pct=30))
    assert noisy.noise_floor_pct == pytest.approx(30.0) and noisy.direction == "same"  # repeats or not


def test_differing_arguments_and_windows_are_named():
    a, b = rep(1.0), rep(1.0)
    b.target.argv = ["--batch", "64"]
    a.steps, b.steps = Steps(steps=20, window_first=6, window_last=25), Steps(steps=300, window_first=6,
                                                                             window_last=30)
    notes = compare.compare(a, b).notes
    assert any(n.startswith("the script's arguments differs: none before, --batch 64 after") for n in notes)
    assert any(n.startswith("--steps differs: 20 before, 300 after") for n in notes)
    assert any(n.startswith("the window of steps differs: 6-25 before, 6-30 after") for n in notes)


def test_a_side_without_a_wall_time_cannot_be_compared():
    broken = rep(1.0)
    broken.run.wall_s = None
    cmp = compare.compare(rep(1.0), broken)
    assert cmp.wall.direction == "unknown" and cmp.verdict.startswith("cannot compare wall times: AFTER")


# ------------------------------------------------------------------------- operators and findings

def test_operators_per_shape_matched_gone_and_new():
    before = rep(1.0, ops=[("aten::mm", [[64, 64], [64, 64]], 1000.0), ("aten::add", [[64]], 500.0),
                           ("aten::tiny", [[1]], 1.0)])
    after = rep(0.5, ops=[("aten::mm", [[64, 64], [64, 64]], 400.0), ("aten::mm", [[128, 64], [64, 64]], 300.0)])
    rows = compare.compare_operators(before, after).rows
    got = [(r.name, r.input_shapes, r.status, r.ratio) for r in rows]
    assert got == [("aten::mm", [[64, 64], [64, 64]], "faster", 0.4), ("aten::add", [[64]], "gone", None),
                   ("aten::mm", [[128, 64], [64, 64]], "new", None)]  # tiny: under 1% on both sides


def test_findings_gone_new_worse_and_a_moved_line():
    before = rep(findings=[finding("python_overhead", "high", "aten::mean", "m.py:10",
                                   also=[finding("hot_operator", "medium", "aten::mean", "m.py:10", pct=7.0)]),
                           finding("copy_overhead", "medium", "aten::copy_", "m.py:20")])
    after = rep(findings=[finding("copy_overhead", "high", "aten::copy_", "m.py:22"),
                          finding("oversubscription", "high", None, None)])
    cmp = compare.compare_findings(before, after)
    got = {(f.kind, f.status, f.before_severity, f.after_severity) for f in cmp}
    assert got == {("python_overhead", "gone", "high", None), ("hot_operator", "gone", "medium", None),
                   ("copy_overhead", "worse", "medium", "high"), ("oversubscription", "new", None, "high")}
    # a merged finding is compared at its finding's line, with its own stake
    (merged,) = [f for f in cmp if f.kind == "hot_operator"]
    assert (merged.before_location, merged.before_stake_pct) == ("m.py:10", 7.0)


# ---------------------------------------------------------------------------------------- renderers

def test_terminal_and_markdown_lead_with_the_verdict_and_carry_the_noise():
    cmp = compare.compare(load("row_loop_before"), load("row_loop_after"))
    text = render.terminal(cmp)
    assert text.splitlines()[2] == cmp.verdict
    assert "IQR ±" in text and "gone" in text and "python_overhead" in text
    md = render.markdown(cmp)
    assert md.startswith("# diagnose compare: `examples/fix/row_loop_before.py:step`")
    assert f"**{cmp.verdict}**" in md
    assert "| operator | input shapes | before /iter | after /iter | after/before | source |" in md
    assert "| `aten::mean` | `[64]` |" in md and "| gone |" in md


# ------------------------------------------------------------------------------------ the JSON form

# the keys `diagnose compare --format json` wrote while compare returned plain dicts, recorded from that code:
# CI scripts read them, so the typed result must write exactly these (docs/compare.md lists them)
JSON_KEYS = {
    "": {"before", "after", "wall", "operators", "findings", "notes", "verdict", "regression_pct", "min_floor_pct"},
    "before": {"target", "mode", "started_at"},
    "wall": {"before", "after", "ratio", "speedup", "change_pct", "noise_floor_pct", "noise_basis", "significant",
             "direction", "unit", "drift_measured", "interleaved"},
    "wall.before": {"seconds", "unit", "noise_pct", "n", "basis", "runs_s", "drift_pct"},
    "operators": {"unit", "noise_floor_pct", "noise_basis", "rows", "total_before_us", "total_after_us",
                  "comparable"},
    "operators.rows[]": {"name", "input_shapes", "before_us", "after_us", "before_pct", "after_pct", "before_calls",
                         "after_calls", "source", "ratio", "status", "delta_us"},
    "findings[]": {"kind", "op", "status", "before_severity", "after_severity", "before_location", "after_location",
                   "before_stake_pct", "after_stake_pct", "title"},
}
# a side without a wall time: `wall` never had a unit or drift_measured then
JSON_KEYS_NO_WALL = JSON_KEYS["wall"] - {"unit", "drift_measured"}
JSON_KEYS_INTERLEAVED = {"rounds", "unit", "before_s", "after_s", "round_ratios", "ratio", "ci_low", "ci_high",
                         "confidence", "drift_pct", "failed", "contended", "contended_wait_pct", "usable_cpus",
                         "notes"}


def _keys(data: dict) -> dict[str, set[str]]:
    return {"": set(data), "before": set(data["before"]), "wall": set(data["wall"]),
            "wall.before": set(data["wall"]["before"]), "operators": set(data["operators"]),
            "operators.rows[]": set().union(*(set(r) for r in data["operators"]["rows"])),
            "findings[]": set().union(*(set(f) for f in data["findings"]))}


@pytest.mark.parametrize("before, after", [("row_loop_before", "row_loop_after"),
                                           ("row_loop_before_script", "row_loop_after_script")])
def test_json_keeps_the_keys_scripts_read_and_reads_back_as_the_same_comparison(before, after):
    cmp = compare.compare(load(before), load(after))
    data = json.loads(comparison.dumps(cmp))
    assert data["operators"]["rows"] and data["findings"]  # every level is present to check
    assert _keys(data) == JSON_KEYS
    assert set(data["after"]) == JSON_KEYS["before"] and set(data["wall"]["after"]) == JSON_KEYS["wall.before"]
    # every row and finding has them all, not only their union
    assert all(set(r) == JSON_KEYS["operators.rows[]"] for r in data["operators"]["rows"])
    assert all(set(f) == JSON_KEYS["findings[]"] for f in data["findings"])
    assert io.typed(comparison.Comparison, data) == cmp  # the JSON is the whole result, through its types


def test_json_of_a_side_without_a_wall_time_keeps_its_old_keys():
    broken = rep(1.0)
    broken.run.wall_s = None
    cmp = compare.compare(rep(1.0), broken)
    data = json.loads(comparison.dumps(cmp))
    assert set(data["wall"]) == JSON_KEYS_NO_WALL and data["wall"]["after"] is None
    assert data["wall"]["direction"] == "unknown" and data["regression_pct"] == 0.0
    assert io.typed(comparison.Comparison, data) == cmp


# ------------------------------------------------------------------------- compare --repeat: interleaved rounds

def interleaved(ratios, drift_pct=1.0, base=0.010) -> comparison.Interleaved:
    """Rounds whose after/before is each of `ratios` (BEFORE steady at `base` seconds); the interval is the sign
    test's over the rounds, as interleave.run computes it."""
    from microbench.stats import AbbaRound, abba_summary

    rounds = [AbbaRound(a1=base, b1=base * r, b2=base * r, a2=base) for r in ratios]
    s = abba_summary(rounds, method="sign", confidence=0.95, min_effect=0.0)
    return comparison.Interleaved(rounds=len(ratios), unit="iteration", before_s=[base] * 2 * len(ratios),
                                  after_s=[base * r for r in ratios for _ in (0, 1)],
                                  round_ratios=[round(r, 4) for r in ratios], ratio=round(s.ratio, 4),
                                  ci_low=s.ci_low and round(s.ci_low, 4), ci_high=s.ci_high and round(s.ci_high, 4),
                                  confidence=s.confidence, drift_pct=drift_pct)


@pytest.mark.parametrize("ratios, drift, direction", [
    ([1.15, 1.14, 1.16, 1.13, 1.17, 1.15], 1.0, "slower"),  # every round slower, well past the 5% floor
    ([0.80, 0.82, 0.79, 0.81, 0.80, 0.83], 1.0, "faster"),
    ([1.15, 1.14, 0.97, 1.13, 1.17, 1.15], 1.0, "same"),  # one round the other way: the interval holds 1
    ([1.03, 1.02, 1.04, 1.03, 1.02, 1.03], 1.0, "same"),  # every round slower, but under the 5% floor
    ([1.15, 1.14, 1.16, 1.13, 1.17, 1.15], 20.0, "same"),  # a side drifts 20% within a round: the floor
])
def test_interleaved_rounds_call_a_change_only_when_the_interval_and_the_floor_agree(ratios, drift, direction):
    run = interleaved(ratios, drift)
    wall = compare.compare_wall(rep(1.0), rep(1.0), interleaved=run)
    assert wall.direction == direction and wall.interleaved is run and wall.drift_measured
    assert wall.noise_floor_pct == max(compare.MIN_FLOOR_PCT, drift)
    # the rule, from the numbers it shows: the interval excludes 1 and the ratio clears the floor
    excludes = run.ci_low > 1 or run.ci_high < 1
    assert wall.significant == (excludes and ratio_is_real(run.ratio, wall.noise_floor_pct / 100))
    assert wall.before.runs_s == run.before_s and wall.after.seconds == statistics.median(run.after_s)
    assert f"{run.rounds} interleaved rounds" in wall.noise_basis


def test_too_few_rounds_have_no_interval_and_call_nothing():
    run = interleaved([1.5, 1.5, 1.5, 1.5, 1.5])  # five rounds: the sign test's 95% interval needs six
    assert run.ci_low is None
    assert compare.compare_wall(rep(1.0), rep(1.0), interleaved=run).direction == "same"
    verdict = compare.compare(rep(1.0), rep(1.0), interleaved=run).verdict
    assert verdict.startswith("no verdict: wall time +50.0%") and "too few rounds for an interval" in verdict


def test_interleaved_verdict_json_and_rendering():
    cmp = compare.compare(rep(1.0), rep(1.0), interleaved=interleaved([1.15] * 6))
    assert cmp.verdict.startswith("regression: wall time 1.15x higher") and "6 interleaved rounds" in cmp.verdict
    assert cmp.regression_pct == 15.0
    data = json.loads(comparison.dumps(cmp))
    assert set(data["wall"]["interleaved"]) == JSON_KEYS_INTERLEAVED
    assert io.typed(comparison.Comparison, data) == cmp
    assert "each round's after/before: 1.150 1.150" in render.terminal(cmp)
    assert "Each round's after/before: 1.150, 1.150" in render.markdown(cmp)


def test_no_complete_round_falls_back_to_the_reports_and_says_so():
    empty = comparison.Interleaved(rounds=0, unit="iteration", before_s=[], after_s=[], round_ratios=[], ratio=0.0,
                                   ci_low=None, ci_high=None, confidence=None, drift_pct=0.0, failed=3)
    cmp = compare.compare(rep(1.0, 2.0), rep(1.0, 2.0), interleaved=empty)
    assert cmp.wall.interleaved is None and cmp.wall.direction == "same"
    assert any("3 re-run(s) ended without a time" in n for n in cmp.notes)
    assert any("no round was counted" in n for n in cmp.notes)


def test_contended_rounds_are_left_out_and_the_note_says_why():
    run = dataclasses.replace(interleaved([1.15] * 6), contended=3, contended_wait_pct=50.1, usable_cpus=2)
    cmp = compare.compare(rep(1.0), rep(1.0), interleaved=run)
    note = next(n for n in cmp.notes if "3 round(s) left out" in n)
    assert "up to 50.1% of their runnable time" in note and "the 2 usable CPUs" in note and "taskset -c" in note
    assert cmp.wall.direction == "slower"  # the six rounds counted still call it


def _result(run_s: float, wait_s: float, wall_s: float) -> PassResult:
    return PassResult(name="x", wall_s=wall_s, scheduling=Scheduling(run_s=run_s, wait_s=wait_s))


@pytest.mark.parametrize("run_s, wait_s, contended", [
    (1.5, 0.5, True),  # 25% waited, 2 threads runnable on 2 CPUs: others held them
    (1.9, 0.1, False),  # 5% waited: under EXTERNAL_WAIT_SHARE_LOW
    (2.0, 6.0, False),  # 75% waited, but 8 threads runnable on 2 CPUs: the target's own doing
])
def test_a_run_waited_for_others_only_with_no_more_threads_runnable_than_cpus(run_s, wait_s, contended):
    from diagnose import interleave

    share = interleave.waited_for_others(_result(run_s, wait_s, wall_s=1.0), usable=2)
    assert (share is not None) == contended
    assert share is None or share == pytest.approx(wait_s / (run_s + wait_s))
    assert interleave.waited_for_others(PassResult(name="x", wall_s=1.0), usable=2) is None  # no schedstat


def test_repeat_refuses_reports_it_cannot_run_again_as_they_ran(tmp_path):
    from diagnose import interleave
    from diagnose.errors import UsageError
    from diagnose.target import sha256_of

    script = tmp_path / "m.py"
    script.write_text("pass\n")
    ok = rep(1.0)
    ok.target.path, ok.target.cwd, ok.target.script_sha256 = str(script), str(tmp_path), sha256_of(str(script))
    side = interleave._side("BEFORE", ok)
    assert side.target.script == str(script) and side.cwd == str(tmp_path)
    attached = rep(1.0)
    attached.target.mode = "attach"
    old = rep(1.0)  # no path, cwd or hash: written before they were recorded
    for report, needle in ((attached, "attached process"), (old, "does not record its script's path")):
        with pytest.raises(UsageError, match=needle):
            interleave._side("BEFORE", report)
    script.write_text("pass  # edited\n")
    with pytest.raises(UsageError, match="changed since its report"):
        interleave._side("AFTER", ok)
