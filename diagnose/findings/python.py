"""Rules on the Python layer: python_overhead.

Shares are of the call-graph (cProfile) pass's total time, which overstates
Python relative to operators; the evidence carries that pass's slowdown.

- A user function whose `loop_overhead_s` (its own time plus the tiny calls
  it makes directly, see layers/python.py) is >= 10% of the pass is `low`,
  >= 20% `medium`, >= 40% `high`. Its location is the line inside it that
  calls the most operators (from the operator pass), else its first line.
- Python as a whole (everything but torch built-ins) >= 50% of the pass with
  no user function to blame is `low`: framework overhead, located at the
  user function with the largest cumulative time.
"""

from __future__ import annotations

from diagnose.findings.stake import UPPER_BOUND
from diagnose.report.model import Finding, PythonFunction, Report

LEVELS = ((40.0, "high"), (20.0, "medium"), (10.0, "low"))
FRAMEWORK_MIN_SHARE = 0.5
# time at stake: the share of the cProfile pass, which inflates Python (an upper bound)
STAKE_BASIS = f"share of the cProfile pass ({UPPER_BOUND}: cProfile inflates Python)"


def python_overhead(report: Report) -> list[Finding]:
    summary = report.python_summary
    total_s = summary.get("total_s")
    if not total_s or not report.python_hotspots:
        return []
    user = [r for r in report.python_hotspots if r.kind == "user"]
    out = []
    for row in user:
        share = 100.0 * (row.loop_overhead_s or 0.0) / total_s
        severity = next((sev for threshold, sev in LEVELS if share >= threshold), None)
        if severity is None:
            continue
        location, line_calls = _busiest_line(row)
        out.append(Finding(
            kind="python_overhead", severity=severity, layer="python",
            title=f"{row.function}() spends {share:.0f}% of the run in Python and in "
                  f"{row.tiny_calls} tiny calls it makes one at a time, at {location}",
            op=row.operators[0]["op"] if row.operators else None,
            location=location,
            evidence={
                "function": row.function, "share_pct": round(share, 1),
                "python_self_s": row.self_s, "tiny_calls": row.tiny_calls,
                "loop_overhead_s": row.loop_overhead_s, "function_cumulative_pct": row.cumulative_pct,
                "operator_calls_at_line": line_calls,
                "callgraph_pass_overhead": summary.get("overhead_ratio"),
                "time_at_stake_pct": round(share, 1), "time_at_stake_basis": STAKE_BASIS,
            },
            suggestion=f"Vectorise {row.function}(): replace the Python loop over rows/elements with whole-tensor "
                       "operations (reductions with dim=, broadcasting, torch.where, index_select/gather "
                       "on index tensors) so each operator runs once on the whole batch; what must stay a loop "
                       "can be fused with torch.compile.",
        ))
    if not out and summary.get("python_share", 0) >= FRAMEWORK_MIN_SHARE and user:
        top = max(user, key=lambda r: r.cumulative_s)
        share = 100.0 * summary["python_share"]
        out.append(Finding(
            kind="python_overhead", severity="low", layer="python",
            title=f"Python (framework and glue code) takes {share:.0f}% of the call-graph pass; "
                  "operators get the rest",
            op=None, location=top.location,
            evidence={"share_pct": round(share, 1), "split_s": summary.get("split_s"),
                      "callgraph_pass_overhead": summary.get("overhead_ratio"),
                      "time_at_stake_pct": round(share, 1), "time_at_stake_basis": STAKE_BASIS},
            suggestion="The operators are small next to the Python around them: use larger batches, "
                       "torch.compile to cut framework overhead, or torch.inference_mode() for inference.",
        ))
    return out


def _busiest_line(row: PythonFunction) -> tuple[str, int | None]:
    calls: dict[str, int] = {}
    for op in row.operators:
        calls[op["location"]] = calls.get(op["location"], 0) + op["calls"]
    if not calls:
        return row.location, None
    location = max(calls, key=lambda loc: calls[loc])
    return location, calls[location]
