"""The verdict: is the model healthy, with the numbers that say so; and the results the tool doubts itself.

Healthy (`of`, model.Verdict) when all three hold:
- kernels: the step budget's kernels slice (diagnose/budget.py) is at least KERNELS_MIN_SHARE (70%) of the
  step: the step is spent computing, not in Python, dispatch, the allocator, data or waiting;
- roofs: each of the TOP_KERNELS (3) roofline rows (the efficiency layer's) with the largest share of operator
  time among those low_efficiency judges (efficiency.judged: an efficiency, from calls of at least
  efficiency.MIN_US_PER_CALL, 20 µs: below it the profiler's per-call cost and the kernel's start-up make the
  ratio noise; not a kernel's own internal copy, such as addmm writing its broadcast bias: that kernel's cost),
  reaches at least efficiency.MEDIUM_BELOW_PCT (25%) of this machine's roof at its intensity:
  the share below which low_efficiency flags a kernel, and what real kernels reach at awkward shapes (a good
  fp32 GEMM 60-90% of the probe's square-matrix peak, a streaming kernel 50-90% of copy bandwidth);
- findings: no confirmed finding is medium or higher.
When the only findings medium or higher are about the machine rather than the model (MACHINE_KINDS: other
processes held the CPUs), the model is not judged either way: the line says so and asks for a quiet machine.
A check without its measurement (no budget, no operator pass, no efficiency layer) is unmet and says why: a
model is called healthy only on evidence. The verdict is judged on every run (None only in an older report).

Not confirmed (`split`, model.NotConfirmed): a finding whose measurement its rule doubts (`doubts`: a noisy or
contended micro-benchmark, a flat result for a GEMM large enough to split across threads, roofs measured while
other processes held the CPUs, an operator pass that page-faulted far more than the real run) is not a finding:
it never leads and is never merged into one; it is listed below them with the command that re-measures it
(`reproduce`).
"""

from __future__ import annotations

import shlex

from diagnose.findings.efficiency import MEDIUM_BELOW_PCT, MIN_US_PER_CALL, judged
from diagnose.findings.stake import SEVERITY_RANK
from diagnose.render.fmt import shapes as shape_text
from diagnose.report.model import (
    PEAKS_CONTENDED_DOUBT,
    Finding,
    KernelAtRoof,
    NotConfirmed,
    Report,
    Verdict,
)

KERNELS_MIN_SHARE = 0.70
MACHINE_KINDS = {"external_contention"}  # findings about the machine the run shared, not about the model
TOP_KERNELS = 3
NEAR_ROOF_PCT = MEDIUM_BELOW_PCT


def rerun(report: Report) -> str:
    """The diagnose command line that runs this report's target again."""
    t = report.target
    target = f"{t.script}:{t.function}" if t.function else t.script
    args = f" -- {shlex.join(t.argv)}" if t.argv else ""
    return f"diagnose {shlex.quote(target)}{args}"


def reproduce(report: Report, f: Finding) -> str:
    """The command that re-measures a doubted finding: its micro-benchmark's standalone reproducer (run from the
    report's folder) when it has one, the machine's peaks re-measured when they were contended, else the run."""
    script = f.evidence.get("reproducer")
    if not script and f.op:  # an efficiency verdict on an operator micro-benchmarked alone
        shapes = f.evidence.get("input_shapes")
        script = next((r.reproducer for r in report.microbenchmarks
                       if r.reproducer and r.op == f.op and (shapes is None or r.input_shapes == shapes)), None)
    if script:
        return f"python {script}"
    again = rerun(report) + " (on a quiet machine)"
    return f"diagnose probe --refresh && {again}" if PEAKS_CONTENDED_DOUBT in f.doubts else again


def split(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(the confirmed findings, the doubted ones), each in the order given: a finding is doubted when its rule
    doubts the measurement behind it (`doubts`)."""
    return [f for f in findings if not f.doubts], [f for f in findings if f.doubts]


def not_confirmed(report: Report, doubted: list[Finding]) -> list[NotConfirmed]:
    """The doubted findings as the report lists them: each with the command that re-measures it."""
    return [NotConfirmed(finding=f, reproduce=reproduce(report, f)) for f in doubted]


def _pct_range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"


def of(report: Report) -> Verdict:
    """The verdict on a report whose findings are judged (report.findings: the confirmed ones)."""
    b = report.step_budget
    kernels = next((s for s in b.slices if s.name == "kernels"), None) if b else None
    eff = report.efficiency
    rows = sorted((o for o in (eff.operators if eff else []) if judged(report, o)),
                  key=lambda o: -o.share_pct)[:TOP_KERNELS]
    top = [KernelAtRoof(op=o.name, input_shapes=o.input_shapes, share_pct=round(o.share_pct, 2),
                        efficiency_pct=round(o.efficiency_pct, 2), bound=o.bound) for o in rows]
    loud = [f for f in report.findings if SEVERITY_RANK.get(f.severity, 3) <= SEVERITY_RANK["medium"]]
    unmet = []
    if kernels is None:
        unmet.append("no kernels slice in the step budget (the operator pass did not run)" if b else
                     "no step budget (nothing timed the step)")
    elif kernels.share < KERNELS_MIN_SHARE:
        unmet.append(f"kernels are {100 * kernels.share:.0f}% of the {b.unit}, under the "
                     f"{100 * KERNELS_MIN_SHARE:.0f}% a healthy verdict needs")
    if not top:
        unmet.append("no kernel placed against this machine's roofs (the efficiency layer did not run, or no "
                     f"kernel of at least {MIN_US_PER_CALL:g} µs a call has an efficiency)")
    else:
        low = [k for k in top if k.efficiency_pct < NEAR_ROOF_PCT]
        if low:
            unmet.append(f"{', '.join(f'{k.op} {shape_text(k.input_shapes, 40)} at {k.efficiency_pct:.3g}%' for k in low)}"
                         f" of the roof, under the {NEAR_ROOF_PCT:g}% a healthy verdict needs")
    if loud:
        unmet.append(f"{len(loud)} finding{'s' if len(loud) != 1 else ''} medium or higher")
    healthy = not unmet
    if healthy:
        text = (f"healthy: kernels {100 * kernels.share:.0f}% of the {b.unit}; the top {len(top)} kernel"
                f"{'s' if len(top) != 1 else ''} at {_pct_range([k.efficiency_pct for k in top])} of this machine's "
                f"roofs ({', '.join(dict.fromkeys(k.op for k in top))}); no finding above low")
    elif loud and all(f.kind in MACHINE_KINDS for f in loud):
        text = (f"not judged: other processes held this machine's CPUs during the run ({loud[0].kind}); "
                "re-run on a quiet machine")
    elif loud:
        first = next(f for f in loud if f.kind not in MACHINE_KINDS)
        where = f" at {first.location}" if first.location else ""
        text = (f"not healthy: {len(loud)} finding{'s' if len(loud) != 1 else ''} medium or higher, led by "
                f"{first.kind}{where}")
    else:
        text = "not called healthy: " + "; ".join(unmet)
    return Verdict(healthy=healthy, text=text, kernels_share=kernels.share if kernels else None, kernels=top,
                   findings_above_low=len(loud), unmet=unmet)
