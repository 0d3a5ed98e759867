"""Rules on the operators layer: hot_operator, copy_overhead, memory_churn.

Thresholds (share of all operator self CPU time in the instrumented pass):
- hot_operator: an (operator, shape) row among the top five at >= 10%.
  Compute kernels (matmul, convolution, attention, RNN) are where a healthy
  model spends its time, so only the top row gets a finding if it is one,
  `low` and marked an observation (`observation`, stake.py: ranked after what
  there is to fix; look at its efficiency). A fused activation function
  (gelu, relu, silu, sigmoid, ...) or a kernel torch.compile generated
  (opkinds.COMPILED_KERNEL) is part of what a model computes too: under
  30% it is `low` and an observation (BERT's GELU took 11%); at 30% or more
  it is `medium` (something slows it: page faults of fresh outputs, a tiny
  tensor per call). A kernel's own internal copy (addmm writing its broadcast
  bias, copies.internal) is that kernel's cost: `low` and an observation, and
  so is weight initialisation recorded with the set-up (opkinds.weight_init).
  Any other operator is `medium` at >= 10% and `high` at >= 30%, since it
  usually means avoidable work. While the threads wait for CPUs
  (threads.oversubscribed), an operator micro-benchmarked alone at the
  thread count that ends the wait is judged, and its stake taken, on the
  share its calls keep there (`unwaited`): the rest is its context, the
  waiting the oversubscription finding holds among it, and fresh pages and
  cold caches the call does not meet alone (too_many_threads' tanh: 515 µs a
  call among 8 threads on 2 CPUs, 96 µs alone at 2; 24% of operator time,
  4.5% its own).
- copy_overhead: copies your code asks for (.contiguous(), .clone(), .to(),
  a reshape/flatten that must copy, an explicit .copy_(); copies.py names
  each copy's origin) >= 5% is `low` (a fifth of a hot operator's 10%
  threshold would hide the .contiguous() after a transpose that measured 11%
  at one line; at 5% a copy is already a visible slice of the profile and is
  usually one line to change), >= 15% `medium`, >= 30% `high`. Indexed
  assignment (out[i] = v) and kernels' internal copies are not counted: the
  evidence lists them apart (`not_counted_us`), and the copy_ row can still
  be a hot_operator with a suggestion for what the user wrote.
- memory_churn: allocations at >= 1 GiB/s are `low`,
  >= 2 GiB/s `medium`, >= 8 GiB/s `high`: the bytes the operator pass saw
  allocated over the time the uninstrumented pass took for the same steps
  (Report.real_span; the whole run without steps). The operator pass's own
  span carries the profiler's cost and the faults its heap adds:
  examples/contiguous_copies.py's 0.8 GiB took 0.22-0.35 s there (2.2-3.4
  GiB/s, medium or not from run to run) and 0.22-0.24 s uninstrumented.
  A run without steps also needs CHURN_MIN_BYTES (256 MiB) in all: over a
  whole run, a one-off allocation (loading data) makes a rate too. With
  steps (or measured calls) the window's whole steps are the evidence,
  however many it held: a total would make the verdict hang on the window's
  length (examples/attention.py allocates 100 MiB a step; its loop was found
  at step 6 or 8 of 10, so its window held 400 or 200 MiB, and the finding
  came and went).
  The recorded span (Report.recorded_span: with --iters above
  --profile-iters only the last iterations are recorded, and allocations
  are counted over those alone) must hold the allocations: no rate is reported over a span shorter
  than CHURN_MIN_SPAN_S (10 ms, the resolution the report prints seconds
  at) or shorter than half the recorded operators' own time: such a span is
  not the time the allocations happened in (a quantised model's steps once
  read as 0.5 GiB in 0.00 s). The evidence adds the turnover (bytes
  allocated over the most bytes alive at once); it is not a threshold, since
  every training loop turns its activations over once per step. Its time at
  stake (`_churn_stake`) is what the churn measurably costs, the fresh pages
  faulted in per step at the doctor's 1 µs a fault, where the run has steps
  (when the doctor's page_faults check warned, its finding's stake, the same
  time: what its allocator trials measured, or its estimate judged on their
  intervals; that stake then decides the churn's severity, not the
  allocation rate; 0 when the trials ruled a gain out); without steps the
  run's faults over its wall time (an upper bound); the allocating
  operators' whole time only where no faults were counted. The doctor's
  page_faults finding (an allocator trial's win, or the check's estimate
  where the trials could not tell) makes the churn a finding under the
  rate's first line too, where the allocations a step can hold the pages
  those faults bring in (`_faults_covered`: the rate is the proxy, the
  faults the measurement; examples/transpose_copy.py allocated 48 MiB a
  step at 0.88-0.93 GiB/s, at the 1 GiB/s line within the noise, with
  16-25 MiB faulted in and jemalloc winning 1.09-1.12x: by its rate the
  churn came and went, and the doctor's finding stood at no line when it
  went; on an EPYC its trials won in four runs of five and could not tell
  in the fifth, where the same fresh pages at the same line were named
  page_faults at no line, not memory_churn: one cause, two names).
- autograd_in_inference: the window ran no backward (no backward operator
  in the profile, steps not ended by optimizer.step()) while at least half
  of its torch calls (and >= AUTOGRAD_MIN_CALLS) ran with grad mode on and an
  input that requires grad, so each built an autograd node and kept its
  inputs alive for nothing: `medium`, at the line with most such calls. Its
  time at stake is not estimated by this rule (the bookkeeping is part of
  the framework overhead); merged with a python_overhead finding at the same
  line it is named first and takes that line's stake, an upper bound.
Suggestions come from suggestions.py (one place for every operator class).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

from diagnose.doctor.workload import FAULT_US, KEEP_PAGES, fault_pct, fault_share, judged_faults
from diagnose.findings import copies
from diagnose.findings import doctor as doctor_findings
from diagnose.findings.stake import UPPER_BOUND, operator_stake
from diagnose.findings.suggestions import (
    ACTIVATION_CLASSES,
    AUTOCAST_INFERENCE_TEXT,
    COPY_LABEL,
    COPY_TEXT,
    is_compute,
    op_class,
    suggestion_for,
    weight_init_row,
)
from diagnose.findings.threads import oversubscribed
from diagnose.report import borderline
from diagnose.report.model import Finding, MicrobenchRow, OperatorRow, Report, Stake
from diagnose.report.rows import TIE_SHARE, tie_share, tied_first, undisturbed

# an ATen (or other library's) operator, or a kernel torch.compile generated (named after what it fuses)
KERNEL_NAME = re.compile(r"^(\w+::\w+|(graph_\d+_)?(cpp|triton)_\w+|\w+_fused_\w+)$")
NOT_KERNELS = {"c10d", "gloo", "profiler", "autograd", "torch", "Optimizer"}  # the distributed view covers collectives
HOT_MIN_PCT = 10.0
HOT_HIGH_PCT = 30.0
COPY_LEVELS = ((30.0, "high"), (15.0, "medium"), (5.0, "low"))
MIB = 1 << 20
GIB = 1 << 30
CHURN_MIN_BYTES = 256 * MIB
CHURN_RATES = ((8 * GIB, "high"), (2 * GIB, "medium"), (1 * GIB, "low"))
CHURN_MIN_SPAN_S = 0.01
PAGE_BYTES = 4096  # a minor fault brings in one base page (x86-64, aarch64's default)
# the share of a step's faulted pages that may lie outside torch's allocations while these still hold them
# (_faults_covered): the interpreter's own pages, and a count that differs from process to process by up to 2x
FAULTS_OUTSIDE = 0.1
CHURN_SPAN_MIN_OPERATOR_SHARE = 0.5
AUTOGRAD_MIN_SHARE = 0.5
AUTOGRAD_MIN_CALLS = 20


def _shape_text(row: OperatorRow) -> str:
    """' on [64, 512], [512]' (' on scalars'), or nothing for a row that recorded no inputs (a kernel torch.compile
    generated)."""
    if not row.input_shapes:
        return ""
    return " on " + (", ".join(str(s) for s in row.shapes_shown() if s != []) or "scalars")


def _overhead(report: Report) -> float | None:
    ratio = report.run.overhead_ratio
    return round(ratio, 3) if ratio else None


def hot_operator(report: Report) -> list[Finding]:
    out = []
    rel = borderline.noise(report)
    for i, row in enumerate(report.operators[:5]):
        if borderline.interval(row.self_pct, rel)[1] < HOT_MIN_PCT:
            break
        if not KERNEL_NAME.match(row.name) or row.name.split("::")[0] in NOT_KERNELS:
            continue  # torch.compile's runtime, collectives (time waiting for other ranks): other findings' story
        compute = is_compute(row.name)
        if compute and i > 0:
            continue  # a healthy model's compute: one low finding for the top row is enough
        activation = op_class(row.name) in ACTIVATION_CLASSES
        # a kernel's own copy (addmm writing its broadcast bias) is that kernel's cost: named, never above low
        internal = copies.internal(report, row.name, row.input_shapes)
        # weight initialisation recorded with the set-up (a run without a window): set-up's cost, not the loop's
        internal = internal or weight_init_row(report, row)
        border = None
        # while the threads wait for CPUs, the share it keeps at the thread count that ends the wait
        alone = unwaited(report, row)
        keeps = kept(row, alone) if alone is not None else 1.0
        share = row.self_pct * keeps
        if compute or internal:
            severity = "low"
        else:  # an activation is never high: an elementwise pass over the step's activations is not the problem
            levels = ((HOT_HIGH_PCT, "medium"), (HOT_MIN_PCT, "low")) if activation else \
                ((HOT_HIGH_PCT, "high"), (HOT_MIN_PCT, "medium"))
            severity, border = borderline.grade(share, rel, levels, "share of operator CPU time")
            if severity is None:
                continue
        where = f" at {row.source}" if row.source else ""
        waits = ""
        if alone is not None:
            waits = (f"; alone at {alone.threads} threads a call takes {alone.median_us:.0f} µs of the "
                     f"{row.self_cpu_us / row.calls:.0f} µs it took in the run: the rest is its context, its threads "
                     "waiting for CPUs (oversubscription) among it")
        out.append(Finding(
            kind="hot_operator",
            severity=severity,
            title=f"{row.name}{_shape_text(row)} takes {row.self_pct:.0f}% of operator CPU time{where}{waits}",
            op=row.name,
            location=row.source,
            evidence={
                "share_pct": row.self_pct,
                "self_cpu_us": row.self_cpu_us,
                "calls": row.calls,
                "us_per_call": round(row.self_cpu_us / row.calls, 3) if row.calls else None,
                "input_shapes": row.input_shapes,
                "dtypes": row.dtypes,
                **({"list_inputs": [dataclasses.asdict(li) for li in row.list_inputs]} if row.list_inputs else {}),
                "gflops_per_s": row.gflops_per_s,
                "sources": [{"location": s.location, "self_cpu_us": s.self_cpu_us, "calls": s.calls}
                            for s in row.sources[:3]],
                "threshold_pct": HOT_MIN_PCT if compute else (HOT_HIGH_PCT if severity == "high" else HOT_MIN_PCT),
                "compute_kernel": compute,
                "instrumentation_overhead": _overhead(report),
                **({"alone": {"threads": alone.threads, "us_per_call": alone.median_us,
                              "kept_pct": round(100 * keeps, 1), "share_kept_pct": round(share, 2)}}
                   if alone is not None else {}),
            },
            suggestion=suggestion_for(report, row.name, row.input_shapes, row.dtypes, row.source),
            layer="operators",
            stake=_unwaited_stake(report, share, alone),
            observation=compute or internal or (activation and severity == "low"),
            borderline=border,
        ))
    return out


def fold_casts(found: list[Finding], report: Report) -> list[Finding]:
    """One cause, one finding. A finding about a row of autocast's casts (its operator and `input_shapes`:
    copies.row_kind) is placed where autocast is entered, where its fix goes (evidence `copy` "autocast"), and
    a confirmed one becomes a piece of the copy_overhead finding there, which holds the casts' time summed over
    their shapes: a Llama under bfloat16 autocast cast lm_head's [8000, 384] and the MLP's [1024, 384] weights
    every token, two hot_operator findings of 12% and 11% of operator time where the one cause took 20%; and
    examples/autocast_weights.py's cast, slowed 5x by its context (low_efficiency), led the model call's line
    in some runs and the GEMM's sequential_operator in others. A doubted one stays apart (not confirmed)."""
    entry = copies.autocast_entry(report)
    entered = entry.source if entry else None
    held = {f.location: f for f in found if f.kind == "copy_overhead" and f.location}
    out = []
    for f in found:
        shapes = f.evidence.get("input_shapes")
        if f.kind != "copy_overhead" and f.op in copies.CHAIN and shapes is not None \
                and copies.row_kind(report, f.op, shapes)[0] == "autocast":
            f.location = entered or f.location
            f.evidence["copy"] = "autocast"
            copy = held.get(f.location)
            if copy is not None and not f.doubts:
                copy.also.append(f)
                continue
        out.append(f)
    return out


