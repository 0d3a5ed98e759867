"""Rules on the Python layer: python_overhead.

Shares are of the call-graph (cProfile) pass's total time, which overstates
Python relative to operators; the evidence carries that pass's slowdown.

- A user function whose `loop_overhead_s` (its own time plus the tiny calls
  it makes directly, see layers/python.py) is >= 10% of the pass is `low`,
  >= 20% `medium`, >= 40% `high`, judged on its interval: the run's noise,
  or where wider the noise of the time moved out of its own time
  (PythonFunction.moved_noise_s: where its own time was sampled, the run's
  noise of what moved; otherwise a difference of two passes' measurements,
  known to the run-to-run noise of their sum). examples/numpy_beside_torch.py's
  <module>, compared so, read 29%, 17%, 0.3%, 31% and 4.5% of five runs'
  passes as the operators at its lines came out above or below the calls
  cProfile saw it make: medium in two runs, nothing above low in three.
  Sampled (layers/python.py OwnTimeSampler), 98% of its own time was numpy's
  (`rng.standard_normal`, `raw @ projection`): outside_torch's, not Python.
  Its location is the line inside it that calls the most operators (from the
  operator pass), else its first line.
- Framework overhead, when the step's operator calls are small (the step's
  time over its calls from Python is at most SMALL_CALL_US, 100 µs;
  dispatching one costs ~5-20 µs): the step budget's Python and dispatch
  slices (budget.py: measured shares of the uninstrumented step, which add
  up with the kernels and the rest) are graded against LEVELS at their
  interval (report/borderline.py: the run's noise, or the Python slice's own
  where wider), and are its time at stake, measured. They are judged whether
  or not a user function passed its line above: the two measure the same
  Python on two scales, and which of them spoke must not hang on the other
  crossing 10% of its inflated pass. examples/graph_breaks.py's forward read
  11-17% of the cProfile pass (low) in the three runs of five on an AVX2
  EPYC whose Linear calls passed TINY_CALL_US, and under 10% in the two
  that then met the budget's 22-23% (medium): nothing above low in three
  runs, medium in one, for one step. At one line the two are one finding
  (stake.dedup: the larger expected share leads, the worse severity holds);
  at two lines, two: where the function's loop is, and the step's share.
  GPT-2's generate spent 50% of its step there (Python 34%, dispatch 16%) and
  got no finding from the two older tests below, each a little short of its
  line (its work at the roofs 28% of the step; Python 49% of the cProfile
  pass). Without a Python slice (no call-graph pass) or steps (a script's
  budget is then its run): the step's work at this machine's roofs (each
  operator row's FLOPs over the GEMM peak or its bytes over the memory
  bandwidth, whichever is longer, summed per step: a lower bound, as no
  kernel reaches the probe's peaks) is under STEP_AT_ROOFS_MEDIUM (25%) of
  the uninstrumented step's median time: `medium`, under 10% `high`, when
  the step's operator calls are small. The rest of the step is then the
  fixed cost of each operator call (dispatch, small kernels) and the Python
  between them: a small model run one token or one sample at a time. (Large
  calls far from the roofs are the operators' own story: low_efficiency,
  memory_churn.) Its time at stake is
  the step's time not explained by the roofs (an upper bound). Located at
  the user line whose operators take most time (`model.generate(...)`).
  Without a budget's Python slice or the machine's peaks the older test
  stands: Python (everything but torch built-ins and waiting) >= 50% of the
  call-graph pass is `low`, located at the same line (at the user function
  with the most cumulative time only when no operator has a line: that is
  often `<module>`, line 1, for a script that works at module scope).
"""

from __future__ import annotations

import dataclasses

from diagnose.findings.stake import UPPER_BOUND
from diagnose.opkinds import ALLOCATION, VIEWS, WRAPPER_SELF_FRACTION
from diagnose.render.fmt import duration
from diagnose.report import borderline
from diagnose.report.model import BudgetSlice, Finding, PythonFunction, Report, Stake

