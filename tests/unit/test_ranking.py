"""Ranking by time at stake and de-duplication across layers (diagnose/findings/stake.py)."""

from __future__ import annotations

import dataclasses

from pathlib import Path

import pytest

from diagnose import findings
from diagnose.findings import operators as op_rules
from diagnose.findings.suggestions import AUTOCAST_INFERENCE_TEXT
from diagnose.findings import python as python_rules
from diagnose.findings import stake
from diagnose.findings import threads as thread_rules
from diagnose.layers.threads import recording
from diagnose.layers.threads.analysis import analyse
from diagnose.report.model import (PEAKS_CONTENDED_DOUBT, Finding, Machine, MicrobenchRow, OperatorRow, OperatorSummary,
                                   PythonFunction, PythonSummary, Report, Run, SourceShare, Stake, Sweep,
                                   SweepRecommendation, TargetInfo)

THREADS = Path(__file__).resolve().parents[1] / "data" / "threads"


def op(name, pct, source="m.py:3"):
    us = pct * 100.0
    return OperatorRow(name=name, input_shapes=[[64, 64]], dtypes=["float"], calls=10, self_cpu_us=us,
                       total_cpu_us=us, self_pct=pct, source=source,
                       sources=[SourceShare(location=source, calls=10, self_cpu_us=us)], called_by={"": us})


def loop_function(share_pct, location="m.py:5"):
    return PythonFunction(function="loop", location=location, kind="user", calls=1, self_s=share_pct / 100,
                          cumulative_s=share_pct / 100, self_pct=share_pct, cumulative_pct=share_pct,
                          loop_overhead_s=share_pct / 100, tiny_calls=1000)


def report(ops=(), python=(), operator_share=None) -> Report:
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0, instrumented_wall_s=1.5))
    r.operators = sorted(ops, key=lambda x: -x.self_cpu_us)
    r.operator_summary = OperatorSummary(total_self_cpu_us=sum(o.self_cpu_us for o in ops))
    r.python_hotspots = list(python)
    if operator_share is not None:
        r.python_summary = PythonSummary(total_s=1.0, operator_share=operator_share, python_share=1 - operator_share)
    return r


def test_operator_findings_are_put_on_the_wall_time_scale():
    # operators are 20% of the run (cProfile split): 35% of operator time is 7% of the wall time
    f, = [f for f in findings.derive(report([op("aten::div", 35), op("aten::addmm", 65)], operator_share=0.2))
          if f.op == "aten::div"]
    assert f.stake.pct == pytest.approx(7.0)
    assert "cProfile" in f.stake.basis


def test_without_the_python_layer_the_operator_pass_gives_the_operators_share():
    # 100 ms of operator self time in a 1.5 s operator pass
    rep = report([op("aten::div", 40, source="m.py:3"), op("aten::addmm", 60)])
    assert stake.operator_wall_fraction(rep)[0] == pytest.approx(10_000 / 1.5e6)
    rep.operator_summary = None
    rep.run.instrumented_wall_s = None
    assert stake.operator_wall_fraction(rep)[0] == 1.0


def test_time_at_stake_outranks_a_share_of_a_different_denominator():
    # a hot operator at 35% of operator time (high by its rule), but operators are only 20% of the run (7% at
    # stake: too little for high, so medium), against a medium Python loop at 30% of the cProfile pass (an
    # upper bound: 15% expected): the loop comes first; the healthy addmm's 13% is an observation, last
    rep = report([op("aten::div", 35, source="m.py:4"), op("aten::addmm", 65)], [loop_function(30)],
                 operator_share=0.2)
    ranked = [(f.kind, f.severity, round(f.stake.pct, 1)) for f in findings.derive(rep)]
    assert ranked == [("python_overhead", "medium", 30.0), ("hot_operator", "medium", 7.0),
                      ("hot_operator", "low", 13.0)]
    div = findings.derive(rep)[1]
    assert div.rule_severity == "high" and "under the 20% a high finding needs" in div.severity_basis


def _settled(kind, severity, at_stake, basis="measured", upper_bound=False, **fields):
    return stake.settle(Finding(kind, severity, "t", None, None, {}, "s", "x",
                                stake=Stake(at_stake, basis, upper_bound=upper_bound), **fields))


