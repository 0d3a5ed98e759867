"""Rules on the step budget (diagnose/budget.py): time outside torch.

outside_torch: a numerical library's code (numpy, PIL, tokenizers, ...) takes >= OUTSIDE_MIN_SHARE of the step
on the step's own thread: no operator table shows it, and the Python that calls it is a few lines. Medium, high
from OUTSIDE_HIGH_SHARE, both lines judged on the share's interval from the run's noise (report/borderline.py:
a share straddling the 10% line is `low`, borderline medium, rather than a finding in one run and none in the
next); at the user function that calls the library (cProfile's callers); its stake is the
library's share of the native slice, so it never exceeds that slice. The suggestion is the library's usual
cause: per-sample work in the training loop.
"""

from __future__ import annotations

from diagnose.report import borderline
from diagnose.report.model import Finding, Report, Stake

OUTSIDE_MIN_SHARE = 0.10  # a tenth of the step: the smallest share a medium finding needs is half that (stake.py)
OUTSIDE_HIGH_SHARE = 0.30
SUGGESTIONS = {
    "numpy": "Move the per-sample numpy work off the training loop's thread: into a Dataset's __getitem__ with "
             "DataLoader(num_workers > 0), which overlaps it with the steps; or do it once on the whole batch with "
             "torch (torch.fft, torch ops on the batch tensor), or precompute it before training.",
    "PIL": "Decode and transform images in DataLoader workers (num_workers > 0), or on whole batches with torch "
           "tensor ops; a per-image PIL pipeline in the loop runs on the step's thread.",
    "tokenizers": "Tokenize in DataLoader workers or once before training (dataset.map), not per step; use the "
                  "fast tokenizer's batch call on the whole batch.",
}
GENERIC = ("Move this work off the step's thread (DataLoader workers, num_workers > 0), use the torch "
           "equivalent on whole batches, or precompute it once.")


def _location(called_from: str | None) -> str | None:
    """'augment at examples/x.py:21' -> 'examples/x.py:21'."""
    return called_from.rsplit(" at ", 1)[-1] if called_from and " at " in called_from else None


def outside_torch(report: Report) -> list[Finding]:
    b = report.step_budget
    native = next((s for s in b.slices if s.name == "native"), None) if b else None
    if native is None:
        return []
    out = []
    rel = borderline.noise(report)
    for item in native.items:
        if item.label == "other built-ins":
            continue
        pct = 100 * item.share
        severity, border = borderline.grade(pct, rel, ((100 * OUTSIDE_HIGH_SHARE, "high"),
                                                       (100 * OUTSIDE_MIN_SHARE, "medium")),
                                            f"{item.label}'s share of the {b.unit}")
        if severity is None:
            continue
        out.append(Finding(
            kind="outside_torch", severity=severity, borderline=border,
            title=f"{item.label} takes {pct:.0f}% of each {b.unit} outside torch"
                  + (f", called from {item.location}" if item.location else ""),
            op=None, location=_location(item.location),
            evidence={"library": item.label, "share_pct": round(pct, 1), "s_per_step": round(item.s, 6),
                      "called_from": item.location, "threshold_pct": 100 * OUTSIDE_MIN_SHARE},
            suggestion=SUGGESTIONS.get(item.label, GENERIC), layer="python",
            stake=Stake(pct=round(pct, 2), basis=f"{item.label}'s part of the step budget's native slice (call-graph "
                                                 "pass, less cProfile's per-call cost)")))
    return out