LEVELS = ((40.0, "high"), (20.0, "medium"), (10.0, "low"))
FRAMEWORK_MIN_SHARE = 0.5
STEP_AT_ROOFS_MEDIUM, STEP_AT_ROOFS_HIGH = 0.25, 0.10  # the same bounds as low_efficiency's (findings/efficiency)
SMALL_CALL_US = 100.0
# time at stake: the share of the cProfile pass, which inflates Python (an upper bound)
STAKE_BASIS = f"share of the cProfile pass ({UPPER_BOUND}: cProfile inflates Python)"


def _cprofile_stake(share_pct: float) -> Stake:
    return Stake(pct=round(share_pct, 1), basis=STAKE_BASIS, upper_bound=True)


def python_overhead(report: Report) -> list[Finding]:
    summary = report.python_summary
    if summary is None or not summary.total_s or not report.python_hotspots:
        return []
    total_s = summary.total_s
    user = [r for r in report.python_hotspots if r.kind == "user"]
    out = []
    rel, scale = borderline.noise(report), report.callgraph_scale()
    for row in user:
        loop = row.loop_overhead_s or 0.0
        share = 100.0 * loop / total_s
        if share < LEVELS[-1][0]:
            continue
        # graded on its interval: the run's noise, or where wider the noise of the time moved out of it
        # (PythonFunction.moved_noise_s: sampled, what moved and its sampling error; else a difference of two
        # passes' measurements, as uncertain on either side)
        low, high = borderline.interval(share, rel)
        sample_s = summary.own_time.sample_s if summary.own_time else 0.0
        moved = 100.0 * row.moved_noise_s(scale, borderline.RUN_NOISE_MIN, sample_s) / total_s
        low, high = min(low, max(0.0, share - moved)), max(high, share + moved)
        severity, border = borderline.grade_between(share, low, high, LEVELS,
                                                    f"{row.function}()'s share of the cProfile pass")
        location, line_calls = _busiest_line(row)
        out.append(Finding(
            kind="python_overhead", severity=severity, layer="python", borderline=border,
            title=f"{row.function}() spends {share:.0f}% of the run in Python "
                  + (f"and in {row.tiny_calls} tiny calls it makes one at a time" if row.tiny_calls else "itself")
                  + f", at {location}",
            op=row.operators[0].op if row.operators else None,
            location=location,
            evidence={
                "function": row.function, "share_pct": round(share, 1),
                "python_self_s": row.self_s, "tiny_calls": row.tiny_calls,
                "loop_overhead_s": row.loop_overhead_s, "function_cumulative_pct": row.cumulative_pct,
                "operator_calls_at_line": line_calls,
                "callgraph_pass_overhead": summary.overhead_ratio,
            },
            stake=_cprofile_stake(share),
            suggestion=f"Vectorise {row.function}(): replace the Python loop over rows/elements with whole-tensor "
                       "operations (reductions with dim=, broadcasting, torch.where, index_select/gather "
                       "on index tensors) so each operator runs once on the whole batch; what must stay a loop "
                       "can be fused with torch.compile.",
        ))
    # the step budget's Python and dispatch slices measure the step's framework overhead whether or not a function
    # of the user's passed its own line on the cProfile pass (module docstring)
    framework = _framework_overhead(report) if not out or _budget_slices(report) else None
    if framework is not None:
        return [*out, framework]
    if not out and not _budget_slices(report) and summary.python_share >= FRAMEWORK_MIN_SHARE and user:
        top = max(user, key=lambda r: r.cumulative_s)
        share = 100.0 * summary.python_share
        out.append(Finding(
            kind="python_overhead", severity="low", layer="python",
            title=f"Python (framework and glue code) takes {share:.0f}% of the call-graph pass; "
                  "operators get the rest",
            op=None, location=_hottest_line(report) or top.location,
            evidence={"share_pct": round(share, 1), "split_s": dataclasses.asdict(summary.split_s),
                      "callgraph_pass_overhead": summary.overhead_ratio},
            stake=_cprofile_stake(share),
            suggestion="The operators are small next to the Python around them: use larger batches, "
                       "torch.compile to cut framework overhead, or torch.inference_mode() for inference.",
        ))
    return out


