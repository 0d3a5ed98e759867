"""Rule on --what-if (report.what_if, diagnose/whatif/): what_if.

One finding per recommended variant: it won outside the noise in every
interleaved round on the user's own steps and its outputs matched the
unchanged run's. The time at stake is what it measured, 1 - 1/speedup of the
step, with the interval its 95% interval gives (stake.measured); the suggestion is the code
change, with torch.compile's one-off cost and break-even beside it. Variants
that did not win, or whose outputs differ, get no finding: the what-if
section lists them with why. A float32 win is the dtype finding's stake
(dtypes.py), not a finding of its own, where that finding is raised.
"""

from __future__ import annotations

from diagnose.findings import dtypes
from diagnose.findings.stake import measured
from diagnose.report.model import Finding, Report


def what_if(report: Report) -> list[Finding]:
    w = report.what_if
    if w is None:
        return []
    out = []
    for v in w.variants:
        if not v.recommended:
            continue
        if v.name == dtypes.FLOAT32_VARIANT and dtypes.graded(report)[1] is not None:
            continue  # the dtype finding carries it: the cause, its line and this measurement
        t = v.trial
        interval = f" (95% interval {t.ci_low:.2f}-{t.ci_high:.2f}x)" if t.ci_low is not None else ""
        outputs = (f"outputs match within {v.outputs.tolerance:g} of their scale" if v.outputs.rel_diff
                   else "outputs identical")
        title = f"Measured: {v.name} makes your step {t.speedup:.2f}x faster{interval}, {outputs}"
        suggestion = v.trial.change[:1].upper() + v.trial.change[1:] + "."
        evidence = {"variant": v.name, "why": v.why, "speedup": t.speedup, "ci_low": t.ci_low, "ci_high": t.ci_high,
                    "noise_floor_pct": t.noise_floor_pct, "rounds": t.rounds, "baseline_step_s": t.baseline_step_s,
                    "variant_step_s": t.variant_step_s, "max_abs_diff": v.outputs.max_abs_diff,
                    "rel_diff": v.outputs.rel_diff, "tolerance": v.outputs.tolerance}
        stake = measured(t, f"measured: 1 - 1/speedup of the step with {v.name}, {t.rounds} "
                            "interleaved rounds on your own steps")
        c = v.compile
        if c is not None and c.compile_s is not None:
            evidence.update(compile_s=c.compile_s, break_even_steps=c.break_even_steps)
            suggestion += (f" Compiling took {c.compile_s:.1f} s here"
                           + (f": it repays after {c.break_even_steps} steps" if c.break_even_steps else "")
                           + "; warm up outside any region you time.")
        out.append(Finding(kind="what_if", severity="high", title=title, op=None, location=None,
                           evidence=evidence, suggestion=suggestion, layer="what_if", stake=stake))
    return out
