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
ratio (never below 0, however noisy the run: a loaded run's steps spread 86%, and value x (1 - 0.86) or
less would reach every line below the number): the uninstrumented steps' interquartile range over their
median (the spread `diagnose compare` and the trials read), at least RUN_NOISE_MIN. That floor is the
run-to-run spread of equal work measured where nothing else ran: the two identical `.contiguous()` lines of
examples/contiguous_copies.py summed 184 and 161 ms in one run and the other way round in the next (13%
apart, benchmarks/RESULTS.md "gallery flips"), and report/rows.py's TIE_SHARE, the least two lines' times
may differ by and be called tied, is the same number.
"""

from __future__ import annotations

from collections.abc import Sequence

from diagnose.report.model import Borderline, Report
from diagnose.report.rows import TIE_SHARE

RUN_NOISE_MIN = TIE_SHARE  # 10%: a share's relative spread from run to run on a quiet machine (module docstring)


def noise(report: Report) -> float:
    """The relative half-width of a measured time's interval in this run: the uninstrumented steps' IQR over
    their median, at least RUN_NOISE_MIN."""
    it = report.run.iterations
    spread = it.iqr_over_median if it and it.n and it.n >= 4 else 0.0
    return max(RUN_NOISE_MIN, float(spread))


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
    low, high = interval(value, rel)
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