def step_at_roofs(report: Report) -> dict | None:
    """The step's work at this machine's roofs against the step's time (see the module docstring)."""
    it, recorded = report.run.iterations, report.run.instrumented_iterations
    roofs = report.efficiency.roofs if report.efficiency else None
    gflops, gbs = (roofs.gflops_per_s, roofs.gb_per_s) if roofs else (None, None)
    if not it or not recorded or not recorded.n or not gflops or not gbs or it.median_s <= 0:
        return None
    work_s = sum(max((r.flops or 0) / (gflops * 1e9), (r.bytes or 0) / (gbs * 1e9)) for r in report.operators
                 if _kernel(r))
    calls = _top_level_calls(report)
    per_step = work_s / recorded.n
    return {"work_s_per_step": per_step, "step_s": it.median_s, "fraction": per_step / it.median_s,
            "operator_calls_per_step": calls / recorded.n, "flops_per_step": sum(r.flops or 0 for r in report.operators)
            / recorded.n, "roof_gflops_per_s": gflops, "roof_gb_per_s": gbs, "threads": roofs.threads}


def _kernel(row) -> bool:
    """A row whose own work counts: not a wrapper whose work is its children's rows (aten::linear over its
    addmm), not a view or an allocation (no data moves)."""
    if row.name.split("::")[-1] in VIEWS | ALLOCATION:
        return False
    return not (row.total_cpu_us > 0 and row.self_cpu_us < WRAPPER_SELF_FRACTION * row.total_cpu_us)


def _framework_overhead(report: Report) -> Finding | None:
    """Framework overhead (the module docstring): on the step budget's Python and dispatch slices where they were
    measured, else on the step's work at this machine's roofs."""
    slices = _budget_slices(report)
    if slices:
        return _framework_from_budget(report, slices)
    at = step_at_roofs(report)
    if at is None or at["fraction"] >= STEP_AT_ROOFS_MEDIUM or not at["operator_calls_per_step"]:
        return None
    at["us_per_operator_call"] = 1e6 * at["step_s"] / at["operator_calls_per_step"]
    if at["us_per_operator_call"] > SMALL_CALL_US:
        return None
    unit = "step" if report.target.mode == "script" else "call"

    title = (f"Each {unit} holds {duration(at['work_s_per_step'])} of work at this machine's roofs but takes "
             f"{duration(at['step_s'])} ({100 * at['fraction']:.0f}%): the rest is the fixed cost of its "
             f"{at['operator_calls_per_step']:.0f} operator calls from Python and the Python between them "
             "(framework overhead, not compute)")
    return Finding(
        kind="python_overhead", severity="high" if at["fraction"] < STEP_AT_ROOFS_HIGH else "medium",
        layer="python", title=title, op=None, location=_hottest_line(report),
        evidence={**{k: (round(v, 6) if isinstance(v, float) else v) for k, v in at.items()},
                  "cause": "framework", "threshold_fraction": STEP_AT_ROOFS_MEDIUM,
                  "threshold_us_per_operator_call": SMALL_CALL_US},
        stake=Stake(pct=round(100 * (1 - at["fraction"]), 1), upper_bound=True,
                    basis=f"the step's time beyond its work at the roofs ({UPPER_BOUND}: no kernel reaches the "
                          "probe's peaks)"),
        suggestion=FRAMEWORK_SUGGESTION,
    )


def _budget_slices(report: Report) -> dict[str, BudgetSlice]:
    """The step budget's python and dispatch slices by name, where the framework rule judges on them: a budget
    of steps (not of a run) with a Python slice; else {}."""
    budget = report.step_budget
    if budget is None or budget.unit == "run" or not any(s.name == "python" for s in budget.slices):
        return {}
    return {s.name: s for s in budget.slices if s.name in ("python", "dispatch")}


