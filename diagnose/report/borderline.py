"""Severity thresholds against the measured interval, not the point: verdicts that hold from run to run.

A rule that grades a measured number against thresholds (hot_operator's share of operator time,
low_efficiency's share of the roof, copy_overhead's copy share, memory_churn's rate, sequential_operator's speedup
(findings/microbench.py: its micro-benchmarks' IQR when wider than the floor), and the stake's 5% and
20% lines in stake.settle) judges the number's interval from this run's noise (`interval`), not the number:

- the whole interval on one side of a threshold: the severity of that side, as before;
- the interval straddles one: the milder side's severity, with `Finding.borderline` naming the number, both
  ends, the line between them and the severity the other end would give. A number at a threshold then gets the
  same severity in every run whichever side of the line a run lands on, and the report says that it is near the
  line instead of flipping between two verdicts. A number whose interval reaches the line where a rule starts
  reporting (hot_operator's 10%) is reported, `low` and borderline when that line's severity is higher.

The interval is value / (1 + `noise(report)`) to value x (1 + `noise(report)`), a spread of times being a
ratio (never below 0, however noisy the run). Every number graded here is an aggregate over the measured window
(a share of the operator pass's time, an operator's mean call, faults per step over the window's median step),
so its noise is the precision of such an aggregate, not the spread of one step: the 95% interval of the window's
median step, MEDIAN_CI_IQR x the uninstrumented steps' IQR over their median / sqrt(steps) (a median of n
samples has a standard error of about 0.93 IQR / sqrt(n); x 1.96), at least `floor`. Judged on one
step's spread (the IQR itself), one run of examples/autocast_weights.py whose 35 steps spread 72% read its
cast's 47% share of operator time as 28-81%, "medium, borderline high", where the four runs beside it, their
steps spreading 6-57%, read 42-49% high. The floor is the run-to-run spread of equal work measured where
nothing else ran: the two identical `.contiguous()` lines of
examples/contiguous_copies.py summed 184 and 161 ms in one run and the other way round in the next (13%
apart, benchmarks/RESULTS.md "gallery flips"), and report/rows.py's TIE_SHARE, the least two lines' times
may differ by and be called tied, is the same number. Where the probe measured this machine's processes
spreading wider (`floor`: model.ProcessSpread, forked processes timing the same step), that is the floor: a
vCPU's speed state lasts seconds and a process keeps its vCPU, so on some hosts two runs read a share or a call
time 17-31% apart (benchmarks/RESULTS.md, gallery set W) where each run's own steps say 10%.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from diagnose.report.model import Borderline, Report
from diagnose.report.rows import TIE_SHARE

MEDIAN_CI_IQR = 1.82  # 1.96 x 0.93: the 95% half-width of a median of n samples, in IQRs / sqrt(n)
RUN_NOISE_MIN = TIE_SHARE  # 10%: a share's relative spread from run to run on a quiet machine (module docstring)


def median_halfwidth(spread: float, n: int) -> float:
    """The 95% half-width of a median of n samples whose IQR is `spread` (in the samples' unit): MEDIAN_CI_IQR x
    spread / sqrt(n)."""
    return MEDIAN_CI_IQR * spread / math.sqrt(n)


def floor(report: Report) -> float:
    """The least relative noise of a window aggregate measured in one process: this machine's process-to-process
    spread as the probe measured it (model.ProcessSpread, not when contended), where wider than RUN_NOISE_MIN."""
    eff = report.efficiency
    spread = eff.peaks.process_spread if eff is not None else None
    if spread is None or spread.contended:
        return RUN_NOISE_MIN
    return max(RUN_NOISE_MIN, spread.spread_pct / 100)


def noise(report: Report) -> float:
    """The relative half-width of a window aggregate's interval in this run: the 95% interval of the window's
    median step from its steps' spread (median_halfwidth of IQR / median), at least `floor`."""
    it = report.run.iterations
    spread = median_halfwidth(it.iqr_over_median, it.n) if it and it.n and it.n >= 4 else 0.0
    return max(floor(report), float(spread))


def interval(value: float, rel: float) -> tuple[float, float]:
    """value's interval with relative noise `rel`: as far below it as above by ratio (module docstring)."""
    return value / (1.0 + rel), value * (1.0 + rel)


def _level(value: float, levels: Sequence[tuple[float, str]], lower_is_worse: bool) -> str | None:
    for limit, severity in levels:  # worst first
        if (value < limit) if lower_is_worse else (value >= limit):
            return severity
    return None


def grade(value: float, rel: float, levels: Sequence[tuple[float, str]], measure: str, unit: str = "%",
          lower_is_worse: bool = False) -> tuple[str | None, Borderline | None]:
    """(severity, borderline) of `value` with relative noise `rel` against `levels`, (limit, severity) pairs
    from the worst: a value at or above a limit has its severity (below it, with `lower_is_worse`). None: the
    rule reports nothing (the whole interval is short of every limit)."""
    return grade_between(value, *interval(value, rel), levels, measure, unit, lower_is_worse)


def grade_between(value: float, low: float, high: float, levels: Sequence[tuple[float, str]], measure: str,
                  unit: str = "%", lower_is_worse: bool = False) -> tuple[str | None, Borderline | None]:
    """`grade` on the interval from `low` to `high`, where it is not a ratio of the value: a difference of two
    measurements is known to their noise on either side of it alike (findings/python.py's loop overhead)."""
    mild_end, worse_end = (high, low) if lower_is_worse else (low, high)
    mild = _level(mild_end, levels, lower_is_worse)
    worse = _level(worse_end, levels, lower_is_worse)
    if mild == worse:
        return mild, None
    if mild is None and worse == "low":
        return "low", None  # between nothing and low: low, shown, with nothing to flip above it
    inside = [limit for limit, _ in levels if low <= limit <= high]
    threshold = min(inside, key=lambda limit: abs(limit - value)) if inside else value
    return (mild or "low"), Borderline(measure=measure, value=round(value, 3), low=round(low, 3),
                                      high=round(high, 3), threshold=threshold, unit=unit, would_be=worse)