def test_gpt2_generate_framework_overhead_outranks_a_small_medium_finding():
    # GPT-2 generate, as the team measured it: Python framework overhead at 81% of the cProfile pass (a low
    # python_overhead by its rule) was listed below a medium finding with 4.7% of the wall time at stake
    framework = _settled("python_overhead", "low", 81.0, python_rules.STAKE_BASIS, upper_bound=True)
    small = _settled("hot_operator", "medium", 4.7)
    assert [f.kind for f in stake.rank([small, framework])] == ["python_overhead", "hot_operator"]
    # 81% is an upper bound (confidence 0.5): 40.5% expected, enough to be at least medium
    assert (framework.severity, framework.stake.confidence, framework.rule_severity) == ("medium", 0.5, "low")
    assert framework.stake.expected_pct == 40.5
    assert "40.5% of wall time expected at stake (81% x confidence 0.5)" in framework.severity_basis
    # 4.7% is under the 5% a before/after comparison can tell from noise: low
    assert (small.severity, small.rule_severity) == ("low", "medium")


@pytest.mark.parametrize("severity, at_stake, fields, expected", [
    ("high", 25.0, {}, "high"),      # a high finding with 25% at stake stays high
    ("high", 19.9, {}, "medium"),    # under 20%: not high
    ("medium", 4.9, {}, "low"),      # under 5%: not medium
    ("medium", 5.0, {}, "low"),      # 4.5-5.5% within the least run-to-run spread (10%): the milder side
    ("medium", 5.6, {}, "medium"),   # 5.1-6.2%: medium at both ends
    ("low", 20.0, {}, "low"),        # 18.2-22%: low, borderline medium
    ("low", 22.1, {}, "medium"),     # 20.1-24.3% at stake, measured and actionable: not low
    ("low", 19.9, {}, "low"),
    ("low", 60.0, {"doubts": ["2-thread run contended by other processes"]}, "low"),  # doubted: 30% expected, low
    ("low", 60.0, {"observation": True}, "low"),  # a healthy GEMM: where a model should spend its time
    ("high", 50.0, {"doubts": ["noisy"]}, "high"),  # 25% expected: still high
    ("medium", None, {}, "medium"),  # no stake: the rule's severity stands
])
def test_severity_follows_the_expected_stake(severity, at_stake, fields, expected):
    f = _settled("hot_operator", severity, at_stake, **fields)
    assert f.severity == expected
    if at_stake in (5.0, 20.0):  # a stake at a line, with no interval of its own: the floor's, and borderline
        assert f.stake.low < at_stake < f.stake.high and f.borderline and f.borderline.threshold == at_stake


def test_confidence_halves_for_an_upper_bound_and_for_doubts():
    f = _settled("oversubscription", "high", 60.0, f"run-queue wait share ({stake.UPPER_BOUND})", upper_bound=True)
    assert f.stake.confidence == 0.5 and stake.expected(f) == 30.0
    g = _settled("low_efficiency", "high", 40.0, doubts=[PEAKS_CONTENDED_DOUBT])
    assert g.stake.confidence == 0.5 and "peaks were measured while other processes" in g.stake.confidence_why[0]
    h = _settled("undersubscription", "low", 50.0, f"idle CPUs (perfect scaling, {stake.UPPER_BOUND})",
                 upper_bound=True, doubts=["noisy"])
    assert h.stake.confidence == 0.25 and stake.expected(h) == 12.5
    assert h.stake.confidence_why == ["the time at stake is an upper bound", "the measurement is doubted: noisy"]


def test_ranking_is_by_expected_stake_with_observations_last():
    healthy_mm = _settled("hot_operator", "low", 60.0, observation=True)
    copies = _settled("copy_overhead", "medium", 8.0)
    over = _settled("oversubscription", "high", 30.0, f"run-queue wait share ({stake.UPPER_BOUND})",
                    upper_bound=True)  # 15
    noisy = _settled("sequential_operator", "low", 20.0, doubts=["noisy"])  # 10
    counters = _settled("low_efficiency", "low", None)
    ranked = stake.rank([healthy_mm, counters, copies, noisy, over])
    assert [f.kind for f in ranked] == ["oversubscription", "sequential_operator", "copy_overhead",
                                        "low_efficiency", "hot_operator"]


