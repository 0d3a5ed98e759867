"""Finding rules on small reports: thresholds, severities, evidence."""

from __future__ import annotations

import dataclasses

from diagnose import findings
from diagnose.doctor.workload import KEEP_PAGES
from diagnose.render import fmt
from diagnose.report import io as report_io
from diagnose.report.model import OperatorRow, OperatorSummary, Report, Run, SourceShare, TargetInfo


def row(name, pct, source="m.py:3", called_by=None, mem=0):
    us = pct * 100.0
    return OperatorRow(name=name, input_shapes=[[64, 64]], dtypes=["float"], calls=10, self_cpu_us=us,
                       total_cpu_us=us, self_pct=pct, source=source,
                       sources=[SourceShare(location=source, calls=10, self_cpu_us=us)],
                       cpu_memory_bytes=mem, called_by=called_by or {"": us})


def report(*rows, **summary) -> Report:
    r = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=1.0, instrumented_wall_s=1.5))
    r.operators = sorted(rows, key=lambda x: -x.self_cpu_us)
    r.operator_summary = report_io.typed(OperatorSummary, summary)
    return r


def kinds(rep):
    return [(f.kind, f.severity, f.op) for f in findings.derive(rep)]


def test_healthy_compute_is_low_and_only_once():
    rep = report(row("aten::addmm", 50), row("aten::mm", 30), row("aten::relu", 5), row("aten::add", 15, source="m.py:4"))
    assert kinds(rep) == [("hot_operator", "medium", "aten::add"), ("hot_operator", "low", "aten::addmm")]


def test_elementwise_hot_operator_is_high_with_evidence():
    rep = report(row("aten::div", 45, source="m.py:12"), row("aten::addmm", 55))
    fs = findings.derive(rep)
    top = fs[0]
    assert (top.kind, top.severity, top.op, top.location) == ("hot_operator", "high", "aten::div", "m.py:12")
    assert top.evidence["share_pct"] == 45 and top.evidence["threshold_pct"] == 30
    assert top.evidence["instrumentation_overhead"] == 1.5
    assert "Fuse" in top.suggestion or "fuse" in top.suggestion


def test_below_threshold_raises_nothing():
    assert kinds(report(*(row(f"aten::op{i}", 9.0) for i in range(11)))) == []


def test_copy_overhead_counts_layout_copies_not_kernel_internal_copies():
    internal = row("aten::copy_", 25, called_by={"aten::addmm": 2500.0})
    assert [k for k in kinds(report(row("aten::addmm", 75), internal)) if k[0] == "copy_overhead"] == []
    layout = row("aten::copy_", 20, source="m.py:7", called_by={"aten::contiguous": 2000.0})
    fs = [f for f in findings.derive(report(row("aten::addmm", 80), layout)) if f.kind == "copy_overhead"]
    assert len(fs) == 1 and fs[0].severity == "medium" and fs[0].location == "m.py:7"
    assert fs[0].evidence["share_pct"] == 20.0


def test_memory_churn_thresholds():
    gib = 1 << 30
    quiet = report(row("aten::addmm", 100), memory={"allocated_bytes": 100 << 20, "allocations": 10})
    assert [k for k in kinds(quiet) if k[0] == "memory_churn"] == []
    # the allocating row too small to be a hot operator of its own: its line's one finding is the churn
    churn = report(row("aten::addmm", 95), row("aten::empty", 5, source="m.py:9", mem=6 * gib),
                   memory={"allocated_bytes": 6 * gib, "allocations": 50_000})
    fs = [f for f in findings.derive(churn) if f.kind == "memory_churn"]
    # 6 GiB/s over the 1.0 s the uninstrumented pass took for the same run (4 GiB/s over the operator pass's 1.5 s)
    assert len(fs) == 1 and fs[0].severity == "medium" and fs[0].evidence["span_s"] == 1.0
    assert fs[0].location == "m.py:9" and fs[0].evidence["allocations"] == 50_000
    assert fs[0].borderline is None
    # 2 GiB/s is at the medium line: within this run's noise (10%) it is low, borderline medium, in every run
    at = report(row("aten::addmm", 95), row("aten::empty", 5, source="m.py:9", mem=2 * gib),
                memory={"allocated_bytes": 2 * gib, "allocations": 50_000})
    (f,) = [f for f in findings.derive(at) if f.kind == "memory_churn"]
    assert f.severity == "low" and f.borderline.would_be == "medium" and f.borderline.measure == "allocation rate"
    assert f.borderline.low < 2.0 <= f.borderline.high and f.borderline.threshold == 2.0


