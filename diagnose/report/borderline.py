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
time 17-31% apart (benchmarks/RESULTS.md, gallery set W) where each run's own steps say 10%. One probe's 8
processes take 3 s and mostly sit in one state, so probes minutes apart read 5-32%; once the machine's spread
history (one more process a diagnosis, the last 48 kept: layers/efficiency/probe.py) holds 16 samples, their
spread is the floor instead, the same for every run that reads it. A share and a time have floors of their own:
a slower vCPU slows every operator of a step, so on one EPYC the history's GEMM call spread 38-40% where the
step's shares spread 7-23% (benchmarks/RESULTS.md, "The floor from the machine's spread history").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from diagnose.report.model import Borderline, ProcessSpread, Report
from diagnose.report.rows import TIE_SHARE

MEDIAN_CI_IQR = 1.82  # 1.96 x 0.93: the 95% half-width of a median of n samples, in IQRs / sqrt(n)
# uncontended timings of the probe's step in the machine's spread history (the probe's 8 and 8 runs') before their
# spread is the floor instead of one probe's (layers/efficiency/probe.py records them)
HISTORY_MIN = 16
Of = Literal["share", "time"]  # the kind of number a floor is for (`floor`)
RUN_NOISE_MIN = TIE_SHARE  # 10%: a share's relative spread from run to run on a quiet machine (module docstring)


def median_halfwidth(spread: float, n: int) -> float:
    """The 95% half-width of a median of n samples whose IQR is `spread` (in the samples' unit): MEDIAN_CI_IQR x
    spread / sqrt(n)."""
    return MEDIAN_CI_IQR * spread / math.sqrt(n)


def process_spread(report: Report) -> ProcessSpread | None:
    """The process-to-process spread the floor is taken from: the machine's spread history once it holds enough
    samples (Peaks.spread_history), else the probe's own (Peaks.process_spread), else None."""
    eff = report.efficiency
    if eff is None:
        return None
    return eff.peaks.spread_history or eff.peaks.process_spread


def floor(report: Report, of: Of = "share") -> float:
    """The least relative noise of a window aggregate measured in one process: this machine's process-to-process
    spread (`process_spread`: its history over many runs, else the probe's; not when contended) of that kind of
    number, where wider than RUN_NOISE_MIN. `of`: "share" (a share of the step or of operator time: the spread of
    the step's shares) or "time" (a call time, a rate per second: every number's, the GEMM call's the widest,
    since a slower vCPU slows each operator of a step alike and leaves their shares nearer)."""
    spread = process_spread(report)
    if spread is None or spread.contended:
        return RUN_NOISE_MIN
    pct = max((g.spread_pct for g in spread.groups if of == "time" or g.name.endswith("share")),
              default=spread.spread_pct)
    return max(RUN_NOISE_MIN, pct / 100)


def noise(report: Report, of: Of = "share") -> float:
    """The relative half-width of a window aggregate's interval in this run: the 95% interval of the window's
    median step from its steps' spread (median_halfwidth of IQR / median), at least `floor` of that kind."""
    it = report.run.iterations
    spread = median_halfwidth(it.iqr_over_median, it.n) if it and it.n and it.n >= 4 else 0.0
    return max(floor(report, of), float(spread))


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
