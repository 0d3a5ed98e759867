"""Trends over the window's steps (pure functions): step time against the step, and each call site's input
bytes and time against the step.

- `drift(times)`: the uninstrumented pass's step times (report.steps.window_s)
  fitted against the step's index by Theil-Sen (the median of the pairwise
  slopes) with Sen's 95% interval (`robust_line`). Not least squares (`line`,
  which the memory layer's exact readings use): a shared machine's load
  stretches a few steps by 20-40% at random, and a burst of them near the
  window's end tilted a clean MLP's least-squares line by +15% with an interval
  above 0 (a clean-clone run: 26 ms steps, then 30, 35, 38 ms in the last
  four); the median slope moves only when most steps rise. The steps *drift* when the
  interval lies above 0, the line rises by at least DRIFT_MIN_PCT of the
  median step over the window (a slope that small is what load on a shared
  machine moves), and the later half of the window may rise at least half as
  fast: the high end of its slope's 95% interval reaches half the whole
  window's slope (a ramp of first steps, warm-up, then flat steps is not
  drift). Judged on the later half's point slope, a fresh clone's
  examples/growing_bank.py (+106% over 40 steps, every step costing more
  than the last) read a later half rising 0.45x as fast, in a run whose
  later steps a burst of load had stretched in the middle: no drift.
- `site_trends(sites)`: the operator pass's source mode keeps, per call site
  (user line, library line, module, torch function), its calls' tensor input
  bytes and time per step of the window (recorder.CallSite). A site's input
  *grows* when the same test holds for its bytes (GROW_MIN_PCT: a rise of
  a tenth of the mean over the window; bytes are exact, so the interval does
  the rest); its time grows (the same robust line: the load stretches its
  calls too) when its interval lies above 0 and it rises by
  GROW_MIN_PCT, whatever its later half does. Only sites
  that grow either way are kept (report.operator_summary.trends).
- `step_work(sites, times)`: the same sites' steps taken together: whether
  every site ran the same calls on the same input bytes in every step (the
  work did not change), and `drift` fitted to the calls' time per step and
  to the step's time outside them. A script's drift is more work (calls,
  bytes) or more time between the calls (a Python list scanned each step);
  the same calls on the same bytes taking longer is the machine's.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from diagnose.report.model import SiteTrend, StepDrift, StepWork, TrendSlope

DRIFT_MIN_PCT = 10.0  # the line's rise over the window, of the median step
GROW_MIN_PCT = 10.0  # a site's bytes or time: the line's rise over the window, of their mean
LATE_MIN_SHARE = 0.5  # the later half may rise at least half as fast as the whole window (its interval's top)
MIN_STEPS = 6  # a line through fewer steps (and a later half of fewer than 3) says nothing
ROBUST_MAX_POINTS = 64  # robust_line's points: 2016 pairs, about a millisecond a fit in Python


# t(0.975, df) for df = 1..30; above 30 the normal quantile's 1.96 is within 4%
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96 + 2.4 / df


def line(ys: list[float]) -> tuple[float, float, float] | None:
    """(slope, 95% low, 95% high) of ys against 0, 1, 2, ...; None with fewer than 3 points."""
    n = len(ys)
    if n < 3:
        return None
    mx = (n - 1) / 2
    my = sum(ys) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    slope = sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sxx
    resid = sum((y - (my + slope * (i - mx))) ** 2 for i, y in enumerate(ys))
    se = math.sqrt(resid / (n - 2) / sxx)
    half = t975(n - 2) * se
    return slope, slope - half, slope + half


def _binned(ys: list[float], most: int) -> tuple[list[float], list[float]]:
    """(xs, ys) of at most `most` points: consecutive runs of ys by their median, at their mean index."""
    n = len(ys)
    if n <= most:
        return [float(i) for i in range(n)], list(ys)
    size = math.ceil(n / most)
    groups = [range(a, min(a + size, n)) for a in range(0, n, size)]
    return [statistics.fmean(g) for g in groups], [statistics.median(ys[i] for i in g) for g in groups]


def robust_line(ys: list[float]) -> tuple[float, float, float] | None:
    """(slope, 95% low, 95% high) of ys against 0, 1, 2, ...: Theil-Sen's median of the pairwise slopes, Sen's
    (1968) distribution-free interval from Kendall's S (no normal errors assumed: a few steps stretched by load
    move it little). Long series are fitted through the medians of ROBUST_MAX_POINTS runs of steps (the pairs
    grow as n squared). None with fewer than 3 points."""
    if len(ys) < 3:
        return None
    xs, vs = _binned(ys, ROBUST_MAX_POINTS)
    n = len(xs)
    slopes = sorted((vs[j] - vs[i]) / (xs[j] - xs[i]) for i in range(n) for j in range(i + 1, n))
    pairs = len(slopes)
    c = 1.96 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    low = slopes[max(0, math.floor((pairs - c) / 2))]
    high = slopes[min(pairs - 1, math.ceil((pairs + c) / 2))]
    return statistics.median(slopes), low, high


def slope(values: list[float], fit=robust_line) -> TrendSlope | None:
    whole = fit(values)
    if whole is None:
        return None
    late = fit(values[len(values) // 2:]) if len(values) >= MIN_STEPS else None
    return TrendSlope(per_step=whole[0], ci_low=whole[1], ci_high=whole[2],
                      late_per_step=late[0] if late else None, late_ci_high=late[2] if late else None)


def rises(fit: TrendSlope | None, steps: int, scale: float, min_pct: float, late: bool = True) -> bool:
    """Beyond noise (module docstring): the interval above 0, a rise of min_pct of `scale`, and with `late` a later
    half whose interval reaches LATE_MIN_SHARE of the slope."""
    if fit is None or steps < MIN_STEPS or scale <= 0:
        return False
    return (fit.ci_low > 0 and 100.0 * fit.per_step * (steps - 1) / scale >= min_pct
            and (not late or (fit.late_ci_high is not None and fit.late_ci_high >= LATE_MIN_SHARE * fit.per_step)))


def drift(times: list[float]) -> StepDrift | None:
    """The window's step times against the step (module docstring); None with fewer than MIN_STEPS."""
    if len(times) < MIN_STEPS:
        return None
    fit = slope(times)
    median = statistics.median(times)
    if fit is None or median <= 0:
        return None
    change = 100.0 * fit.per_step * (len(times) - 1) / median
    drifts = rises(fit, len(times), median, DRIFT_MIN_PCT)
    rate = (f"{fit.per_step * 1e3:+.3g} ms a step [{fit.ci_low * 1e3:.3g} to {fit.ci_high * 1e3:.3g}], "
            f"{change:+.0f}% of the {median * 1e3:.3g} ms median over {len(times)} steps")
    if drifts:
        verdict = f"step time rises {rate}; the later half rises too"
    elif fit.ci_low > 0 and change >= DRIFT_MIN_PCT:
        verdict = f"warm-up, not drift: {rate}, but the later half is flat"
    else:
        verdict = f"no drift: {rate}"
    return StepDrift(slope=_rounded(fit), median_s=round(median, 6), change_pct=round(change, 1), drifts=drifts,
                     verdict=verdict)