def test_same_line_from_two_layers_is_one_finding_with_both_pieces_of_evidence():
    rep = report([op("aten::mean", 40, source="m.py:5"), op("aten::addmm", 60, source="m.py:9")],
                 [loop_function(45, location="m.py:5")], operator_share=0.6)  # mean: 24% of wall time, clear of the 20% line
    fs = findings.derive(rep)
    at_5 = [f for f in fs if f.location == "m.py:5"]
    assert len(at_5) == 1
    (f,) = at_5
    assert (f.kind, f.severity, f.layer) == ("python_overhead", "high", "python")
    (also,) = f.also
    assert (also.kind, also.severity, also.layer, also.op, also.location) == ("hot_operator", "high", "operators",
                                                                             "aten::mean", "m.py:5")
    assert also.evidence["share_pct"] == 40 and also.stake.pct == pytest.approx(24.0) and not also.also
    assert f.stake.pct == 45.0 and f.evidence["function"] == "loop"
    # the other line is untouched
    assert [g.kind for g in fs if g.location == "m.py:9"] == ["hot_operator"]


def test_merged_severity_is_the_highest_and_stake_the_largest():
    low_cause = Finding("sequential_operator", "low", "sort is sequential", "aten::sort", "m.py:7", {}, "use topk",
                        "microbench", stake=Stake(10.0, "b1"))
    symptom = Finding("hot_operator", "high", "sort is hot", "aten::sort", "m.py:7", {}, "s", "operators",
                      stake=Stake(25.0, "b2", upper_bound=True, confidence=0.5, confidence_why=["bound"]))
    (f,) = stake.dedup([symptom, low_cause])
    # the cause leads (not the symptom), with the group's highest severity and largest stake, and its confidence
    assert (f.kind, f.severity, f.stake.pct) == ("sequential_operator", "high", 25.0)
    assert (f.stake.basis, f.stake.upper_bound, f.stake.confidence, f.stake.confidence_why) == (
        "hot_operator: b2", True, 0.5, ["bound"])
    assert f.also[0].kind == "hot_operator" and f.title == "sort is sequential"
    assert f.severity_from == "hot_operator (operators)"
    # the rule's own finding is not mutated
    assert not low_cause.also and low_cause.stake == Stake(10.0, "b1") and low_cause.severity_from is None


def test_a_borderline_low_cause_does_not_name_a_line_a_sure_symptom_makes_medium():
    # examples/fresh_temporaries.py:22 on an Intel Xeon (2026-12-02, five runs): the subtraction's hot_operator medium
    # in every run; its low_efficiency at 27% of the roof (24.6-29.8% within the noise, the 25% line inside) low and
    # borderline in two runs, absent in three (its interval above 25%). Leading the line where it was found, it
    # renamed the line's finding in two runs of five; it stays under the sure piece, which names the line
    from diagnose.report.model import Borderline

    near = Borderline(measure="efficiency (share of this machine's roof)", value=27.1, low=24.6, high=29.8,
                      threshold=25.0, unit="%", would_be="medium")
    cause = Finding("low_efficiency", "low", "sub at 27% of its roof", "aten::sub", "m.py:22", {}, "fuse", "efficiency",
                    stake=Stake(19.5, "b1"), borderline=near)
    symptom = Finding("hot_operator", "medium", "sub is hot", "aten::sub", "m.py:22", {}, "s", "operators",
                      stake=Stake(19.5, "b1"))
    (f,) = stake.dedup([cause, symptom])
    assert (f.kind, f.severity) == ("hot_operator", "medium") and [a.kind for a in f.also] == ["low_efficiency"]
    # sure of itself, the same cause leads as before
    (f,) = stake.dedup([dataclasses.replace(cause, borderline=None), symptom])
    assert (f.kind, f.severity) == ("low_efficiency", "medium")
    # and a line whose pieces are all low is named as before, the cause first
    (f,) = stake.dedup([cause, dataclasses.replace(symptom, severity="low")])
    assert f.kind == "low_efficiency"