def unwaited(report: Report, row: OperatorRow) -> MicrobenchRow | None:
    """While the threads wait for CPUs (threads.oversubscribed), the micro-benchmark of this (operator, shapes)
    alone at the thread count that ends the wait: the run's intra-op count, at most the usable CPUs. None when
    the threads do not wait, or that count was not measured, or the call was no slower in the operator pass."""
    if not row.calls or oversubscribed(report) is None:
        return None
    machine = report.machine
    usable = machine.usable_cpus or 0
    threads = min(machine.intra_op_threads or usable, usable)
    alone = next((m for m in report.microbenchmarks if m.op == row.name and m.input_shapes == row.input_shapes
                  and m.dtypes == row.dtypes and m.threads == threads and m.median_us), None)
    return alone if alone is not None and kept(row, alone) < 1.0 else None


def _unwaited_stake(report: Report, share: float, alone: MicrobenchRow | None) -> Stake:
    stake = operator_stake(report, share)
    if alone is None:
        return stake
    return dataclasses.replace(stake, basis=f"{stake.basis}, of the share the calls keep alone at {alone.threads} "
                                            "threads (the micro-benchmark; the rest is their context, the "
                                            "waiting the oversubscription finding holds among it)")


def kept(row: OperatorRow, alone: MicrobenchRow) -> float:
    """The part of the operator pass's time per call that the call takes alone (the rest is its context), at most 1."""
    return min(1.0, alone.median_us / (row.self_cpu_us / row.calls))


