"""Rules on the efficiency and counters layers: low_efficiency.

An operator's efficiency is its achieved rate as a share of the roof at its
arithmetic intensity (report.efficiency, diagnose/layers/efficiency). A hot
operator far below its roof is work the machine could do several times
faster at the same shapes.

Thresholds:
- only operators with >= HOT_SHARE_PCT (10%) of operator CPU time, and
  >= MIN_US_PER_CALL (20 µs) per call: below that the profiler's per-call
  cost and the kernel's fixed start-up dominate and the ratio is noise. A
  call micro-benchmarked alone under MIN_US_PER_CALL whose time in the
  model exceeds that by less than CONTEXT_MIN_US (the profiler's per-call
  cost with room) is that short too: the rest is per-call cost around a
  short kernel (python_overhead's story), not the kernel's.
  examples/pointwise_block.py's LayerNorm on [16, 128], 6.7 µs alone, took
  17-25 µs a call in the model (2.2-3.2% of the roof) and was judged in one
  run of five, the one over 20 µs (gallery, 2026-12-04). A call far longer
  in the model than alone (dataloader_contention's 3 µs log_softmax, 4.6 ms
  a call under oversubscription) is still judged. The
  share is judged on its interval from the run's noise, as hot_operator
  judges it (report/borderline.py): an operator whose interval reaches 10%
  is judged, and one whose interval straddles it is `low`, borderline on its
  share, whatever its efficiency. Compared as a point, examples/
  transpose_copy.py's copy at 9.3-10.7% of operator time and 7% of its roof
  was a medium finding in three runs of five and none in two (2026-11-28,
  gallery set L), where hot_operator called it low, borderline, in all five.
  A line still has an edge: the same runs' aten::var at 10.9-12.2% is judged
  in four and low, borderline, in the one at 10.9% (9.9-12.0%);
- efficiency < 10% of the roof is `high`, < 25% `medium`. Between 25% and
  100% is what real kernels reach at awkward shapes (a good fp32 GEMM gets
  60-90% of the probe's square-matrix peak, a streaming kernel 50-90% of
  copy bandwidth), so nothing is raised there;
- when the peaks were measured while other processes held the CPUs the roofs
  are low and efficiencies read high: the finding still fires below the
  thresholds, and the evidence says `peaks_contended`. That is no doubt on
  it: against the real, higher roofs the kernel is further below them still
  (in "3" reports it was doubted, model.PEAKS_CONTENDED_DOUBT);
- operators without a meaningful work model (random number generation,
  sorting, allocation, views: opkinds.no_verdict says which and why) get no
  verdict, even from a report written before the efficiency layer withheld it;
  nor does a copy a kernel makes of its own accord (addmm's broadcast bias,
  findings/copies.py's `internal`): it is that kernel's, not an operator the
  user's code calls.
- In the model vs alone: the operator pass times each call in its context
  (fresh outputs, cold caches, other threads, and the profiler's own heap
  fragmentation, which hands large temporaries fresh pages). When the
  operator was also micro-benchmarked alone at the run's thread count and
  its mean call in the model is >= CONTEXT_RATIO (2x) the alone median and
  at least CONTEXT_MIN_US (20 µs, the profiler's per-call cost with room)
  longer, the verdict rests on the alone time: if the kernel alone reaches
  25% of its roof, the finding is that the model's context slows it (cause
  `context`, with the page faults per step of both passes as evidence),
  not that the kernel is inefficient (when the threads layer found the CPUs
  oversubscribed, that is the likely context: the finding says so and claims
  no time at stake, which the oversubscription finding carries, so it ranks
  after it and is `low`: a symptom whose time another finding holds, which
  examples/ddp_train.py had at `medium` in the runs its share reached 10%
  and not in the others); likewise any kernel below its roof in an
  oversubscribed run that was not measured slow alone (cause
  `oversubscription`: its threads waited for CPUs, so its efficiency is not
  the kernel's), and one slow alone there is graded by its efficiency alone;
  if it is slow alone too, the usual
  verdict stands, graded by its time in the model (what the step pays), as
  below 2x, the alone efficiency beside it in the title and evidence. Graded
  by the model's time below 2x and by the alone time above it, one copy's
  verdict jumped from 6% to 17% of the roof (high to medium) between runs
  whose ratio landed at 1.98x and 2.6x; graded by the alone time at every
  ratio, float64 GEMMs at 18-23% in the model flipped around the 25% line
  alone (21-36%, small GEMMs alone are noisier).
- Faults the operator pass added: the profiler's own heap fragmentation can
  hand an operator's outputs fresh pages every call that the real run (the
  larger of the uninstrumented and call-graph passes' counts) reuses. The
  profiler records no faults per operator, so a verdict is doubted when
  the operator pass's extra faults per step, as many as the operator's bytes
  allow landed on each of its calls (the most it could carry), at this
  machine's probed cost of a fresh page, taken out of its time, leave a time
  at which the rule would not give it. Its time there is its mean call at the
  low end of the mean's 95% interval from its calls' spread
  (report/rows.mean_halfwidth): contiguous_copies' mul, 4.0-51 ms a call in
  one run (a 10.4 ms mean), kept a context verdict the faults explained in
  the four runs beside it. examples/quantized_linear.py's
  clamp_min on [64, 4096]: 56-78 µs a call in three runs, 146-154 µs in
  two whose operator pass faulted 287-404 times a step against 0.5-4
  uninstrumented (a fresh 1 MiB output each call, 0.6 µs a page here); 11
  µs alone. A count rule (2x as many, and 1000 more a step) missed those
  and doubted a 5%-of-roof verdict that no fault count could explain.
- Its output's fresh pages (the real run's faults, not only the operator
  pass's): an operator whose output is a fresh allocation each call
  (glibc mmaps one of 32 MiB and more) page-faults it in on first touch, and
  that time is in its own. Its real-run faults per step, as many as its
  outputs span landed on each call (the most it could carry), at this
  machine's probed cost of a fresh page, are taken out of its time; when the
  rule would not give the verdict at what is left, the kernel is not what is
  slow: the finding is `low`, an observation (`cause` `fresh_pages`), its
  time carried by memory_churn or the doctor's page_faults (one cause, one
  finding), and at its line the operator's hot_operator names the finding.
  examples/attention.py:28-29 (2-CPU AMD EPYC, 2026-12-03): the division's
  and softmax's 32 MiB outputs, 8192 pages at 0.9 µs, 7.4 ms of their
  7.8-14 ms a call; at 15-27% of the roof they were medium, low or absent by
  the run, and named the line in two runs of five.
- Time at stake: the operator's share of operator time on the wall-time
  scale (stake.operator_stake); a context finding's, the part of that share
  its context adds (1 - alone / in the model).
- Counters (report.counters, perf or VTune): CPI >= 1.0 over the run is
  `low`, >= 2.0 `medium` (0.25 is the best a 4-wide core does; docs/measurements.md);
  VTune spin + overhead time >= 20% of CPU time is `medium`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from diagnose.budget import page_costs
from diagnose.doctor.workload import pass_faults
from diagnose.findings import copies
from diagnose.findings.stake import UNKNOWN, operator_stake
from diagnose.findings.suggestions import MATMUL, matmul_dims, op_class, suggestion_for
from diagnose.findings.threads import oversubscribed
from diagnose.opkinds import no_verdict
from diagnose.report import borderline
from diagnose.report.model import Borderline, Finding, MicrobenchRow, Report, RooflineRow, Stake
from diagnose.report.rows import mean_halfwidth
from microbench.cases import torch_dtype_name

HOT_SHARE_PCT = 10.0
MIN_US_PER_CALL = 20.0
HIGH_BELOW_PCT = 10.0
MEDIUM_BELOW_PCT = 25.0
SKINNY_DIM = 32  # a matmul dimension below this leaves most of a GEMM kernel's register tile empty
CPI_LOW, CPI_MEDIUM = 1.0, 2.0
SPIN_MEDIUM_PCT = 20.0
CONTEXT_RATIO = 2.0
CONTEXT_MIN_US = 20.0
PAGE_BYTES = 4096


def _shape_text(report: Report, op: RooflineRow) -> str:
    """The shapes as the operator table shows them (a TensorList's tensors, OperatorRow.shapes_shown)."""
    row = next((r for r in report.operators if r.name == op.name and r.input_shapes == op.input_shapes), None)
    shapes = row.shapes_shown() if row else op.input_shapes or []
    return ", ".join(str(s).replace(" ", "") for s in shapes if s != []) or "scalars"


def _suggestion(report: Report, op: RooflineRow) -> str:
    name, usable = op.name, report.machine.usable_cpus
    parts = []
    if op.contiguous is False:
        parts.append("Its inputs are not contiguous, so the kernel strides through memory or copies first: "
                     "make them contiguous once, where they are produced (e.g. .contiguous() after a transpose "
                     "outside the loop, or keep the layout the next operator wants), not on every call.")
    dims = matmul_dims(name, op.input_shapes or []) if MATMUL.match(name) else None
    if dims and min(dims) < SKINNY_DIM:
        m, n, k = dims
        parts.append(f"A skinny matmul (M={m}, N={n}, K={k}): a dimension this small leaves most of the GEMM "
                     "kernel idle. Batch the work: stack the small matrices into one larger mm/bmm (more rows per "
                     "call, e.g. a bigger batch), or fold repeated calls into one.")
    threads, bound = op.threads, op.bound
    if usable and threads and threads < usable and bound == "compute":
        parts.append(f"It ran with {threads} intra-op threads of {usable} usable CPUs: torch.set_num_threads({usable}).")
    if bound == "memory":
        text = (f"It is memory-bound and moves {op.achieved_gb_per_s:.3g} GB/s of the "
                f"{op.roof_gb_per_s:.3g} GB/s this machine streams.")
        out_mib = sum(math.prod(s) for s in op.output_shapes or []) * 4 / (1 << 20)
        short = name.split("::")[-1]
        if op_class(name) == "softmax":
            text += " Softmax also pays for exp, counted here as one FLOP."
        elif out_mib >= 8 and not short.endswith("_"):
            text += (f" Each call writes a fresh {out_mib:.0f} MiB output, which the kernel page-faults in "
                     f"on first touch: write into a reused buffer (torch.{short}(..., out=buf)) or in place "
                     f"(x.{short}_(...)) where the input is not needed again.")
        parts.append(text)
    parts.append(suggestion_for(report, name, op.input_shapes, op.dtypes, op.source))
    parts.append("Check a fix with `microbench run` at this shape before and after.")
    return " ".join(parts)


def judged(report: Report, op: RooflineRow) -> bool:
    """A roofline row the efficiency verdicts judge (low_efficiency here, the healthy verdict's top kernels in
    findings/verdict.py): it has an efficiency, from calls of at least MIN_US_PER_CALL, of an operator with a
    work model (opkinds.no_verdict), and is not a kernel's own internal copy (copies.internal: that kernel's
    cost, judged with its row)."""
    return (op.efficiency_pct is not None and (op.us_per_call or 0.0) >= MIN_US_PER_CALL
            and not no_verdict(op.name) and not copies.internal(report, op.name, op.input_shapes))


def low_efficiency(report: Report) -> list[Finding]:
    eff = report.efficiency
    out = []
    rel, rel_time = borderline.noise(report), borderline.noise(report, "time")  # a share's, a call time's
    waited = oversubscribed(report)  # the share of runnable time threads waited for a CPU, when oversubscribed
    for op in eff.operators if eff else []:
        pct, share = op.efficiency_pct, float(op.share_pct or 0.0)
        # the hot-operator line against the share's interval, as hot_operator judges it (module docstring)
        hot, share_border = borderline.grade(share, rel, ((HOT_SHARE_PCT, "medium"),), "share of operator CPU time")
        if hot is None or not judged(report, op):
            continue
        alone = _alone(report, op)
        ratio, facts = 1.0, {}
        if alone is not None:
            ratio = op.us_per_call / alone
            facts = {"in_model_us_per_call": op.us_per_call, "alone_us_per_call": round(alone, 3),
                     "in_model_vs_alone": round(ratio, 2), "efficiency_pct_alone": round(pct * ratio, 3)}
            if _context_holds(op.us_per_call, alone) and pct * ratio >= MEDIUM_BELOW_PCT:
                out.append(_context_finding(report, op, facts, share, alone, share_border))
                continue
        if alone is not None and alone < MIN_US_PER_CALL and op.us_per_call - alone < CONTEXT_MIN_US:
            continue  # a short kernel: the rest of its time in the model is per-call cost around it (docstring)
        # slow alone too, or faster alone by less than the context rule's 2x: graded by its time in the model, what
        # the step pays, the same on both sides of 2x (module docstring); the alone figures are evidence
        # slow alone: a call long enough to judge by the roof (a 3 µs log_softmax reads 0.6% of it alone, its own
        # start-up) that still ran below the medium line
        slow_alone = alone is not None and alone >= MIN_US_PER_CALL and pct * ratio < MEDIUM_BELOW_PCT
        if waited is not None and not slow_alone:
            if _grade(pct, rel_time)[0] is not None:
                # its threads waited for CPUs, and nothing measured it slow without that: a symptom of the
                # oversubscription, whose finding holds the time (module docstring)
                out.append(_starved_finding(report, op, facts, share, waited, pct))
            continue
        # slow alone under oversubscription: graded by its efficiency alone, the kernel's own (its time in the model
        # is the waiting's too: a K=8 mm at 3-4% of the roof in the model, 19% alone, read high or medium by run)
        graded = pct * ratio if waited is not None else pct
        severity, border = _grade(graded, rel_time if waited is None else _alone_noise(report, op))
        if severity is None:
            continue
        if share_border is not None and severity != "low":  # hot only within its share's interval: low, borderline
            severity, border = "low", dataclasses.replace(share_border, would_be=severity)
        # the verdict at a time less the extra faults: the same rule, at the efficiency that time gives
        def holds(us: float) -> bool:  # the rule's verdict at `us` a call
            return us > 0 and _grade(pct * op.us_per_call / us, rel_time)[0] is not None

        fault_counts, fault_doubts = _fault_doubt(report, op, holds) \
            if waited is None else ({}, [])  # graded alone: the operator pass's faults are not in that time
        fresh = _fresh_output(report, op) if waited is None and not fault_doubts else None
        if fresh is not None and not holds(op.us_per_call - fresh[1]):  # its output's first touch, not the kernel
            out.append(_fresh_pages_finding(report, op, share, pct, *fresh))
            continue
        if op.roof_gflops_per_s is not None:
            rate = f"{op.achieved_gflops_per_s:.3g} of {op.roof_gflops_per_s:.3g} GFLOP/s"
        else:
            rate = f"{op.achieved_gb_per_s:.3g} of {op.roof_gb_per_s:.3g} GB/s"
        if ratio > 1.0:
            rate += f"; {pct * ratio:.3g}% alone"
        where = f" at {op.source}" if op.source else ""
        out.append(Finding(
            kind="low_efficiency",
            severity=severity,
            title=(f"{op.name} on {_shape_text(report, op)} runs at {pct:.3g}% of this "
                   f"machine's roof ({rate}, {op.bound}-bound){where}"
                   + (f", graded by its time alone: its threads waited {100 * waited:.0f}% of their runnable time "
                      "for a CPU" if waited is not None else "")),
            op=op.name,
            location=op.source,
            evidence={
                "efficiency_pct": pct,
                "achieved_gflops_per_s": op.achieved_gflops_per_s,
                "roof_gflops_per_s": op.roof_gflops_per_s,
                "achieved_gb_per_s": op.achieved_gb_per_s,
                "roof_gb_per_s": op.roof_gb_per_s,
                "intensity_flop_per_byte": op.intensity_flop_per_byte,
                "bound": op.bound,
                "share_pct": share,
                "us_per_call": op.us_per_call,
                "threads": op.threads,
                "input_shapes": op.input_shapes,
                "contiguous": op.contiguous,
                "flops_source": op.flops_source,
                "threshold_pct": HIGH_BELOW_PCT if severity == "high" else MEDIUM_BELOW_PCT,
                **({"graded_by": "alone", "runqueue_wait_share": waited} if waited is not None else {}),
                "peaks_contended": bool(eff.peaks.contended),
                "instrumentation_overhead": eff.instrumentation_overhead,
                **(facts if ratio > 1.0 else {}),
                **fault_counts,
            },
            suggestion=_suggestion(report, op),
            layer="efficiency",
            stake=operator_stake(report, share),
            doubts=fault_doubts,  # contended peaks make it read higher: a reading below the thresholds holds
            borderline=border,
        ))
    out.extend(_counter_findings(report))
    return out


def _starved_finding(report: Report, op: RooflineRow, facts: dict[str, Any], share: float, waited: float,
                     pct: float) -> Finding:
    """A kernel below its roof in a run whose threads waited for CPUs, and not measured slow alone: `low`, its time
    the oversubscription finding's (examples/dataloader_contention.py's GEMMs read 0.02-4% of the roof beside two
    busy DataLoader workers, high, medium or absent from run to run, under an oversubscription that was high in
    every run)."""
    where = f" at {op.source}" if op.source else ""
    return Finding(
        kind="low_efficiency", severity="low", layer="efficiency",
        title=(f"{op.name} on {_shape_text(report, op)} runs at {pct:.3g}% of this machine's roof while its threads "
               f"waited {100 * waited:.0f}% of their runnable time for a CPU (oversubscription){where}"),
        op=op.name, location=op.source,
        evidence={"cause": "oversubscription", "efficiency_pct": pct, "share_pct": share, "bound": op.bound,
                  "us_per_call": op.us_per_call, "threads": op.threads, "input_shapes": op.input_shapes,
                  "runqueue_wait_share": waited, "threshold_pct": MEDIUM_BELOW_PCT, **facts},
        suggestion=("Its threads waited for CPUs other threads held, so this efficiency is not the kernel's: fix the "
                    "oversubscription first (see Threads), then measure again. " + _suggestion(report, op)),
        stake=Stake(pct=None, basis="the time its threads waited for a CPU: the oversubscription finding carries it"),
    )


def _grade(pct: float, rel: float) -> tuple[str | None, Borderline | None]:
    """The efficiency verdict at `pct`% of the roof, judged against its interval from the run's noise `rel`."""
    return borderline.grade(pct, rel, ((HIGH_BELOW_PCT, "high"), (MEDIUM_BELOW_PCT, "medium")),
                            "efficiency (share of this machine's roof)", lower_is_worse=True)


def _alone_row(report: Report, op: RooflineRow) -> MicrobenchRow | None:
    """The operator's micro-benchmark alone at its shapes and the run's thread count, if measured."""
    return next((r for r in report.microbenchmarks if r.op == op.name and r.input_shapes == op.input_shapes
                 and r.median_us and r.threads == op.threads), None)


def _alone(report: Report, op: RooflineRow) -> float | None:
    """The operator's median µs per call micro-benchmarked alone at the run's thread count, if measured."""
    row = _alone_row(report, op)
    return float(row.median_us) if row else None


def _alone_noise(report: Report, op: RooflineRow) -> float:
    """The relative noise of the alone measurement (its IQR over its median), at least borderline.floor: the
    run's own step spread is not the micro-benchmark's (an oversubscribed run's steps spread far wider)."""
    row = _alone_row(report, op)
    spread = (row.iqr_us or 0.0) / row.median_us if row else 0.0
    return max(borderline.floor(report, "time"), spread)


def _fault_doubt(report: Report, op: RooflineRow, holds: Callable[[float], bool]) -> tuple[dict[str, Any], list[str]]:
    """A doubt on a verdict the faults the operator pass took beyond the real run's could account for. Those extra
    faults per step, as many as the operator's bytes allow landed on each of its calls (the most it could carry:
    the profiler records no faults per operator), at this machine's probed cost of a fresh page, are taken out of
    its time in the model; `holds(µs per call)` says whether the rule still gives the verdict at what is left.
    (The fault counts for the evidence, the doubt), both empty without one. The real run's count is the larger of
    the uninstrumented and call-graph passes' (doctor/workload.pass_faults; a script without steps: the whole run's)."""
    counts = pass_faults(report)
    if counts is None or not op.calls or not op.us_per_call:
        return {}, []
    plain, instrumented, steps = counts
    unit = "a step" if report.run.iterations else "in the run"
    pages = (instrumented - plain) / (op.calls / steps)
    if op.bytes:
        pages = min(pages, op.bytes / PAGE_BYTES)
    fault_us = page_costs(report)[0]
    extra_us = pages * fault_us
    if extra_us <= 0:
        return {}, []
    # the mean call at the low end of its own 95% interval, from its calls' spread (the verdict's time is a mean)
    row = next((r for r in report.operators if r.name == op.name and r.input_shapes == op.input_shapes), None)
    rel = mean_halfwidth(row.min_self_us, row.max_self_us, op.us_per_call, op.calls) if row else 0.0
    low_us = op.us_per_call * (1 - rel)
    if holds(low_us - extra_us):
        return {}, []
    within = f"; {low_us:.0f} µs at the low end of its mean, from its calls' spread" if rel else ""
    return ({"minor_faults_per_step": round(plain), "minor_faults_per_step_operator_pass": round(instrumented)},
            [f"the operator pass page-faulted {instrumented:.0f} times {unit} against {plain:.0f} in the real run: "
             f"up to {pages:.0f} of those fresh pages a call at {fault_us:.2g} µs each ({extra_us:.0f} of its "
             f"{op.us_per_call:.0f} µs{within}) are faults the real run does not have, and without them the rule "
             "would not give this verdict"])


def _output_pages(op: RooflineRow) -> float | None:
    """The pages a call's outputs span: their elements (the work estimate's output shapes) at the element size of
    its first tensor input's dtype (a float's 32 bits: 4 bytes); None without both."""
    dtype = next((torch_dtype_name(d) for shape, d in zip(op.input_shapes or [], op.dtypes or [])
                  if isinstance(shape, list) and shape and torch_dtype_name(d)), None)
    if not op.output_shapes or dtype is None:
        return None
    size = 1 if dtype == "bool" else int("".join(c for c in dtype if c.isdigit()) or 0) // 8
    return sum(math.prod(s) for s in op.output_shapes) * size / PAGE_BYTES if size else None


def _fresh_output(report: Report, op: RooflineRow) -> tuple[float, float] | None:
    """(fresh pages a call's outputs fault in, at most; the µs they cost it) in the real run: its faults per step
    (doctor/workload.pass_faults), as many as the operator's outputs span landed on each of its calls (the most it
    could carry: the profiler records no faults per operator), at this machine's probed cost of a fresh page.
    None without the counts, or when none land on it."""
    counts, out_pages = pass_faults(report), _output_pages(op)
    if counts is None or out_pages is None or not op.calls or not op.us_per_call:
        return None
    plain, _, steps = counts
    pages = min(plain / (op.calls / steps), out_pages)
    return (pages, pages * page_costs(report)[0]) if pages >= 1 else None


def _fresh_pages_finding(report: Report, op: RooflineRow, share: float, pct: float, pages: float,
                         fault_us: float) -> Finding:
    """A kernel below its roof whose output's fresh pages account for the verdict (module docstring): `low`, its
    time the fresh pages', which memory_churn (or the doctor's page_faults) carries."""
    left = op.us_per_call - fault_us
    without = pct * op.us_per_call / left if left > 0 else None
    where = f" at {op.source}" if op.source else ""
    # the pages' cost is an upper bound ("up to"): past the roof, the kernel would run at it
    reach = "" if without is None else (f"; without them it would reach up to {without:.3g}% of the roof"
                                         if without < 100 else "; without them it would run at its roof")
    return Finding(
        kind="low_efficiency", severity="low", layer="efficiency",
        title=(f"{op.name} on {_shape_text(report, op)} runs at {pct:.3g}% of this machine's roof, and its output's "
               f"fresh pages account for that: up to {pages:.0f} pages a call at {fault_us / pages:.2g} µs each "
               f"({fault_us:.0f} of its {op.us_per_call:.0f} µs){reach}{where}"),
        op=op.name, location=op.source,
        evidence={"cause": "fresh_pages", "efficiency_pct": pct, "share_pct": share, "bound": op.bound,
                  "us_per_call": op.us_per_call, "threads": op.threads, "input_shapes": op.input_shapes,
                  "fresh_pages_per_call": round(pages), "fresh_pages_us_per_call": round(fault_us, 1),
                  "efficiency_pct_without_fresh_pages": round(without, 3) if without is not None else None,
                  "threshold_pct": MEDIUM_BELOW_PCT},
        suggestion=(f"The kernel is not what is slow: each call writes a fresh output that it page-faults in on first "
                    f"touch (see the memory_churn or page_faults finding). Write into a reused buffer (out=) or in "
                    "place where the input is not needed again. " + suggestion_for(report, op.name, op.input_shapes,
                                                                                   op.dtypes, op.source)).strip(),
        stake=Stake(pct=None, basis="its output's fresh pages: the memory_churn or page_faults finding carries that "
                                    "time"),
        observation=True,  # the kernel is healthy: where the time goes, not what to fix at this line
    )


def _context_holds(us_per_call: float, alone: float) -> bool:
    """The context rule: >= CONTEXT_RATIO times the alone time a call, and >= CONTEXT_MIN_US more."""
    return us_per_call >= CONTEXT_RATIO * alone and us_per_call - alone >= CONTEXT_MIN_US


def _alone_reach(op: RooflineRow, pct: float) -> str:
    """Where the operator alone reaches against its roof, in words: above 100% only from the caches (a
    cache-resident row's data stay there when it runs alone; quantized_linear's clamp_min read "465%")."""
    if pct <= 100.0:
        return f"where it reaches {pct:.3g}% of this machine's roof"
    cached = " (its data stay in the caches when it runs alone)" if op.cache_resident else ""
    return f"where it runs {pct / 100:.2g}x faster than this machine's roof{cached}"


def _context_finding(report: Report, op: RooflineRow, context: dict[str, Any], share: float,
                     alone: float, share_border: Borderline | None = None) -> Finding:
    plain, instrumented = report.faults_per_step()
    ratio = context["in_model_vs_alone"]
    faults = ""
    if plain is not None:
        faults = f"; {plain:.0f} minor page faults a step uninstrumented"
        if instrumented is not None:
            faults += f", {instrumented:.0f} in the operator pass"
    where = f" at {op.source}" if op.source else ""
    waited = oversubscribed(report)
    if waited is None:
        stake = operator_stake(report, share * (1 - 1 / ratio))
        contended, first = "", ""
    else:  # a symptom of the contention: the oversubscription finding holds that time (one time, one finding)
        stake = Stake(pct=None, basis="the time its threads waited for a CPU: the oversubscription finding carries it")
        contended = f"; threads waited {100 * waited:.0f}% of their runnable time for a CPU (oversubscription)"
        first = ("Its threads waited for CPUs other threads held: fix the oversubscription first (see Threads), "
                 "then measure again. ")
    return Finding(
        kind="low_efficiency", severity="medium" if share_border is None and waited is None else "low",
        borderline=share_border if waited is None else None,
        layer="efficiency",
        title=(f"{op.name} on {_shape_text(report, op)} takes {ratio:.1f}x longer a call in "
               f"the model than alone ({context['in_model_us_per_call']:.0f} vs {context['alone_us_per_call']:.0f} "
               f"µs), {_alone_reach(op, context['efficiency_pct_alone'])}: the context slows it, not the "
               f"kernel{where}{contended}"),
        op=op.name, location=op.source,
        evidence={"cause": "context", **context, "share_pct": share, "input_shapes": op.input_shapes,
                  "threads": op.threads, "bound": op.bound,
                  "minor_faults_per_step": round(plain) if plain is not None else None,
                  "minor_faults_per_step_operator_pass": round(instrumented) if instrumented is not None else None,
                  "threshold_ratio": CONTEXT_RATIO,
                  "runqueue_wait_share": waited},
        suggestion=(first + "The same call runs faster alone, so look at what surrounds it in the model" + faults + ": "
                    "fresh outputs page-faulting in (glibc gives large temporaries fresh pages every step: reuse "
                    "buffers with out= or in-place ops, or an allocator that keeps pages, LD_PRELOAD jemalloc with "
                    "MALLOC_CONF=oversize_threshold:1,background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,"
                    "muzzy_decay_ms:-1), inputs coming cold from memory (the operator before it wrote a tensor "
                    "larger than the caches: fuse them, torch.compile), or other threads competing for the CPUs "
                    "(see Threads). The operator pass's own profiler adds faults, so compare with the "
                    "uninstrumented count first."),
        # its fault counts are in the evidence already
        stake=stake, doubts=_fault_doubt(report, op, lambda us: _context_holds(us, alone))[1],
    )


def _counter_findings(report: Report) -> list[Finding]:
    c = report.counters
    out: list[Finding] = []
    if c is None:
        return out
    cpi = c.cpi
    if cpi is not None and cpi >= CPI_LOW:
        severity = "medium" if cpi >= CPI_MEDIUM else "low"
        out.append(Finding(
            kind="low_efficiency",
            severity=severity,
            title=f"The run retires an instruction every {cpi:.2f} cycles (CPI, {c.source}): the cores "
                  "mostly wait",
            op=None, location=None,
            evidence={"cpi": cpi, "ipc": c.ipc, "cycles": c.cycles,
                      "instructions": c.instructions, "cache_miss_pct": c.cache_miss_pct,
                      "branch_miss_pct": c.branch_miss_pct,
                      "threshold_cpi": CPI_MEDIUM if severity == "medium" else CPI_LOW, "source": c.source},
            suggestion="A high CPI means stalls, most often on memory: look at the memory-bound operators in the "
                       "efficiency table first (fuse them, use contiguous inputs, smaller dtypes); a VTune "
                       "uarch-exploration run (vtune_scripts/collect.sh uarch) names the stall per aten op.",
            layer="counters", stake=UNKNOWN,
        ))
    spin = c.spin_overhead_pct
    if spin is not None and spin >= SPIN_MEDIUM_PCT:
        out.append(Finding(
            kind="low_efficiency",
            severity="medium",
            title=f"{spin:.0f}% of CPU time is spin and overhead time (VTune): threads wait busily instead of working",
            op=None, location=None,
            evidence={"spin_overhead_pct": spin, "spin_time_s": c.spin_time_s,
                      "overhead_time_s": c.overhead_time_s, "cpu_time_s": c.cpu_time_s,
                      "threshold_pct": SPIN_MEDIUM_PCT, "source": c.source},
            suggestion="OpenMP threads spin at barriers between small parallel regions: fewer intra-op threads "
                       "(torch.set_num_threads), larger operators per call, or OMP_WAIT_POLICY=PASSIVE when "
                       "other work shares the CPUs.",
            layer="counters", stake=UNKNOWN,
        ))
    return out