def test_two_operators_symptoms_at_one_line_are_ordered_by_their_time_not_their_kinds():
    # examples/allocation_churn.py:18, `acc = acc + torch.relu(y)` (2-CPU AMD EPYC, 2026-12-03, five runs): add's
    # hot_operator (24% of operator time) medium in every run; clamp_min's low_efficiency medium in the two runs
    # whose efficiency's interval cleared the 25% line (17.5%), low and borderline in three (22.8-23.7%); both
    # bounded by the step budget's kernel slice, so one stake. Led by its tier where it was medium, clamp_min's
    # low_efficiency renamed the line in two runs of five; the hotter operator leads, and its own pieces keep the
    # cause before the symptom
    hot_add = Finding("hot_operator", "medium", "add hot", "aten::add", "m.py:18", {"share_pct": 24.2}, "s",
                      "operators", stake=Stake(11.76, "b"))
    eff_relu = Finding("low_efficiency", "medium", "clamp_min at 17.5%", "aten::clamp_min", "m.py:18",
                       {"share_pct": 22.2}, "s", "efficiency", stake=Stake(11.76, "b"))
    hot_relu = Finding("hot_operator", "low", "clamp_min hot", "aten::clamp_min", "m.py:18", {"share_pct": 22.2}, "s",
                       "operators", stake=Stake(11.76, "b"), observation=True)
    (line,) = stake.dedup([eff_relu, hot_add, hot_relu])
    assert (line.kind, line.op, line.severity) == ("hot_operator", "aten::add", "medium"), line
    assert [(a.kind, a.op) for a in line.also] == [("low_efficiency", "aten::clamp_min"),
                                                   ("hot_operator", "aten::clamp_min")]
    # the hotter operator's own low_efficiency leads its time, as before (the cause before its symptom)
    eff_add = dataclasses.replace(eff_relu, op="aten::add", evidence={"share_pct": 24.2})
    (line,) = stake.dedup([eff_relu, hot_add, hot_relu, eff_add])
    assert (line.kind, line.op) == ("low_efficiency", "aten::add"), line
    # a cause leads a symptom of another operator with a larger stake: examples/growing_cache.py:35's memory_churn
    # (its fresh pages, 13.9% of the step, attributed to addmm) before tanh's hot_operator (25%), where they land
    churn = Finding("memory_churn", "medium", "fresh pages", "aten::addmm", "m.py:18", {}, "s", "memory",
                    stake=Stake(13.9, "b"))
    (line,) = stake.dedup([dataclasses.replace(hot_add, stake=Stake(25.0, "b")), churn])
    assert (line.kind, line.severity) == ("memory_churn", "medium"), line


def test_one_layers_findings_at_one_line_merge_and_findings_without_a_line_stay_separate():
    # two hot operators of one statement: one finding, the larger leading, the other under it with its own numbers
    a = Finding("hot_operator", "medium", "a", "aten::add", "m.py:3", {}, "s", "operators", stake=Stake(9.0, ""))
    b = Finding("hot_operator", "medium", "b", "aten::mul", "m.py:3", {}, "s", "operators", stake=Stake(8.0, ""))
    c = Finding("oversubscription", "high", "c", None, None, {}, "s", "threads", stake=Stake(30.0, ""))
    d = Finding("external_contention", "high", "d", None, None, {}, "s", "threads", stake=Stake(30.0, ""))
    merged, *rest = stake.dedup([a, b, c, d])
    assert rest == [c, d]
    assert (merged.op, merged.severity, merged.stake, merged.also) == ("aten::add", "medium", a.stake, [b])
    # autocast_weights.py:36 where the efficiency layer flagged nothing: the copy, and the two casts' hot_operator
    # (one operator at two shapes, no shape on the copy), are one finding, as they are where it flagged the cast
    copy = Finding("copy_overhead", "high", "c", "aten::copy_", "a.py:36", {}, "s", "operators", stake=Stake(54.0, ""))
    casts = [Finding("hot_operator", sev, "h", "aten::copy_", "a.py:36", {"input_shapes": [[n, m]]}, "s", "operators",
                     stake=Stake(pct, "")) for sev, n, m, pct in (("high", 4096, 1024, 36.0), ("medium", 1024, 4096, 16.0))]
    (line,) = stake.dedup([copy, *casts])
    assert (line.kind, line.severity, line.stake, line.also) == ("copy_overhead", "high", copy.stake, casts)


