"""A what-if variant's outputs against the baseline's.

Child side (diagnose/whatif/child.py): the first round's baseline pass saves
the outermost module's output at the first call with the variant applied
(every floating tensor in it, as float32); every later what-if pass compares
its own output with that file in-process (`difference`) and writes the
numbers into its result, so the parent never imports torch.

Parent side (`self_check`, `check`): the baseline's second round against its
first says whether the outputs can be checked at all (a script whose outputs
differ between runs of the same code, from randomness it draws after seeding
or a nondeterministic kernel, cannot be checked, and no variant is then
recommended on its outputs); then each variant's first round:
rel_diff = max |variant - baseline| / max |baseline|, matched against the
variant's tolerance (variants.TOLERANCE).
"""

from __future__ import annotations

from diagnose.doctor.trials import pass_name
from diagnose.protocol import OutputDiff, WhatIfPass
from diagnose.report.model import OutputCheck

REFERENCE = pass_name(0, "baseline")  # the pass whose output every other pass compares with
SELF_TOLERANCE = 1e-6  # the baseline against itself: the same code, seed and threads


def difference(a: list, b: list) -> OutputDiff:
    """max_abs_diff and rel_diff of output tensors `a` against `b`, or the error why they cannot be compared."""
    import torch

    if len(a) != len(b):
        return OutputDiff(error=f"different numbers of output tensors ({len(a)} against {len(b)})")
    worst, scale = 0.0, 0.0
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return OutputDiff(error=f"different output shapes ({list(x.shape)} against {list(y.shape)})")
        if not bool(torch.isfinite(x).all() and torch.isfinite(y).all()):
            if torch.equal(torch.isnan(x), torch.isnan(y)) and torch.equal(torch.nan_to_num(x), torch.nan_to_num(y)):
                continue
            return OutputDiff(error="non-finite values (inf or nan) where the baseline has others")
        if x.numel():
            worst = max(worst, float((x - y).abs().max()))
            scale = max(scale, float(y.abs().max()))
    rel = worst / scale if scale > 0 else (0.0 if worst == 0 else float("inf"))
    return OutputDiff(max_abs_diff=worst, rel_diff=rel)


def self_check(second_round: WhatIfPass | None) -> str | None:
    """None when the baseline's second round matches its first, else why no output can be checked."""
    diff = second_round.diff if second_round else None
    if not (second_round and second_round.captured) or not diff:
        return ("the unchanged run kept no output to compare (the model ran fewer than two calls, or returned no "
                "floating-point tensor)")
    if diff.error:
        return f"the unchanged run's own outputs differ between runs: {diff.error}"
    if diff.rel_diff > SELF_TOLERANCE:
        return (f"the unchanged run's own outputs differ between runs (max abs diff {diff.max_abs_diff:.3g}): "
                "randomness the script draws after seeding, or a nondeterministic kernel")
    return None


def check(variant: WhatIfPass | None, tolerance: float, compared: str | None, unchecked: str | None) -> OutputCheck:
    """The variant's first-round result (its `diff`) against its tolerance."""
    if unchecked:
        return OutputCheck("unchecked", compared, tolerance=tolerance, reason=unchecked)
    diff = variant.diff if variant else None
    if not diff:
        return OutputCheck("unchecked", compared, tolerance=tolerance,
                           reason="the variant's run kept no output (it ran fewer than two calls of the model)")
    if diff.error:
        return OutputCheck("differ", compared, tolerance=tolerance, reason=diff.error)
    worst, rel = diff.max_abs_diff, diff.rel_diff
    return OutputCheck("match" if rel <= tolerance else "differ", compared, max_abs_diff=float(f"{worst:.4g}"),
                       rel_diff=float(f"{rel:.4g}"), tolerance=tolerance)
