"""Rules on trends over the window's steps (diagnose/trends.py): input_growth, step_drift.

- input_growth: a call site's tensor input bytes grow step over step
  (report.operator_summary.trends, `bytes_grow`: the least-squares interval
  above 0, a rise of at least a tenth of the mean over the window, the
  later half too) while it takes >= GROWTH_MIN_SHARE_PCT (2%) of the
  source mode's time (judged on the share's interval, report/borderline.py:
  straddling the line, `low`, borderline), at a call in the user's own code (a library's, such
  as transformers' KV cache, is not the user's to change; its growth shows
  as step_drift): each step does more than the last, so the run's cost
  is quadratic in its length (`buf = torch.cat([buf, y])` copies every
  earlier row again). Projected to the script's end when its length is
  known (report.memory.projection: the `for` loops around the step): the
  input at the last step over the window's mean, which a call's time follows
  for a copy. `high` when that reaches PROJECTED_HIGH (10x), else `medium`;
  `medium` when the length is unknown. Its stake: the site's share of the
  source mode's time (its calls, timed from Python: what the operator share
  is for an operator) in the window (it only grows after it). The
  suggestion: for cat/stack, collect the pieces in a list and cat once, or
  preallocate and write into slices; otherwise bound what grows.
- step_drift: the uninstrumented pass's step time rises over the window
  (report.steps.drift: the interval above 0, a rise of at least 10% of the
  median step, the later half too). It names the call sites whose time grew
  with it (`time_grows`), the largest slope first, at the first of them.
  Its stake: the window's mean step over its line's first step, the time
  the drift already costs there (it grows after). `medium`, `high` from a
  rise of DRIFT_HIGH_PCT (50%) over the window. Doubted when the threads
  layer saw other processes hold the CPUs (the external_contention rule):
  their load comes and goes, and the steps may have slowed with it; and
  when the operator pass's fit over the same steps
  (report.steps.instrumented_drift) rose by less than half as much even at
  the top of its interval (DRIFT_CORROBORATION): more work each step shows
  in both passes (examples/transpose_copy.py, a clean loop, drifted +10-20%
  in 2 of 5 runs of an idle machine, its operator pass flat); and when that
  fit did not rise beyond its noise (its interval reaches 0): a drift is
  confirmed only where the second pass over the same steps shows it too.
  examples/mlp.py, the control, once drifted +33% (0.008 to 0.434 ms a
  step, its steps' IQR 60% of their median) where its operator pass read
  +6% (-0.26 to 0.31 ms a step): too noisy to contradict, and not a
  replication either. A call site
  whose time grew is inside that pass's steps, so it does not lift the doubt:
  examples/rng_setup.py drifted +15% on an idle machine, its operator pass
  +2% (at most +5%), with two sites growing by 0.5 µs a step of the 4 µs
  rise. And when the operator pass's steps did the same work each step
  (report.steps.instrumented_work: every call site the same calls on the
  same input bytes) and the calls' own time rose (its interval above 0, by
  at least DRIFT_CORROBORATION of the pass's step rise in percent): more
  work each step is more calls, more bytes, or more time between the calls
  (Python); the same calls on the same bytes running slower is the
  machine's load or clock (a CI run of examples/rng_setup.py, a fixed
  inference batch: +24% over 151 steps in both passes, every site's time up
  with its inputs unchanged).
"""

from __future__ import annotations

from diagnose.findings import threads
from diagnose.findings.stake import operator_stake
from diagnose.report import borderline
from diagnose.report.model import Finding, Report, SiteTrend, Stake, StepDrift
from diagnose.trends import DRIFT_MIN_PCT

GROWTH_MIN_SHARE_PCT = 2.0
PROJECTED_HIGH = 10.0
DRIFT_HIGH_PCT = 50.0
DRIFT_CORROBORATION = 0.5  # the operator pass's rise must reach this share of the uninstrumented one's
COPYING = ("cat", "stack", "concat", "concatenate", "hstack", "vstack", "dstack", "column_stack", "row_stack")
MIB = 1 << 20


def _size(nbytes: float) -> str:
    return f"{nbytes / MIB:.2f} MiB" if abs(nbytes) >= MIB / 10 else f"{nbytes / 1024:.1f} KiB"


def _op(report: Report, trend: SiteTrend) -> str | None:
    """The operator the site's function ran (aten::cat for cat) at its line, with most time there."""
    named = [r for r in report.operators if r.source == trend.source and r.name.split("::")[-1] == trend.function]
    return named[0].name if named else None