def test_autocasts_weight_casts_are_one_finding_at_the_line_that_entered_autocast():
    # examples/autocast_weights.py's recorded report: the two weight casts (hot_operator, one per shape) and the
    # copy_overhead that sums them; with the operator pass's record of where autocast was entered, all three move
    # there (where model.to(torch.bfloat16) replaces it) and are one finding; the GEMM's observation stays at :36
    from diagnose.report import io
    from diagnose.report.model import AutocastEntry

    rep = io.load(str(Path(__file__).resolve().parents[1] / "data" / "findings" / "autocast_weights_report.json"))
    assert rep.operator_summary.autocast_entries == []  # recorded before the entries were: the casts' own line
    (line, *_) = findings.derive(rep)
    assert (line.kind, line.location) == ("copy_overhead", "examples/autocast_weights.py:36")
    casts = [f for f in line.also if f.kind == "hot_operator" and f.evidence.get("copy") == "autocast"]
    assert len(casts) == 2 and {str(f.evidence["input_shapes"][0]) for f in casts} == {"[4096, 1024]", "[1024, 4096]"}
    rep.operator_summary.autocast_entries = [AutocastEntry("examples/autocast_weights.py:20", "cpu", "bfloat16", 1),
                                             AutocastEntry("examples/autocast_weights.py:34", "cpu", "bfloat16", 40)]
    found = findings.derive(rep)
    (line,) = [f for f in found if f.location == "examples/autocast_weights.py:34"]  # entered most
    assert line.kind == "copy_overhead" and line.evidence["autocast_entered_at"] == line.location
    assert AUTOCAST_INFERENCE_TEXT not in line.suggestion
    # entered under torch.inference_mode, where autocast caches no weight cast: the suggestion says so
    rep.operator_summary.autocast_entries[1].inference_mode = 40
    (again,) = [f for f in findings.derive(rep) if f.location == "examples/autocast_weights.py:34"]
    assert again.suggestion.endswith(AUTOCAST_INFERENCE_TEXT) and "torch.no_grad()" in again.suggestion
    assert sorted(f.evidence["copy"] for f in line.also if f.kind == "hot_operator") == ["autocast", "autocast"]
    assert all("at examples/autocast_weights.py:36" in f.title for f in line.also if f.kind == "hot_operator")
    assert not [f for f in found if f.kind == "hot_operator" and f.evidence.get("copy")]  # none on its own
    assert [(f.kind, f.severity, f.location) for f in found if f is not line] == [
        ("hot_operator", "low", "examples/autocast_weights.py:36")]  # the bf16 GEMM: an observation


def test_a_row_made_at_two_user_lines_has_no_library_line_so_its_findings_at_one_line_merge():
    # examples/contiguous_copies.py: one copy_ row from `.contiguous()` at :15 and at :19, tied and listed in
    # source order; in the runs where :19 ran longer, the row's "library line" was :19, another of its own user
    # lines, so the micro-benchmark's finding at :15 carried it and did not merge with copy_overhead's at :15
    from diagnose.findings import place
    from diagnose.report.model import ModuleShare, SourceShare

    lines = [SourceShare("c.py:15", 4, 40_000.0, min_self_us=9_000.0), SourceShare("c.py:19", 4, 52_000.0,
                                                                                  min_self_us=9_100.0)]
    row = OperatorRow(name="aten::copy_", input_shapes=[[2048, 2048], [2048, 2048]], dtypes=["float"] * 2, calls=8,
                      self_cpu_us=92_000.0, total_cpu_us=92_000.0, self_pct=70.0, source="c.py:15", sources=lines,
                      library_line="c.py:19", modules=[ModuleShare(None, None, "c.py:19", 4, 52_000.0),
                                                       ModuleShare(None, None, "c.py:15", 4, 40_000.0)])
    assert row.library_elsewhere() is None
    assert dataclasses.replace(row, library_line="transformers/x.py:335").library_elsewhere() == "transformers/x.py:335"
    rep = report()
    rep.operators = [row]
    shapes = {"input_shapes": row.input_shapes}
    copy = Finding("copy_overhead", "high", "c", "aten::copy_", "c.py:15", {}, "s", "operators", stake=Stake(72.0, ""))
    seq = place.annotate(Finding("sequential_operator", "high", "s", "aten::copy_", "c.py:15", shapes, "s",
                                 "microbench", stake=Stake(72.0, "")), rep)
    assert seq.place.library_line is None and "c.py:19" not in seq.title
    (line,) = stake.dedup([copy, seq])
    assert line.location == "c.py:15" and [f.kind for f in line.also] == ["sequential_operator"]