def copy_overhead(report: Report) -> list[Finding]:
    total = sum(r.self_cpu_us for r in report.operators)
    if total <= 0:
        return []
    origins = copies.by_origin(report)
    layout = {k: us for k, us in origins.items() if k[0] in copies.LAYOUT}
    copy_us = sum(layout.values())
    pct = 100.0 * copy_us / total
    severity, border = borderline.grade(pct, borderline.noise(report), COPY_LEVELS,
                                        "copies' share of operator CPU time")
    if severity is None:
        return []
    by_kind: dict[str, float] = defaultdict(float)
    by_place: dict[tuple[str, str | None], float] = defaultdict(float)
    entry = copies.autocast_entry(report)
    entered = entry.source if entry else None  # autocast's casts are ended where autocast is entered
    for (kind, loc, _), us in layout.items():
        by_kind[kind] += us
        by_place[(kind, entered if kind == "autocast" and entered else loc)] += us
    # the most copy time, a place tied with it taken in source order (report/rows.py tied_first): within the
    # biggest copy row's per-call noise, its calls at each place, or doing the same undisturbed copy work
    ranked = sorted(by_place, key=lambda k: (k[1] is None, -by_place[k]))
    work = _copy_work(report)
    kind, location = tied_first(ranked, by_place.__getitem__, lambda k: k[1], _copy_noise(report),
                                lambda k: work.get(k[1]))[0]
    not_counted: dict[str, float] = defaultdict(float)
    for (other, _, via), us in origins.items():
        if other not in copies.LAYOUT:
            not_counted[other if other != "internal" else f"internal to {via}"] += us
    where = f" at {location}" if location else ""
    return [Finding(
        kind="copy_overhead",
        severity=severity,
        title=(f"Copies your code asks for take {pct:.0f}% of operator CPU time, most of it "
               f"{COPY_LABEL[kind]}{where} ({100.0 * by_place[(kind, location)] / total:.0f}%)"),
        op="aten::copy_",
        location=location,
        evidence={
            "share_pct": round(pct, 3),
            "copy_self_cpu_us": round(copy_us, 3),
            "threshold_pct": next(limit for limit, sev in COPY_LEVELS if sev == severity),
            "copy": kind,
            "by_kind_us": {k: round(v, 3) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
            "top_copies": [{"copy": k, "location": loc, "self_cpu_us": round(us, 3),
                            "share_pct": round(100.0 * us / total, 2)}
                           for (k, loc), us in sorted(by_place.items(), key=lambda kv: -kv[1])[:5]],
            "not_counted_us": {k: round(v, 3) for k, v in sorted(not_counted.items(), key=lambda kv: -kv[1])[:5]},
            "instrumentation_overhead": _overhead(report),
            **({"autocast_entered_at": entered} if entered and "autocast" in by_kind else {}),
        },
        suggestion=COPY_TEXT[kind] + (f" {AUTOCAST_INFERENCE_TEXT}" if kind == "autocast" and entry
                                      and entry.inference_mode else ""),
        layer="operators",
        stake=operator_stake(report, pct),
        borderline=border,
    )]


def _copy_work(report: Report) -> dict[str | None, float]:
    """Each place's undisturbed copy work (report/rows.py undisturbed), summed over the copy rows; a place
    where one row's fastest call is unknown is left out."""
    work: dict[str | None, float] = defaultdict(float)
    unknown: set[str | None] = set()
    for row in report.operators:
        if row.name in copies.COPY_BODIES:
            for s in row.sources:
                w = undisturbed(s)
                if w is None:
                    unknown.add(s.location)
                else:
                    work[s.location] += w
    return {loc: w for loc, w in work.items() if loc not in unknown}


def _copy_noise(report: Report):
    """tie_share for a copy place: the spread of the biggest copy row's calls, its calls at that place."""
    rows = [r for r in report.operators if r.name in copies.COPY_BODIES and r.calls]
    if not rows:
        return lambda place: TIE_SHARE
    row = max(rows, key=lambda r: r.self_cpu_us)
    calls = {s.location: s.calls for s in row.sources}
    return lambda place: tie_share(row.min_self_us, row.max_self_us, row.self_cpu_us / row.calls,
                                   calls.get(place[1], row.calls))


def memory_churn(report: Report) -> list[Finding]:
    if report.operator_summary is None:
        return []
    mem = report.operator_summary.memory
    allocated = int(mem.allocated_bytes or 0)
    recorded, _ = report.recorded_span()
    if not recorded or (allocated < CHURN_MIN_BYTES and not report.profiled_steps()):
        return []  # without steps, too little for a rate (module docstring); with them, the steps are the evidence
    operators_s = (report.operator_summary.total_self_cpu_us or 0.0) * 1e-6
    if recorded < max(CHURN_MIN_SPAN_S, CHURN_SPAN_MIN_OPERATOR_SHARE * operators_s):
        return []  # a span that did not hold the recorded allocations: no rate (module docstring)
    wall, span_basis = report.real_span()  # the same work without the profiler (module docstring)
    if not wall or wall < CHURN_MIN_SPAN_S:
        return []
    rate = allocated / wall
    peak = int(mem.peak_live_bytes or 0)
    turnover = allocated / peak if peak else None
    severity, border = borderline.grade(rate / GIB, borderline.noise(report, "time"),
                                        [(limit / GIB, sev) for limit, sev in CHURN_RATES], "allocation rate",
                                        unit=" GiB/s")
    at_stake, decides, faults = _churn_stake(report)
    if severity is None and not (decides and _faults_covered(report)):  # deciding, the doctor's finding is there
        return []
    if decides:  # the doctor's page_faults finding's time: its stake decides, as it does that finding's (stake.settle),
        severity, border = faults.severity, None  # and its rule's severity (low: its trials were deferred)
    by_location: dict[str | None, int] = defaultdict(int)
    for row in report.operators:
        if row.cpu_memory_bytes > 0:  # a row's calls share its shapes, so its bytes go by calls, not by time
            total = sum(s.calls for s in row.sources) or 1
            share = {s.location: (s.calls / total) for s in row.sources} or {row.source: 1.0}
            for loc, frac in share.items():
                by_location[loc] += int(row.cpu_memory_bytes * frac)
    ranked = sorted((k for k in by_location if k is not None), key=lambda k: -by_location[k])
    # lines allocating alike (contiguous_copies' two copies and its product, 256 MiB each) in source order
    location = tied_first(ranked, by_location.__getitem__, lambda k: k)[0] if ranked else None
    top_ops = sorted((r for r in report.operators if r.cpu_memory_bytes > 0), key=lambda r: -r.cpu_memory_bytes)[:3]
    where = f", most of it at {location}" if location else ""
    reuse = ("Reuse buffers instead of allocating per step: out= arguments and in-place operators, tensors created "
             "once outside the loop")
    graphs = report.autograd
    if graphs is None or (graphs.recording_calls and not graphs.backward_ops):
        # autograd built graphs that no backward used (or the pass did not say): its saved tensors are churn
        # inference_mode would end. Not for a loop already under it, nor for training
        reuse += ", torch.inference_mode() for inference so autograd keeps nothing alive"
    best = report.doctor.best_win("page_faults") if faults is not None and report.doctor else None
    measured_fix = f"; measured {best.speedup:.2f}x faster per step with {best.name}" if best else ""
    if best is not None:  # the doctor's page_faults finding holds this time: its measured change comes first
        suggestion = (f"{best.change}  (measured {best.speedup:.2f}x faster per step: the allocator keeps freed "
                      f"pages for reuse). Or, in your code: {reuse[:1].lower()}{reuse[1:]}.")
    elif faults is not None:  # the check's advice (an allocator that keeps freed pages) first, then the code's reuse
        suggestion = f"{KEEP_PAGES}. Or, in your code: {reuse[:1].lower()}{reuse[1:]}."
    else:
        suggestion = reuse + "; if the allocator itself shows up, try jemalloc or tcmalloc via LD_PRELOAD."
    return [Finding(
        kind="memory_churn",
        severity=severity,
        title=(f"{allocated / GIB:.1f} GiB allocated in {wall:.2f} s ({rate / GIB:.1f} GiB/s"
               + (f", {turnover:.0f}x the {peak / MIB:.0f} MiB of it alive at once" if turnover else "")
               + f"){where}{measured_fix}"),
        op=top_ops[0].name if top_ops else None,
        location=location,
        evidence={
            "allocated_bytes": allocated,
            "bytes_by_line": {k: by_location[k] for k in ranked[:5]},
            "allocations": int(mem.allocations or 0),
            "bytes_per_s": round(rate),
            "span_s": round(wall, 4),
            "span_s_basis": span_basis,
            "threshold_bytes_per_s": next(limit for limit, sev in CHURN_RATES if sev == severity),
            "peak_live_bytes": peak or None,
            "turnover": round(turnover, 1) if turnover else None,
            "top_operators": [{"op": r.name, "input_shapes": r.input_shapes, "bytes": r.cpu_memory_bytes,
                               "source": r.source} for r in top_ops],
            "instrumentation_overhead": _overhead(report),
        },
        suggestion=suggestion,
        layer="operators",
        stake=at_stake,
        borderline=border,
        also=[faults] if faults is not None else [],  # stake.dedup puts the settled one there
    )]


def _faults_covered(report: Report) -> bool:
    """Under the rate's first line, the churn is still the cause of the doctor's page_faults finding (module
    docstring), which it takes (_churn_stake), when the operator pass's allocations a step can hold the pages
    those faults bring in a step (PAGE_BYTES a fault), to within FAULTS_OUTSIDE: a process's faults include
    pages outside torch's allocations (the interpreter's own), and the count moves by far more from one process
    to the next. The faults are the ones that finding holds (workload.judged_faults: the median over the processes
    the trials ran, where they ran). examples/growing_cache.py allocates 2.0 MiB (512 pages) a step, and its
    processes fault in 265 or 512.07-512.5 pages a step; compared with no margin, on one process or on the median,
    the same page_faults finding stood alone at no line in one run of five, by a fraction of a page."""
    faults = judged_faults(report)
    steps = report.profiled_steps()  # what the operator pass's allocations were counted over
    if faults is None or not steps:
        return False
    allocated = (report.operator_summary.memory.allocated_bytes or 0) / steps
    return allocated >= (1.0 - FAULTS_OUTSIDE) * faults * PAGE_BYTES


def _churn_stake(report: Report) -> tuple[Stake, bool, Finding | None]:
    """What the churn costs, whether that stake decides its severity (rather than the allocation rate, its
    proxy), and the doctor's page_faults finding when the churn takes its time (its suggestion leads the churn's,
    and stake.dedup merges it under the churn: one cause, one finding). Where the uninstrumented pass counted
    minor page faults over steps (or measured calls): the fresh pages the allocations fault in, at
    doctor/workload.FAULT_US a fault, over the median step, the doctor's page_faults estimate (a lower bound:
    malloc's own calls are not counted). When the doctor's page_faults check warned about those faults, or an
    allocator trial won (the faults' cost measured, whatever the estimate read), its finding holds the same time,
    with its fix: the churn takes that finding's stake, which then decides its
    severity too. That is the best winning allocator trial's
    1 - 1/speedup with its interval; or, where the trials could not tell or none ran, the check's estimate,
    judged on the trials' intervals (stake.unsure_stake). Where they ruled a gain out (no finding), 0,
    measured (so at most low, as a thread finding whose trial gained nothing). One stake, one severity for the
    one time: examples/conv_nchw.py allocated 1.9-2.1 GiB/s at the 2 GiB/s line, so by its rate the churn was
    low in two of five runs whose trials measured a 13-32% saving; resnet_train's kept its rate's medium
    beside a page_faults finding that was low on its trials' intervals. By the estimate alone,
    examples/autocast_weights.py's faults came to 4-19% of its step in five runs (8-463 faults a step: where
    glibc's heap lands differs from run to run). Without steps, the run's faults over its wall time (an upper
    bound: setup's first touch of its data counts too). Without a fault count, no stake, and the rule's
    severity stands: the allocating operators' whole time, the bound this gave before, is most of the run,
    since nearly every operator allocates its output (an MLP's activations at 1.2 GiB/s read as ~50% at stake
    on a machine with AMX, while faults put them at 19%; a BERT recording without fault counts read as 66%,
    which lifted its low churn to medium)."""
    faults, wall = report.run.minor_faults, report.run.wall_s
    check = next((c for c in report.doctor.checks if c.name == "page_faults"), None) if report.doctor else None
    won = report.doctor.best_win("page_faults") if report.doctor else None
    # a trial that won measured the faults' cost whatever the check says once re-read over the trials' processes: at
    # 1 µs a fault (a lower bound) transpose_copy's 4,064 faults a step read 4.5-5.0% against the 5% line, "ok" in
    # two runs of four whose trials measured 1.05-1.11x; there the doctor's finding stood alone at no line
    if won is not None or (check is not None and check.status == "warn"):
        tried = [t for t in report.doctor.trials
                 if t.check == "page_faults" and t.verdict in ("win", "no gain", "slower")]
        # the doctor's finding exists where a trial won (its stake, the best win's), or where none ran or they could
        # not tell (the check's estimate, judged on their intervals)
        found = next((f for f in doctor_findings.environment(report) if f.kind == "page_faults"), None)
        if found is not None and won is not None:  # what keeping the freed pages won here
            return dataclasses.replace(found.stake, basis=(
                "measured: the fresh pages these allocations fault in, what the doctor's page_faults finding (the "
                "same time, with its launch line) measured keeping freed pages: " + found.stake.basis)), True, found
        if found is not None:  # the trials could not tell, or none ran: the doctor's finding's estimate
            return dataclasses.replace(found.stake, basis=(
                "the fresh pages these allocations fault in, the time the doctor's page_faults finding holds (not "
                "measured: " + found.stake.basis + ")")), found.stake.pct is not None, found
        if tried:  # measured: keeping freed pages (what the faults cost) gained nothing here
            return Stake(pct=0.0, basis=("measured: the fresh pages these allocations fault in cost nothing "
                                         "beyond the noise; the doctor's allocator trials on your steps ("
                                         + ", ".join(f"{t.name} {t.speedup:.2f}x" for t in tried if t.speedup)
                                         + ") gained nothing")), False, None
        return Stake(pct=None, basis="the fresh pages these allocations fault in: the doctor's allocator trials "
                                     "measured nothing (they failed or were skipped)"), False, None
    estimate = fault_share(report)
    if estimate is not None:
        unit, _, _, share = estimate
        return Stake(pct=round(min(share, 100.0), 2),
                     basis=(f"minor page faults per {unit} x {FAULT_US:g} µs over the median {unit} "
                            "(uninstrumented pass): the fresh pages the allocations fault in")), False, None
    if faults is not None and wall:  # no steps: the whole run's faults, setup's first touch of its data too
        return Stake(pct=round(min(fault_pct(faults, wall), 100.0), 2), upper_bound=True,
                     basis=(f"minor page faults x {FAULT_US:g} µs over the run's wall time "
                            f"(uninstrumented pass; {UPPER_BOUND}: without steps, setup's first touch "
                            "of its data is counted too)")), False, None
    return Stake(pct=None, basis="not measured: the run counted no page faults (/proc/self/stat unread), so what "
                                 "the fresh pages cost is not known"), False, None


def autograd_in_inference(report: Report) -> list[Finding]:
    a = report.autograd
    training = report.steps is not None and report.steps.detector == "optimizer"
    if a is None or a.backward_ops or training or not a.calls or not a.lines:
        return []
    share = a.recording_calls / a.calls
    if share < AUTOGRAD_MIN_SHARE or a.recording_calls < AUTOGRAD_MIN_CALLS:
        return []
    top = a.lines[0]
    return [Finding(
        kind="autograd_in_inference",
        severity="medium",
        title=(f"autograd records a graph in {share:.0%} of the torch calls ({a.recording_calls} of {a.calls}) "
               f"but no backward runs" + (f", most at {top.source}" if top.source else "")),
        op=None,
        location=top.source,
        evidence={
            "calls": a.calls, "recording_calls": a.recording_calls, "recording_share": round(share, 3),
            "backward_ops": a.backward_ops, "grad_mode_off_calls": a.grad_mode_off_calls,
            "lines": [{"source": l.source, "calls": l.calls} for l in a.lines[:5]],
            "threshold_share": AUTOGRAD_MIN_SHARE,
        },
        suggestion=("Run inference under torch.inference_mode() (or torch.no_grad()): wrap the loop, or decorate "
                    "the function that calls the model with @torch.inference_mode(). No autograd node is created, "
                    "no input is kept alive for a backward, and inference tensors skip version counting. Keep "
                    "grad mode only where a backward follows."),
        layer="operators",
        stake=Stake(pct=None, basis="not estimated: autograd's bookkeeping is part of the framework overhead"),
    )]