def input_growth(report: Report) -> list[Finding]:
    summary = report.operator_summary
    out = []
    for t in summary.trends if summary else []:
        if not t.bytes_grow or t.bytes_slope is None:
            continue
        if t.source is None or (t.library is not None and t.library != t.source):
            continue  # inside a library (transformers' KV cache): the call is not the user's to change
        per_step = t.bytes_slope.per_step
        mean = sum(t.bytes_per_step) / len(t.bytes_per_step)
        copying = t.function in COPYING
        projection = report.memory.projection if report.memory else None
        total = projection.total_steps if projection else None
        at_end = projection.step_at_window_end if projection else None
        ratio = None
        if total and at_end and mean > 0:
            ratio = (t.bytes_per_step[-1] + per_step * max(0, total - at_end)) / mean
        where = t.source or t.library or "?"
        title = (f"{t.function} at {where}: its input grows by {_size(per_step)} a step "
                 f"({'quadratic copying' if copying else 'each step does more than the last'})")
        if ratio is not None:
            title += f"; at the script's step {total} a call will take about {ratio:.0f}x what it takes in the window"
        if copying:
            suggestion = (f"{t.function} copies all its inputs into a new tensor, and its input grows every step, so "
                          "each step copies every earlier step's rows again: collect the pieces in a list and "
                          f"torch.{t.function} once after the loop, or preallocate the result "
                          "(`buf = torch.empty(total, ...)`, then `buf[i:i + n] = piece`) and write into its slices.")
        else:
            suggestion = ("Its input grows every step, so each step costs more than the last: bound what grows "
                          "(a fixed-size window, a preallocated buffer, a static cache), or rebuild it less often.")
        evidence = {
            "function": t.function, "calls": t.calls, "bytes_per_step": per_step,
            "ci_low": t.bytes_slope.ci_low, "ci_high": t.bytes_slope.ci_high,
            "late_bytes_per_step": t.bytes_slope.late_per_step, "input_bytes": t.bytes_per_step,
            "mean_input_bytes": round(mean), "share_pct": t.share_pct,
            "threshold_share_pct": GROWTH_MIN_SHARE_PCT,
            "total_steps": total, "step_at_window_end": at_end,
            "projected_ratio": round(ratio, 1) if ratio is not None else None,
        }
        severity, border = borderline.grade(
            t.share_pct, borderline.noise(report),
            ((GROWTH_MIN_SHARE_PCT, "high" if ratio is not None and ratio >= PROJECTED_HIGH else "medium"),),
            "share of the source mode's time")
        if severity is None:
            continue
        stake = operator_stake(report, t.share_pct)
        out.append(Finding(
            kind="input_growth", severity=severity, borderline=border,
            title=title, op=_op(report, t), location=t.source, evidence=evidence, suggestion=suggestion,
            layer="operators",
            stake=Stake(pct=stake.pct, basis=stake.basis + " (in the window: it grows after it)"),
        ))
    return out


def not_in_the_operator_pass(report: Report, d: StepDrift) -> str | None:
    """Why the uninstrumented pass's drift is not confirmed as the script's: the operator pass ran the same steps,
    and more work each step shows in both passes, a machine's passing load rarely at the same steps. Not
    confirmed when that pass's own fit did not rise beyond its noise (its 95% interval reaches 0), or rose, at
    the top of its interval, by less than half as much (in percent of its median step). None: it rose too, or
    it was not measured."""
    steps = report.steps
    op = steps.instrumented_drift if steps else None
    if op is None or op.median_s <= 0:
        return None
    n = len(steps.window_s)  # the same window's steps (a drift has at least trends.MIN_STEPS)
    high = 100.0 * op.slope.ci_high * (n - 1) / op.median_s
    if high < DRIFT_CORROBORATION * d.change_pct:
        return (f"the operator pass ran the same steps and they did not slow the same way (its line "
                f"{op.change_pct:+.0f}%, at most {high:+.0f}% at its interval's top, against {d.change_pct:+.0f}% "
                "here): more work each step would show in both passes, so this is more likely the machine's load, "
                "which comes and goes")
    if op.slope.ci_low <= 0:
        return (f"the operator pass ran the same steps and its own line did not rise beyond its noise (its line "
                f"{op.change_pct:+.0f}%, {op.slope.ci_low * 1e3:.3g} to {op.slope.ci_high * 1e3:.3g} ms a step): more "
                "work each step would show in both passes, so the drift is not confirmed as the script's")
    return None