def test_operator_rules_put_their_share_on_the_wall_time_scale_and_a_rule_without_an_estimate_gets_none():
    rep = report([op("aten::sort", 50), op("aten::add", 50, source="m.py:4")], operator_share=0.8)
    mb = Finding("sequential_operator", "high", "t", "aten::sort", "m.py:3", {"share_pct": 50.0}, "s", "microbench",
                 stake=stake.operator_stake(rep, 50.0))
    counters = Finding("low_efficiency", "low", "cpi", None, None, {"cpi": 1.2}, "s", "counters")
    assert stake.fill(mb).stake.pct == pytest.approx(40.0)
    assert stake.fill(counters).stake == Stake(None, "unknown", confidence=1.0)
    assert stake.rank([counters, mb]) == [mb, counters]


def test_while_threads_wait_a_hot_operator_is_judged_on_the_time_its_calls_keep_alone_at_the_usable_count():
    # examples/too_many_threads.py's numbers: tanh took 515 µs a call in the operator pass of 8 threads on 2 CPUs,
    # and 96 µs alone at 2 threads (the micro-benchmark): 19% of its 24% share is its own, the rest waiting
    rep = _threads8()
    tanh, mm = op("aten::tanh", 24.0), op("aten::mm", 76.0)
    tanh.self_cpu_us, mm.self_cpu_us = 515.0 * tanh.calls, 1638.0 * mm.calls
    rep.operators = [mm, tanh]

    def alone(name, threads, us):
        return MicrobenchRow(op=name, input_shapes=[[64, 64]], dtypes=["float"], threads=threads, median_us=us,
                             iqr_us=1.0)

    rep.microbenchmarks = [alone("aten::tanh", 8, 143.0), alone("aten::tanh", 1, 193.0), alone("aten::mm", 2, 1446.0)]
    # the usable count not measured for tanh: its share stands
    hot = {f.op: f for f in op_rules.hot_operator(rep)}
    assert hot["aten::tanh"].evidence["share_pct"] == 24.0 and "alone" not in hot["aten::tanh"].evidence
    rep.microbenchmarks.append(alone("aten::tanh", 2, 96.0))
    hot = {f.op: f for f in op_rules.hot_operator(rep)}
    assert "aten::tanh" not in hot  # 24% x 96/515 = 4.5%, under the 10% a hot operator needs
    mm_alone = hot["aten::mm"].evidence["alone"]
    assert mm_alone["threads"] == 2 and mm_alone["kept_pct"] == pytest.approx(88.3)
    assert hot["aten::mm"].stake.pct == pytest.approx(76.0 * 1446 / 1638, abs=0.01)
    assert "alone at 2 threads" in hot["aten::mm"].title and "at 2 threads" in hot["aten::mm"].stake.basis
    # without the wait (no oversubscription measured) the operator pass's share is the operator's
    rep.threads = None
    hot = {f.op: f for f in op_rules.hot_operator(rep)}
    assert hot["aten::tanh"].evidence["share_pct"] == 24.0 and "alone" not in hot["aten::tanh"].evidence
    assert hot["aten::mm"].stake.pct == pytest.approx(76.0)


def _threads8(gain=None) -> Report:
    rep = Report(target=TargetInfo(script="model.py"),
                 machine=Machine(usable_cpus=2, logical_cpus=2, intra_op_threads=8))
    rep.threads = analyse(recording.load(str(THREADS / "threads8.json")), 2)
    if gain is not None:
        rep.threads.sweep = Sweep(recommendation=SweepRecommendation(
            code="torch.set_num_threads(2)", env="OMP_NUM_THREADS=2", gain_vs_configured_pct=gain))
    return rep


