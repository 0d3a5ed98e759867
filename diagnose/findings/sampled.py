"""Rules on report.sampled (`diagnose script.py --sample`): instrumentation_distortion.

- instrumentation_distortion: an operator whose share of operator time in the operator pass (its rows'
  self_pct summed over shapes) and by sampling the uninstrumented pass (report.sampled.operators, the
  innermost ATen operator of the native stacks) differ by more than DISTORTION_POINTS, when the sampling had
  at least MIN_OPERATOR_SAMPLES samples inside operators (1/sqrt(100): 10 points; fewer cannot tell a
  10-point gap from sampling noise). `low` and an observation: it says how far to trust the operator table's
  share for that operator, not what to fix. Both shares are in `evidence`; report/sampled.beside puts them
  side by side.
  Attach reports have no operator pass: nothing is compared there.
"""

from __future__ import annotations

from diagnose.report.model import Finding, Report, Stake
from diagnose.report.sampled import DISTORTION_POINTS, beside

MIN_OPERATOR_SAMPLES = 100


def instrumentation_distortion(report: Report) -> list[Finding]:
    s = report.sampled
    if s is None or not report.operators or s.operator_samples < MIN_OPERATOR_SAMPLES:
        return []
    out = []
    for row in beside(report):
        if row.distorted:
            where = next((o.source for o in s.operators if o.name == row.op), None)
            out.append(Finding(
                kind="instrumentation_distortion", severity="low", op=row.op, location=where,
                title=f"{row.op} is {row.traced_pct:.0f}% of operator time in the operator pass but "
                      f"{row.sampled_pct:.0f}% by sampling the uninstrumented run: instrumentation distorts its share",
                evidence={"operator_pass_pct": round(row.traced_pct, 1), "sampled_pct": round(row.sampled_pct, 1),
                          "difference_points": round(row.sampled_pct - row.traced_pct, 1),
                          "operator_samples": s.operator_samples, "threshold_points": DISTORTION_POINTS},
                suggestion=("Read this operator's weight from the sampled share (report.sampled): the profiler's "
                            "per-call cost inflates operators with many small calls and shrinks the others' shares."),
                layer="sample", observation=True,
                stake=Stake(pct=None, basis="a measurement's precision, not time to win")))
    return out