def _framework_from_budget(report: Report, slices: dict[str, BudgetSlice]) -> Finding | None:
    """The step budget's Python and dispatch slices (measured shares of the uninstrumented step that add up with
    the kernels') graded against LEVELS at their interval, when the step's operator calls are small."""
    it, recorded = report.run.iterations, report.run.instrumented_iterations
    calls = _top_level_calls(report)
    if not it or not it.median_s or not recorded or not recorded.n or not calls:
        return None
    per_step = calls / recorded.n
    us_per_call = 1e6 * it.median_s / per_step
    if us_per_call > SMALL_CALL_US:
        return None
    python, dispatch = slices["python"], slices.get("dispatch")
    share = 100.0 * sum(max(0.0, s.share) for s in slices.values())
    # the interval: the run's noise on a window aggregate, or the Python slice's own (a difference of larger
    # terms, BudgetSlice.noise_share) where wider
    rel = borderline.noise(report)
    if python.noise_share and share:
        rel = max(rel, 100.0 * python.noise_share / share)
    severity, border = borderline.grade(share, rel, LEVELS, "Python and dispatch share of the step")
    if severity is None:
        return None
    unit = "step" if report.target.mode == "script" else "call"
    parts = ", ".join(f"{name} {100 * s.share:.0f}%" for name, s in
                      (("Python", python), ("calling operators", dispatch)) if s is not None)
    at = step_at_roofs(report)
    roofs = (f"; its work at this machine's roofs is {duration(at['work_s_per_step'])} "
             f"({100 * at['fraction']:.0f}%)" if at else "")
    title = (f"Python and calling operators take {share:.0f}% of each {unit} ({parts}) around its "
             f"{per_step:.0f} small operator calls from Python, {us_per_call:.0f} µs a call with everything"
             f"{roofs}: framework overhead, not compute")
    evidence = {"cause": "framework", "share_pct": round(share, 1),
                "python_share_pct": round(100 * python.share, 1),
                "dispatch_share_pct": round(100 * dispatch.share, 1) if dispatch else None,
                "step_s": round(it.median_s, 6), "operator_calls_per_step": round(per_step, 1),
                "us_per_operator_call": round(us_per_call, 2), "threshold_us_per_operator_call": SMALL_CALL_US}
    if at:
        evidence.update(work_s_per_step=round(at["work_s_per_step"], 6), fraction=round(at["fraction"], 4))
    lo, hi = borderline.interval(share, rel)
    return Finding(
        kind="python_overhead", severity=severity, layer="python", title=title, op=None,
        location=_hottest_line(report), evidence=evidence, borderline=border,
        stake=Stake(pct=round(share, 1), low=round(lo, 2), high=round(hi, 2),
                    basis="the step budget's Python and dispatch slices (measured shares of the step)"),
        suggestion=FRAMEWORK_SUGGESTION,
    )


FRAMEWORK_SUGGESTION = (
    "Fewer, larger operator calls: batch more samples or sequences per step (an operator's fixed cost does not "
    "grow with its rows), torch.compile the model (it fuses operators and drops the per-call Python and dispatch; "
    "for generate, a static KV cache: model.generate(..., cache_implementation=\"static\") with the forward "
    "compiled), and torch.inference_mode() around inference.")


def _top_level_calls(report: Report) -> int:
    """The operator pass's aten calls made from Python (not from inside another operator)."""
    return sum(r.calls for r in report.operators if r.name.startswith("aten::") and "" in r.called_by)


def _hottest_line(report: Report) -> str | None:
    """The user line whose operators take most time (`model.generate(...)`), where framework overhead is met."""
    return report.operators[0].source if report.operators else None


def _busiest_line(row: PythonFunction) -> tuple[str, int | None]:
    calls: dict[str, int] = {}
    for op in row.operators:
        calls[op.location] = calls.get(op.location, 0) + op.calls
    if not calls:
        return row.location, None
    location = max(calls, key=lambda loc: calls[loc])
    return location, calls[location]