def test_oversubscription_stake_is_the_wait_share_or_the_sweeps_measured_saving():
    rep = _threads8()
    (f,) = thread_rules.oversubscription(rep)
    # runqueue_wait_share 0.5968, less what the others' CPUs explain (own_wait_share)
    own = thread_rules.own_wait_share(rep.threads)
    assert f.stake.pct == pytest.approx(round(100 * own, 1)) and f.stake.upper_bound
    assert 59.0 < f.stake.pct < 59.7
    (g,) = thread_rules.oversubscription(_threads8(gain=25.0))
    assert g.stake.pct == pytest.approx(20.0) and not g.stake.upper_bound  # 1.25x throughput = 20% less time
    assert "sweep" in g.stake.basis


def test_every_finding_of_a_real_report_has_a_time_at_stake():
    from diagnose.report import io

    rep = io.load(str(Path(__file__).resolve().parents[1] / "data" / "compare" / "row_loop_before.json"))
    fs = findings.derive(rep)
    assert fs and all(f.stake is not None and f.stake.confidence is not None for f in fs)
    top = fs[0]
    assert top.kind == "python_overhead" and top.severity == "high"
    # the loop's line: the Python layer's finding holds the operator layer's findings there
    assert {a.kind for a in top.also} >= {"hot_operator"}
    # after de-duplication no line is flagged by two layers
    for f in fs:
        if f.location:
            assert len({g.layer for g in fs if g.location == f.location}) == 1, f.location


def test_the_terminal_summary_names_what_else_was_found_at_the_same_line():
    from diagnose.render import terminal
    from diagnose.report import io

    rep = io.load(str(Path(__file__).resolve().parents[1] / "data" / "compare" / "row_loop_before.json"))
    top = rep.findings[0]
    assert top.also
    text = terminal.render(rep)
    block = text.split(f"[{top.severity}] {top.kind}: ", 1)[1].split("\n  [", 1)[0]
    # each piece with its operator: five unnamed "[medium] hot_operator (operators)" said nothing apart
    pieces = "; ".join(f"[{a.severity}] {a.kind}{' ' + a.op if a.op else ''} ({a.layer})" for a in top.also)
    assert "also at this line: " + pieces in block
    assert all(a.op in block for a in top.also if a.op)


def test_another_operator_of_the_same_line_lends_neither_its_severity_nor_its_stake():
    # `torch.tanh(x @ x)` under 8 threads on 2 CPUs (a CI run): a medium low_efficiency on tanh merged with
    # a low hot_operator mm at 69% of the time must not outrank the high oversubscription at 61%
    eff = Finding("low_efficiency", "medium", "tanh at 10% of its roof", "aten::tanh", "m.py:17", {}, "s",
                  "efficiency", stake=Stake(29.8, ""))
    hot_tanh = Finding("hot_operator", "medium", "tanh hot", "aten::tanh", "m.py:17", {}, "s", "operators",
                       stake=Stake(29.8, ""))
    hot_mm = Finding("hot_operator", "low", "mm hot", "aten::mm", "m.py:17", {}, "s", "operators",
                     stake=Stake(69.4, ""), observation=True)
    over = Finding("oversubscription", "high", "8 threads", None, "m.py:12", {}, "s", "threads",
                   stake=Stake(61.2, ""))
    ranked = stake.rank(stake.dedup([eff, hot_tanh, hot_mm, over]))
    assert [f.kind for f in ranked] == ["oversubscription", "low_efficiency"]
    merged = ranked[1]
    assert (merged.severity, merged.stake.pct) == ("medium", 29.8)
    assert [a.op for a in merged.also] == ["aten::tanh", "aten::mm"]
    assert merged.severity_from is None
    # a piece about another operator leads where it is the line's most severe: a high one is not hidden in the
    # `also` of a medium one (nor does it lend that one its severity or stake)
    hot_mm = dataclasses.replace(hot_mm, severity="high", observation=False)
    (line,) = stake.dedup([eff, hot_tanh, hot_mm])
    assert (line.kind, line.op, line.severity, line.stake.pct) == ("hot_operator", "aten::mm", "high", 69.4)
    assert sorted(a.kind for a in line.also) == ["hot_operator", "low_efficiency"]