def site_trends(sites: list[dict[str, Any]]) -> list[SiteTrend]:
    """The call sites whose input bytes or time grow over the window (module docstring), most time first."""
    total = sum(acc[0] for site in sites for acc in site["steps"]) or 1.0
    out = []
    for site in sites:
        steps = site["steps"]
        seconds = [float(acc[0]) for acc in steps]
        nbytes = [int(acc[1]) for acc in steps]
        by_bytes, by_time = slope([float(b) for b in nbytes], fit=line), slope(seconds)  # bytes are exact
        grow = rises(by_bytes, len(steps), statistics.fmean(nbytes) if nbytes else 0.0, GROW_MIN_PCT)
        # time grows with the drift: the later half is not asked for (the step times established the drift; a
        # site's time under the profiler also moves with the load, seen halving mid-window on a busy machine)
        slower = rises(by_time, len(steps), statistics.fmean(seconds) if seconds else 0.0, GROW_MIN_PCT, late=False)
        if not (grow or slower):
            continue
        out.append(SiteTrend(
            source=site["source"], library=site["library"], module=site["module"], function=site["function"],
            calls=sum(int(acc[2]) for acc in steps), share_pct=round(100.0 * sum(seconds) / total, 2),
            bytes_per_step=nbytes, seconds_per_step=[round(x, 7) for x in seconds],
            bytes_slope=_rounded(by_bytes, 1) if by_bytes else None,
            time_slope=_rounded(by_time) if by_time else None, bytes_grow=grow, time_grows=slower))
    out.sort(key=lambda t: -t.share_pct)
    return out


def step_work(sites: list[dict[str, Any]], times: list[float]) -> StepWork | None:
    """The operator pass's window call by call (report.model.StepWork): whether every site ran the same calls on
    the same input bytes each step, and the fit of its calls' time per step (and of the time outside them, when
    `times`, the pass's step times, are the same steps). None without sites or with fewer than MIN_STEPS."""
    if not sites or len(sites[0]["steps"]) < MIN_STEPS:
        return None
    n = len(sites[0]["steps"])
    if any(len(site["steps"]) != n for site in sites):
        return None
    same = all(len({(int(acc[1]), int(acc[2])) for acc in site["steps"]}) == 1 for site in sites)
    in_calls = [sum(float(site["steps"][i][0]) for site in sites) for i in range(n)]
    calls = drift(in_calls)
    if calls is None:
        return None
    outside = drift([max(0.0, t - c) for t, c in zip(times, in_calls)]) if len(times) == n else None
    return StepWork(same_work=same, sites=len(sites), calls_per_step=sum(int(site["steps"][0][2]) for site in sites),
                    calls=calls, outside=outside)


def _rounded(fit: TrendSlope, digits: int = 9) -> TrendSlope:
    late, top = fit.late_per_step, fit.late_ci_high
    return TrendSlope(per_step=round(fit.per_step, digits), ci_low=round(fit.ci_low, digits),
                      ci_high=round(fit.ci_high, digits),
                      late_per_step=round(late, digits) if late is not None else None,
                      late_ci_high=round(top, digits) if top is not None else None)