def test_findings_are_ranked_by_severity_then_share():
    rep = report(row("aten::div", 35, source="m.py:4"), row("aten::mul", 20, source="m.py:5"), row("aten::addmm", 45))
    assert [(f.severity, f.op) for f in findings.derive(rep)] == [
        ("high", "aten::div"), ("medium", "aten::mul"), ("low", "aten::addmm")]


def test_a_contiguous_after_a_transpose_is_a_low_copy_finding_from_5_percent():
    # a .contiguous() after a transpose at one line took 11% of operator time: under the old 15% threshold
    chain = [row("aten::contiguous", 0.5, source="m.py:7"),
             row("aten::clone", 0.5, source="m.py:7", called_by={"aten::contiguous": 50.0}),
             row("aten::copy_", 10.0, source="m.py:7", called_by={"aten::clone": 1000.0})]
    (f,) = [f for f in findings.derive(report(row("aten::addmm", 89), *chain)) if f.kind == "copy_overhead"]
    assert (f.severity, f.location, f.evidence["copy"], f.evidence["threshold_pct"]) == (
        "low", "m.py:7", "contiguous", 5.0)
    assert f.evidence["share_pct"] == 10.5  # clone's and copy_'s self time: the copy's body
    assert f.title == ("Copies your code asks for take 10% of operator CPU time, most of it .contiguous() at m.py:7 "
                       "(10%)")
    assert ".contiguous()" in f.suggestion and "transpose" in f.suggestion
    small = [row("aten::copy_", 4.0, source="m.py:7", called_by={"aten::clone": 400.0}), row("aten::addmm", 96.0)]
    assert [k for k in kinds(report(*small)) if k[0] == "copy_overhead"] == []


def test_indexed_assignment_is_not_a_layout_copy_and_is_not_told_to_drop_contiguous():
    # out[i] = v in a loop: select and copy_, both called from Python at the same line
    rows = [row("aten::copy_", 25, source="m.py:18"), row("aten::select", 8, source="m.py:18"),
            row("aten::addmm", 67, source="m.py:20")]
    fs = findings.derive(report(*rows))
    assert [f for f in fs if f.kind == "copy_overhead"] == []
    (hot,) = [f for f in fs if f.op == "aten::copy_"]
    assert hot.kind == "hot_operator" and "Indexed assignment (out[i] = v)" in hot.suggestion
    assert ".contiguous()" not in hot.suggestion
    # the same copy_ without an indexing view at its line is an explicit .copy_() the code asks for
    fs = findings.derive(report(row("aten::copy_", 25, source="m.py:18"), row("aten::addmm", 75, source="m.py:20")))
    (copy,) = [f for f in fs if f.kind == "copy_overhead"]
    assert (copy.severity, copy.evidence["copy"]) == ("medium", "copy_") and "out=" in copy.suggestion


def test_the_row_loop_reports_no_layout_copy():
    # examples/fix/row_loop_before.py:28, `out[i] = (row - row.mean()) / (row.std() + 1e-5)`: its copies are
    # div_'s and add's conversions of Python scalars (to -> _to_copy -> copy_ under aten::div_ / aten::add)
    # and the indexed assignment; the report once said "Layout copies take 15%" and suggested .contiguous()
    from pathlib import Path

    from diagnose.findings.operators import copy_overhead
    from diagnose.report import io

    rep = io.load(str(Path(__file__).resolve().parents[1] / "data" / "compare" / "row_loop_before.json"))
    assert copy_overhead(rep) == []