def test_the_same_operator_at_other_shapes_lends_neither_its_severity_nor_its_stake():
    # examples/mlp.py:30 (the control): a low sequential_operator on mm at [1024,256],[256,512] (14% of the
    # operators) merged with a hot_operator on mm at [1024,256],[256,1024] showed that one's 26.7% at stake
    seq = Finding("sequential_operator", "low", "mm flat", "aten::mm", "mlp.py:30",
                  {"input_shapes": [[1024, 256], [256, 512]]}, "s", "microbench", stake=Stake(11.2, ""))
    # (a healthy GEMM's hot_operator is a low observation)
    hot_other = Finding("hot_operator", "low", "mm hot", "aten::mm", "mlp.py:30",
                        {"input_shapes": [[1024, 256], [256, 1024]]}, "s", "operators", stake=Stake(26.7, ""),
                        observation=True)
    hot_same = Finding("hot_operator", "low", "mm hot", "aten::mm", "mlp.py:30",
                       {"input_shapes": [[1024, 256], [256, 512]]}, "s", "operators", stake=Stake(12.0, ""))
    [merged] = stake.dedup([seq, hot_other, hot_same])
    assert merged.kind == "sequential_operator"
    assert (merged.severity, merged.stake.pct) == ("low", 12.0)
    assert [a.evidence["input_shapes"][1] for a in merged.also] == [[256, 1024], [256, 512]]
    # the other shape's piece at medium is the line's most severe: it leads, on its own severity and stake
    [line] = stake.dedup([seq, dataclasses.replace(hot_other, severity="medium", observation=False), hot_same])
    assert (line.kind, line.severity, line.stake.pct, line.evidence) == (
        "hot_operator", "medium", 26.7, {"input_shapes": [[1024, 256], [256, 1024]]})


def test_a_healthy_kernel_lends_no_stake_to_a_finding_merged_at_its_line():
    # examples/too_many_threads.py in CI: a low python_overhead at the step's line merged with the healthy mm
    # there (an observation, 53% of the run) ranked above the high oversubscription (63% wait share)
    loop = Finding(kind="python_overhead", severity="low", title="step() spends 19%", op="aten::mm",
                   location="m.py:17", layer="python", suggestion="", evidence={},
                   stake=Stake(18.8, "share of the cProfile pass"))
    mm = Finding(kind="hot_operator", severity="low", title="mm 67%", op="aten::mm", location="m.py:17",
                 layer="operators", suggestion="", evidence={"input_shapes": [[512, 512]]}, stake=Stake(53.1, "x"),
                 observation=True)
    threads = _settled("oversubscription", "high", 63.1, basis="run-queue wait share (an upper bound)",
                       upper_bound=True)
    ranked = stake.rank(stake.dedup(stake.rank([stake.settle(loop), stake.settle(mm), threads])))
    assert ranked[0].kind == "oversubscription"
    merged = next(f for f in ranked if f.location == "m.py:17")
    assert merged.stake.pct == 18.8 and merged.also[0].kind == "hot_operator"


def test_no_rule_leaves_a_ranking_key_in_evidence():
    # what stake.py ranks, settles and merges by is typed (report v3); evidence keeps each rule's measurements.
    # Every committed real report, its findings derived again by today's rules
    from test_report_io import COMMITTED_REPORTS

    from diagnose.report import io

    seen = set()
    for path in COMMITTED_REPORTS:  # doubted results (not confirmed) too: every rule's findings
        report = io.load(str(path))
        findings.judge(report)
        for f in report.findings + [n.finding for n in report.not_confirmed]:
            for piece in [f, *f.also]:
                seen.add(piece.kind)
                assert not set(piece.evidence) & set(io.V2_RANKING_KEYS), (path.name, piece.kind)
                assert piece.stake is not None and piece.stake.confidence is not None, (path.name, piece.kind)
            assert not any(piece.also for piece in f.also)
    assert seen >= {"hot_operator", "low_efficiency", "memory_churn", "python_overhead", "oversubscription",
                    "external_contention", "sequential_operator", "copy_overhead"}