def the_same_work_slower(report: Report) -> str | None:
    """Why the drift is not confirmed as the script's: in the operator pass every call site ran the same calls on
    the same input bytes each step (report.steps.instrumented_work), and the calls' own time rose beyond its
    noise, in percent of its median at least DRIFT_CORROBORATION of the pass's step (the rise is in the same work,
    not between the calls): the same work taking longer is the machine's load or clock. None otherwise."""
    steps = report.steps
    work = steps.instrumented_work if steps else None
    op = steps.instrumented_drift if steps else None
    if work is None or op is None or not work.same_work or work.calls.slope.ci_low <= 0:
        return None
    if op.change_pct <= 0 or work.calls.change_pct < DRIFT_CORROBORATION * op.change_pct:
        return None  # the rise is outside the calls (Python between them): that can be more work each step
    return (f"the operator pass's steps did the same work each step (the same {work.calls_per_step} calls at "
            f"{work.sites} call sites on the same input bytes), and those calls took longer "
            f"({work.calls.change_pct:+.0f}% over the window, the pass's step {op.change_pct:+.0f}%): the same work "
            "running slower is the machine's "
            "load or clock, not the script doing more each step (or values that became slower to compute: "
            "subnormals, which --doctor looks for)")


def step_drift(report: Report) -> list[Finding]:
    d = report.steps.drift if report.steps else None
    if d is None or not d.drifts:
        return []
    summary = report.operator_summary
    growing = sorted((t for t in (summary.trends if summary else []) if t.time_grows and t.time_slope),
                     key=lambda t: -t.time_slope.per_step)
    named = "; ".join(f"{t.function} at {t.source or t.library or '?'} (+{t.time_slope.per_step * 1e6:.0f} µs a step)"
                      for t in growing[:3])
    n = len(report.steps.window_s)
    first = d.median_s - d.slope.per_step * (n - 1) / 2  # the line at the window's first step, about
    excess = 100.0 * (d.median_s - first) / d.median_s if d.median_s else None
    top = growing[0] if growing else None
    doubts = []
    contended = threads.external_contention(report)
    if contended:  # other processes' load comes and goes: a trend in the step times may be theirs
        doubts.append(f"other processes held the CPUs during the run ({contended[0].title.split(' while')[0]}): "
                      "the steps may have slowed with their load, not the script's")
    unseen = not_in_the_operator_pass(report, d)
    if unseen:  # a growing site's time is inside the operator pass's steps, which did not rise with these
        doubts.append(unseen)
    slower = the_same_work_slower(report)
    if slower:  # the same calls on the same bytes, each step: no more work, the machine ran it slower
        doubts.append(slower)
    return [Finding(
        kind="step_drift",
        severity="high" if d.change_pct >= DRIFT_HIGH_PCT else "medium",
        title=(f"Step time rises {d.change_pct:.0f}% over the window's {n} steps "
               f"({d.slope.per_step * 1e3:+.3g} ms a step, 95% interval {d.slope.ci_low * 1e3:.3g} to "
               f"{d.slope.ci_high * 1e3:.3g})" + (f": growing at {named}" if named else "")),
        op=_op(report, top) if top else None,
        location=top.source if top else None,
        evidence={
            "slope_s_per_step": d.slope.per_step, "ci_low": d.slope.ci_low, "ci_high": d.slope.ci_high,
            "late_slope_s_per_step": d.slope.late_per_step, "median_s": d.median_s, "change_pct": d.change_pct,
            "threshold_pct": DRIFT_MIN_PCT, "window_s": report.steps.window_s,
            "growing_sites": [{"source": t.source, "function": t.function, "s_per_step": t.time_slope.per_step,
                               "share_pct": t.share_pct} for t in growing[:5]],
        },
        suggestion=("Something makes each step slower than the last: " + (
            f"the time grows at {named}; " if named else "no call site's time grew with it in the operator pass "
            "(a cache that fills, a Python list scanned each step, thermal throttling); ")
            + "find what grows with the step count and bound it (preallocate, a fixed-size window, clear the "
              "cache), or the run's cost grows faster than its length."),
        layer="operators",
        stake=Stake(pct=round(excess, 2) if excess is not None else None,
                    basis="the window's median step over its fitted line's first step (uninstrumented pass): "
                          "what the drift already costs there; it grows after the window"),
        doubts=doubts,
    )]