def test_memory_churn_rate_is_over_the_recorded_window():
    # --iters 20 --profile-iters 5: the profiler recorded (and counted allocations over) the last 5
    # iterations, 0.1 s each, while the operator pass's wall time covers all 20 (2.0 s)
    from diagnose.report.model import IterationStats, TargetInfo

    gib = 1 << 30
    rep = report(row("aten::addmm", 95), row("aten::empty", 5, source="m.py:9", mem=3 * gib // 2),
                 memory={"allocated_bytes": 3 * gib // 2, "allocations": 5_000})
    rep.target = TargetInfo(script="m.py", mode="function", function="step", iters=20)
    rep.run = Run(wall_s=1.9, instrumented_wall_s=2.0,
                  instrumented_iterations=IterationStats(n=5, median_s=0.1, q1_s=0.09, q3_s=0.11, min_s=0.09,
                                                         max_s=0.12))
    (f,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
    # 1.5 GiB in 0.5 s = 3 GiB/s (medium); over the 2.0 s wall it read 0.75 GiB/s, under the 1 GiB/s floor
    assert f.severity == "medium" and f.evidence["bytes_per_s"] == 3 * gib and f.evidence["span_s"] == 0.5
    assert f.evidence["span_s_basis"].startswith("5 recorded iterations")
    # every iteration recorded: the operator pass's wall time is the span
    rep.target.iters = 5
    rep.run.instrumented_wall_s = 0.5
    (g,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
    assert g.evidence["span_s"] == 0.5 and g.evidence["span_s_basis"] == "the operator pass's wall time"
    # with the uninstrumented pass's calls (20 in 1.9 s): the 5 recorded ones at their mean, 0.475 s, without the
    # profiler's cost and the faults its heap adds (Report.real_span)
    rep.target.iters = 20
    rep.run.iterations = IterationStats(n=20, median_s=0.095, q1_s=0.09, q3_s=0.1, min_s=0.09, max_s=0.1)
    (h,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
    assert h.evidence["span_s"] == 0.475 and h.evidence["bytes_per_s"] == round(1.5 * gib / 0.475)
    assert h.evidence["span_s_basis"].startswith("5 recorded calls x the uninstrumented pass's mean call")


def test_memory_churn_with_steps_does_not_hang_on_how_many_steps_the_window_held():
    # examples/attention.py allocates 100 MiB a step; its loop was found at step 6 or 8 of 10, so its window held 4
    # steps (400 MiB) or 2 (200 MiB): under the 256 MiB a run needs without steps, the finding came and went
    from diagnose.report.model import IterationStats

    mib = 1 << 20

    def steps(n: int, s: float) -> IterationStats:
        return IterationStats(n=n, median_s=s, q1_s=s, q3_s=s, min_s=s, max_s=s)

    for n in (2, 4):
        rep = report(row("aten::addmm", 60), row("aten::bmm", 40, source="m.py:9", mem=n * 100 * mib),
                     memory={"allocated_bytes": n * 100 * mib, "allocations": 10 * n})
        rep.run = Run(wall_s=0.035 * n, instrumented_wall_s=0.05 * n, iterations=steps(n, 0.035),
                      instrumented_iterations=steps(n, 0.05))
        (f,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
        # 100 MiB a step of 35 ms: 2.8 GiB/s, medium, whatever the window's length
        assert f.severity == "medium" and f.evidence["bytes_per_s"] == round(100 * mib / 0.035), f.evidence
    # without steps the same 200 MiB over a run make no rate: a one-off allocation could (CHURN_MIN_BYTES)
    rep = report(row("aten::addmm", 60), row("aten::bmm", 40, source="m.py:9", mem=200 * mib),
                 memory={"allocated_bytes": 200 * mib, "allocations": 20})
    rep.run = Run(wall_s=0.07, instrumented_wall_s=0.1)
    assert not [f for f in findings.derive(rep) if f.kind == "memory_churn"]


def test_autograd_recording_without_a_backward_is_named_at_its_line():
    from diagnose.report.model import Autograd, RecordingLine, Steps

    rep = report(row("aten::addmm", 90, source="serve.py:36"), row("aten::relu", 10, source="serve.py:36"))
    rep.autograd = Autograd(calls=1311, recording_calls=1173, backward_ops=0,
                            lines=[RecordingLine("serve.py:36", 1104), RecordingLine("serve.py:37", 69)])
    found = [f for f in findings.derive(rep) if f.kind == "autograd_in_inference"]
    assert len(found) == 1 and found[0].location == "serve.py:36" and found[0].severity == "medium"
    assert "89%" in found[0].title and "torch.inference_mode()" in found[0].suggestion
    # a backward in the window, training steps, or too few recording calls: nothing to say
    rep.autograd.backward_ops = 12
    assert not [f for f in findings.derive(rep) if f.kind == "autograd_in_inference"]
    rep.autograd.backward_ops = 0
    rep.steps = Steps(detector="optimizer", detail="SGD.step()", steps_seen=30, skip_steps=5, steps=20)
    assert not [f for f in findings.derive(rep) if f.kind == "autograd_in_inference"]
    rep.steps = None
    rep.autograd.recording_calls, rep.autograd.lines = 300, [RecordingLine("serve.py:36", 300)]
    assert not [f for f in findings.derive(rep) if f.kind == "autograd_in_inference"]


def test_memory_churn_stake_is_the_fresh_pages_it_faults_in_when_the_run_has_steps():
    # an MLP-like training step: every operator allocates its output (4 GiB/s), but the allocator reuses
    # most of it: 2,000 minor faults per 20 ms step cost ~2 ms (10%), not the allocating operators' 100%
    from diagnose.report.model import IterationStats

    gib = 1 << 30
    rep = report(row("aten::addmm", 95, mem=2 * gib), row("aten::relu", 5, source="m.py:9", mem=4 * gib),
                 memory={"allocated_bytes": 6 * gib, "allocations": 50_000})
    rep.run.iterations = IterationStats(n=10, median_s=0.02, q1_s=0.019, q3_s=0.021, min_s=0.018, max_s=0.03)
    rep.run.minor_faults = 20_000
    (f,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
    assert f.stake.pct == 10.0 and "minor page faults per step" in f.stake.basis
    assert f.severity == "medium" and not f.stake.confidence_why  # measured, not an upper bound
    # without steps: the run's faults over its wall time (1.0 s), an upper bound (setup counts too), halved
    rep.run.iterations = None
    (g,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
    assert g.stake.pct == round(100 * 20_000e-6 / 1.0, 2) and g.stake.confidence == 0.5 and g.stake.upper_bound
    assert "over the run's wall time" in g.stake.basis
    # no fault count at all: not measured, and the rule's severity stands (the allocating operators' whole time,
    # the bound before, is most of any run)
    rep.run.minor_faults = None
    (h,) = [f for f in findings.derive(rep) if f.kind == "memory_churn"]
    assert h.stake.pct is None and h.stake.basis.startswith("not measured") and not h.stake.upper_bound
    assert h.rule_severity is None and h.severity_basis is None  # the stake did not move the rule's severity


def test_memory_churn_takes_the_time_and_severity_of_the_doctors_page_faults_finding():
    from diagnose.report.model import Doctor, DoctorCheck, IterationStats, Trial

    gib = 1 << 30
    rep = report(row("aten::addmm", 95), row("aten::tanh", 5, source="m.py:9", mem=6 * gib),
                 memory={"allocated_bytes": 6 * gib, "allocations": 50})
    rep.run.iterations = IterationStats(n=10, median_s=0.1, q1_s=0.1, q3_s=0.1, min_s=0.1, max_s=0.1)
    rep.run.minor_faults = 400_000  # 40 ms of each 100 ms step
    rep.doctor = Doctor(checks=[DoctorCheck("page_faults", "warn", "faults", at_stake_pct=40.0,
                                            suggestion="Keep freed pages.")])
    fs = findings.derive(rep)
    churn = next(f for f in fs if f.kind == "memory_churn")
    # one cause, one finding: the doctor's page_faults finding is the churn's piece (stake._fold_unplaced), not a
    # finding of its own beside it, and its change is the first thing to try
    assert "page_faults" not in [f.kind for f in fs]
    (faults,) = [a for a in churn.also if a.kind == "page_faults"]
    assert faults.layer == "doctor" and faults.location is None and faults.stake.confidence is not None  # settled
    # the allocator that keeps freed pages first, then the code's own reuse, each said once
    assert churn.suggestion.startswith(KEEP_PAGES + ". Or, in your code: reuse buffers instead of allocating")
    assert churn.suggestion.endswith("keeps nothing alive.") and churn.suggestion.count("out= arguments") == 1
    # no trial ran: the check's estimate (40% of the step) is the time both hold, high in both (the churn's rate,
    # 4 GiB/s over the 1.5 s pass, alone would make it medium)
    assert churn.stake.pct == faults.stake.pct == 40.0 and "page_faults finding holds" in churn.stake.basis
    assert churn.severity == faults.severity == "high" and churn.rule_severity is None
    assert "measured" not in churn.title  # nothing was tried
    # the piece has no line of its own (it is the time the line's allocations fault in): the heading says so
    assert fmt.also_heading(churn) == "also about the same time"
    located = dataclasses.replace(faults, location=churn.location)
    assert fmt.also_heading(dataclasses.replace(churn, also=[located])) == "also at this line"
    # a check without an estimate gives no time to take: the churn's rate decides (4 GiB/s: medium)
    rep.doctor.checks = [DoctorCheck("page_faults", "warn", "faults", at_stake_pct=None)]
    churn = next(f for f in findings.derive(rep) if f.kind == "memory_churn")
    assert churn.stake.pct is None and churn.severity == "medium"
    rep.doctor.checks = [DoctorCheck("page_faults", "warn", "faults", at_stake_pct=40.0)]
    # a trial won: the faults' cost was measured, and the churn's severity is judged on that measurement's interval
    # (resnet_train: jemalloc 1.007-1.36x left it medium with no stake by its rule, now low by the interval's low end)
    rep.doctor.trials = [Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="win", speedup=1.123,
                               ci_low=1.007, ci_high=1.358, rounds=9)]
    fs = findings.derive(rep)
    churn = next(f for f in fs if f.kind == "memory_churn")
    assert [f.kind for f in fs].count("page_faults") == 0 and [a.kind for a in churn.also] == ["page_faults"]
    # the measured change leads: in the title and as the first thing to try
    assert churn.title.endswith("; measured 1.12x faster per step with jemalloc")
    assert churn.suggestion.startswith("LD_PRELOAD=j")
    assert (churn.stake.pct, churn.stake.low, churn.stake.high) == (11.0, 0.7, 26.36)
    assert churn.stake.basis.startswith("measured: the fresh pages") and "jemalloc" in churn.stake.basis
    assert churn.severity == "low" and churn.borderline.would_be == "high"
    # a measured win decides the severity, not the allocation rate, its proxy (conv_nchw: 1.9-2.1 GiB/s at the
    # 2 GiB/s line made the churn low in two of five runs whose trials measured a 13-32% saving)
    slow = report(row("aten::addmm", 95), row("aten::tanh", 5, source="m.py:9", mem=2 * gib),
                  memory={"allocated_bytes": 2 * gib, "allocations": 50})
    slow.run = rep.run
    slow.doctor = Doctor(checks=rep.doctor.checks, trials=[
        Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="win", speedup=1.383, ci_low=1.147, ci_high=1.471,
              rounds=9)])
    churn = next(f for f in findings.derive(slow) if f.kind == "memory_churn")
    assert (churn.stake.low, churn.stake.high) == (12.82, 32.02)
    assert churn.severity == "medium" and churn.rule_severity == "high" and churn.borderline.would_be == "high"
    # the trials ran and none won: no page_faults finding, and the faults' cost was measured as nothing, so the
    # churn claims a measured 0 and is low (its rule said medium), as a thread finding whose trial gained nothing
    rep.doctor.trials = [Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="no gain", speedup=1.01)]
    fs = findings.derive(rep)
    churn = next(f for f in fs if f.kind == "memory_churn")
    assert "page_faults" not in [f.kind for f in fs] and churn.stake.pct == 0.0
    assert "gained nothing" in churn.stake.basis and "jemalloc 1.01x" in churn.stake.basis
    assert churn.severity == "low" and churn.rule_severity == "medium"
    # trials that could not tell (resnet_train: jemalloc 1.06x, 0.84-1.21x, over nine rounds) rule nothing out:
    # the doctor's finding carries the check's estimate, at most the 17% the interval reaches; its interval reaches
    # under the 5% line a fix can be confirmed from, so low, borderline medium, even from nine rounds (stake.settle:
    # the point decides only between medium and high), and the churn takes the same stake and severity
    rep.doctor.trials = [Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="no gain", speedup=1.06,
                               ci_low=0.84, ci_high=1.21, rounds=9, method="rounds")]
    fs = findings.derive(rep)
    churn = next(f for f in fs if f.kind == "memory_churn")
    (faults,) = [a for a in churn.also if a.kind == "page_faults"]
    assert (faults.stake.pct, faults.stake.low, faults.stake.high) == (17.36, 0.0, 17.36)
    assert "could not tell" in faults.stake.basis and faults.severity == "low"
    assert faults.borderline.would_be == "medium"
    assert (churn.stake.pct, churn.stake.low, churn.stake.high) == (17.36, 0.0, 17.36)
    assert "could not tell" in churn.stake.basis and not churn.stake.basis.startswith("measured")
    assert churn.severity == "low" and churn.borderline.would_be == "medium"
    # trials that measured nothing (failed) say nothing of the faults' cost: no stake, the rule's severity
    rep.doctor.trials = [Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="failed")]
    churn = next(f for f in findings.derive(rep) if f.kind == "memory_churn")
    assert churn.stake.pct is None and churn.severity == "medium" and "measured nothing" in churn.stake.basis
    assert not churn.also and churn.suggestion.startswith("Reuse buffers")  # no doctor's finding to hold
    # trials deferred while the threads waited for CPUs (trials.defer): nothing measured the check's estimate, so
    # both hold it as low, which only a fifth of the step raises to medium (stake.settle), never to high
    rep.doctor.trials = [Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="deferred",
                               reason="deferred: the threads waited for a CPU 60% of their runnable time")]
    churn = next(f for f in findings.derive(rep) if f.kind == "memory_churn")
    (faults,) = [a for a in churn.also if a.kind == "page_faults"]
    assert faults.title.endswith("not measured, its trials deferred while the threads wait for CPUs")
    assert faults.evidence["deferred"] == ["jemalloc"] and "waited for a CPU 60%" in faults.stake.basis
    assert churn.stake.pct == faults.stake.pct == 40.0
    assert churn.severity == faults.severity == "medium" and churn.rule_severity == faults.rule_severity == "low"
    rep.doctor.checks = [DoctorCheck("page_faults", "warn", "faults", at_stake_pct=12.0)]
    churn = next(f for f in findings.derive(rep) if f.kind == "memory_churn")
    (faults,) = [a for a in churn.also if a.kind == "page_faults"]
    assert churn.stake.pct == faults.stake.pct == 12.0 and churn.severity == faults.severity == "low"


def test_a_kernels_internal_copy_is_a_low_observation_not_a_hot_operator_to_fix():
    # rng_setup's MLP on this Xeon: addmm's broadcast-bias copy_ took 11% of operator time, read as medium
    # (the copy runs at addmm's line, so the line's one finding is addmm's, the copy listed under it)
    internal = row("aten::copy_", 30, called_by={"aten::addmm": 3000.0})
    (line,) = findings.derive(report(row("aten::addmm", 70), internal))
    assert line.op == "aten::addmm" and line.severity == "low"
    fs = [f for f in line.also if f.op == "aten::copy_"]
    assert fs and all(f.severity == "low" and f.observation for f in fs)
    assert "aten::addmm's own internal copy" in fs[0].suggestion
    # the same share from a .contiguous() the user wrote is a copy to fix
    layout = row("aten::copy_", 35, source="m.py:7", called_by={"aten::contiguous": 3500.0})
    (line,) = [f for f in findings.derive(report(row("aten::addmm", 65), layout)) if f.location == "m.py:7"]
    assert (line.kind, line.severity) == ("copy_overhead", "high")  # the cause leads its line
    hot = [f for f in line.also if f.op == "aten::copy_" and f.kind == "hot_operator"]
    assert [f.severity for f in hot] == ["high"] and hot[0].observation is False


def test_a_dtype_finding_with_a_float32_win_is_judged_on_the_trials_interval():
    from diagnose.report.model import Float64Origin, OutputCheck, Trial, WhatIf, WhatIfVariant

    f64 = dataclasses.replace(row("aten::addmm", 80, source="m.py:9"), dtypes=["double"])
    rep = report(f64, row("aten::relu", 20), float64_origins=[])
    rep.operator_summary.float64_origins = [Float64Origin("m.py:4", ".double()", 4, 1 << 20, parameters=4)]
    win = Trial("float32", "float32", "model.float()", verdict="win", speedup=1.228, ci_low=1.207, ci_high=1.258,
                rounds=3)
    rep.what_if = WhatIf(requested=["float32"], variants=[WhatIfVariant(
        "float32", "asked for", win, OutputCheck("match", rel_diff=1e-6, tolerance=1e-3), recommended=True)])
    (f,) = [f for f in findings.derive(rep) if f.kind == "dtype"]
    # the measured saving, 1 - 1/1.228 = 18.6%, with the trial's interval as every measured stake has
    # (stake.measured): 17.1-20.5%, across the 20% line, so medium, borderline high (the e2e float64 run's numbers)
    assert (f.stake.pct, f.stake.low, f.stake.high) == (18.6, 17.15, 20.51)
    assert f.stake.basis.startswith("measured: 1 - 1/speedup of the step with the model in float32")
    assert f.severity == "medium" and f.rule_severity == "high" and f.borderline.would_be == "high"


def test_a_float64_share_near_the_line_is_judged_on_its_interval_and_the_float32_what_if_follows_it():
    from diagnose.findings import dtypes
    from diagnose.whatif import variants

    from diagnose.report.model import Modules

    def at(pct):
        f64 = dataclasses.replace(row("aten::addmm", pct, source="m.py:9"), dtypes=["double"])
        r = report(f64, row("aten::relu", 100 - pct))
        r.modules = Modules(root_class="Net")  # a model the what-if could cast
        return r

    # 10.5%: 9.5-11.6% with the 10% floor, across the line: low, borderline medium, and the what-if still runs
    near = at(10.5)
    (f,) = dtypes.dtype(near)
    assert f.severity == "low" and (f.borderline.threshold, f.borderline.would_be) == (10.0, "medium")
    assert variants.conditions(near)["float32"][0] is True
    # 9%: 8.2-9.9%, clear of the line: no finding, and no float32 what-if
    assert dtypes.dtype(at(9.0)) == [] and variants.conditions(at(9.0))["float32"][0] is False
    (g,) = dtypes.dtype(at(40.0))
    assert g.severity == "high" and g.borderline is None


def test_the_data_wait_share_is_judged_on_its_interval():
    from diagnose.findings.steps import data_wait
    from diagnose.report.model import Steps

    def at(pct):
        r = report(row("aten::addmm", 100))
        r.steps = Steps(detector="optimizer", window_first=6, window_last=25, data_wait_s=pct / 100.0)
        return r

    assert data_wait(at(9.0)) == []  # 8.2-9.9%: clear of the 10% line
    (near,) = data_wait(at(26.0))  # 23.6-28.6%: across the 25% line, the milder side, with both ends
    assert near.severity == "low" and (near.borderline.threshold, near.borderline.would_be) == (25.0, "medium")
    (clear,) = data_wait(at(60.0))
    assert clear.severity == "high" and clear.borderline is None


def test_memory_churn_names_inference_mode_only_where_autograd_built_graphs_no_backward_used():
    from diagnose.report.model import Autograd

    gib = 1 << 30
    churn = report(row("aten::addmm", 95), row("aten::empty", 5, source="m.py:9", mem=6 * gib),
                   memory={"allocated_bytes": 6 * gib, "allocations": 50_000})
    text = "torch.inference_mode() for inference"

    def suggestion(autograd):
        churn.autograd = autograd
        (f,) = [f for f in findings.derive(churn) if f.kind == "memory_churn"]
        return f.suggestion

    assert text in suggestion(None)  # the pass did not say: the advice stays, as for any loop
    assert text in suggestion(Autograd(calls=100, recording_calls=80, backward_ops=0))  # graphs nobody used
    # already under inference_mode (examples/autocast_weights.py), or training: nothing to add there
    assert text not in suggestion(Autograd(calls=100, recording_calls=0, backward_ops=0, grad_mode_off_calls=100))
    assert text not in suggestion(Autograd(calls=100, recording_calls=80, backward_ops=40))
    assert "out= arguments and in-place operators" in suggestion(Autograd(calls=100, recording_calls=0,
                                                                          backward_ops=0))


def test_a_random_draw_under_a_dropout_is_named_as_the_models_dropout():
    from diagnose.findings.suggestions import suggestion_for

    mask = row("aten::bernoulli_", 30, source="m.py:12", called_by={"aten::dropout": 3000.0})
    drawn = row("aten::normal_", 30, source="m.py:14", called_by={"": 3000.0})
    rep = report(row("aten::addmm", 40), mask, drawn)
    text = suggestion_for(rep, "aten::bernoulli_", [[64, 64]], ["float"])
    # BERT training (benchmarks/targets/bert_train.py): its dropouts' bernoulli_ was the first finding, told to
    # "draw once outside the loop and reuse", which a model's dropout cannot
    assert text.startswith("Dropout's mask") and "p=0" in text and "--what-if compile" in text
    assert "Draw once outside the loop" not in text
    # a draw the user's code makes itself keeps the generic advice
    assert suggestion_for(rep, "aten::normal_", [[64, 64]], ["float"]).startswith("Random number generation")


def test_a_measured_allocator_win_keeps_the_churn_under_its_rate_line_where_its_allocations_hold_the_faults():
    """examples/transpose_copy.py on an Intel Xeon (2026-12-02): 48 MiB allocated a step at 0.88-0.93 GiB/s, at the
    1 GiB/s line the churn starts at within the noise, and 16-25 MiB of fresh pages faulted in a step, which
    jemalloc's 1.09-1.12x win measured. By its rate the churn was there (low, borderline) or not from run to run, and
    the doctor's finding stood alone at no line when it was not; the measured win is the churn's time either way."""
    from diagnose.report.model import BaselinePass, Doctor, DoctorCheck, IterationStats, Steps, Trial

    mib = 1 << 20

    won = Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="win", speedup=1.11, ci_low=1.09, ci_high=1.12,
                rounds=9, method="rounds")

    def churn(allocated_per_step, trial=won, baselines=(), status="warn"):
        rep = report(row("aten::addmm", 90), row("aten::tanh", 10, source="m.py:46", mem=10 * allocated_per_step),
                     memory={"allocated_bytes": 10 * allocated_per_step, "allocations": 40})
        rep.run.wall_s = 0.6  # 10 steps of 60 ms: 48 MiB a step is 0.78 GiB/s, under the 1 GiB/s line by its noise
        rep.run.iterations = IterationStats(n=10, median_s=0.06, q1_s=0.06, q3_s=0.06, min_s=0.06, max_s=0.06)
        rep.run.instrumented_iterations = IterationStats(n=10, median_s=0.15, q1_s=0.15, q3_s=0.15, min_s=0.15,
                                                         max_s=0.15)  # the operator pass's steps: its bytes' span
        rep.steps = Steps(detector="loop", window_first=6, window_last=15)
        rep.run.minor_faults = 60_000  # 6000 a step: 23 MiB of fresh pages, 10% of the step at 1 µs a fault
        rep.doctor = Doctor(checks=[DoctorCheck("page_faults", status, "faults", at_stake_pct=10.0)], trials=[trial],
                            baselines=list(baselines))
        fs = findings.derive(rep)
        return [f for f in fs if f.kind == "memory_churn"], [f for f in fs if f.kind == "page_faults"]

    (held,), alone = churn(48 * mib)
    assert held.location == "m.py:46" and held.severity == "medium" and not alone
    assert "page_faults" in [a.kind for a in held.also] and "measured 1.11x" in held.title
    # the check re-read over the trials' processes "ok" (its 1 µs a fault, a lower bound, put 4,064 faults a step at
    # 4.5% against the 5% line, gallery set Z) beside a trial that measured the faults' cost: the win is still the
    # churn's at its line, not the doctor's finding alone at none (the rate alone, 0.78 GiB/s, makes no churn)
    (held,), alone = churn(48 * mib, status="ok")
    assert held.location == "m.py:46" and held.severity == "medium" and not alone
    assert "page_faults" in [a.kind for a in held.also] and "measured 1.11x" in held.title
    # the same "ok" check whose trial ruled a gain out: neither finding (the rate alone is under its line)
    ruled_out = Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="no gain", speedup=1.0, ci_low=0.98,
                      ci_high=1.02, rounds=9, method="rounds")
    assert churn(48 * mib, ruled_out, status="ok") == ([], [])
    # allocations that cannot hold the faulted pages (16 MiB a step against 23 MiB): the faults are not theirs to
    # name, and the doctor's finding stands alone
    none, (alone,) = churn(16 * mib)
    assert none == [] and alone.severity == "medium" and alone.location is None
    # trials that could not tell (examples/transpose_copy.py on an EPYC, one run of five: a 5-7% effect against a 14%
    # floor): the doctor's finding stands on the check's estimate, and the same fresh pages are still the churn's at
    # its line, not page_faults at none (one cause, one name whichever way the trials went)
    unsure = Trial("jemalloc", "page_faults", "LD_PRELOAD=j", verdict="no gain", speedup=1.04, ci_low=0.97,
                   ci_high=1.12, rounds=9, method="rounds")
    (held,), alone = churn(48 * mib, unsure)
    assert held.location == "m.py:46" and not alone and "page_faults" in [a.kind for a in held.also]
    assert held.severity == next(a for a in held.also if a.kind == "page_faults").severity
    assert "not measured" in held.stake.basis and "measured 1." not in held.title
    none, (alone,) = churn(16 * mib, unsure)
    assert none == [] and alone.location is None
    # the faults the doctor's finding holds are the median over the processes the trials ran (4000 a step here, 16
    # MiB), not the first process's 6000: 20 MiB allocated a step holds them (examples/growing_cache.py: 2.0 MiB
    # allocated, its first process faulting in 2 KiB more, the median of ten half as much)
    others = [BaselinePass(f"trial-{i}-baseline", steps=10, median_s=0.06, minor_faults=40_000) for i in range(4)]
    none, (alone,) = churn(20 * mib)
    assert none == [] and alone.location is None
    (held,), alone = churn(20 * mib, baselines=others)
    assert held.location == "m.py:46" and not alone
    # a few pages short of the faults is still holding them (growing_cache: 512 pages allocated a step, 512.07
    # faulted): a process faults pages outside torch's allocations too
    (held,), alone = churn(5990 * 4096)
    assert held.location == "m.py:46" and not alone
