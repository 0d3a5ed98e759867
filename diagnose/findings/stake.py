"""Time at stake, ranking and de-duplication of findings.

Every finding's evidence carries `time_at_stake_pct`: an estimate of the
share of the run's (uninstrumented) wall time that fixing it could win, and
`time_at_stake_basis`, how it was estimated. The layers measure shares of
different things (operator self CPU time, the cProfile pass, thread runnable
time), so this puts them on one scale:

- operator findings (hot_operator, copy_overhead, memory_churn, and the
  microbench and efficiency rules through `fill`): the operator share
  times `operator_wall_fraction`, the share of the run spent inside torch
  operators (the cProfile pass's torch built-in share when the python layer
  ran, else operator self CPU time over the recorded span of the operator
  pass, `recorded_span`);
- python_overhead: the function's share of the cProfile pass (that pass
  inflates Python, so this is an upper bound);
- oversubscription: the throughput the thread sweep measured to gain, as
  wall time saved (1 - 1/(1 + gain)), else the run-queue wait share;
- external_contention: the run-queue wait share; undersubscription: the
  idle usable CPUs' share (perfect scaling, an upper bound).

Ranking (`rank`): findings a rule rated `high` or `medium` come first, by
time at stake (largest first); `low` findings (a healthy compute kernel, a
noisy measurement, framework overhead: things to look at rather than fix)
follow, also by time at stake.

De-duplication (`dedup`): findings at the same `location` (file:line)
raised by two or more layers become one finding: the primary is the cause
rather than the symptom (any kind before low_efficiency before hot_operator,
then the larger time at stake); the others go to its evidence["also"] with
their own evidence; the merged severity is the group's highest (evidence
"severity_from" names the piece it came from when that is not the primary)
and its time at stake the group's largest (the pieces overlap, so they are
not added), both over the pieces about the same time: the primary's own
operator at its own input shapes (when both pieces record shapes), or the
whole line when either has no operator (python_overhead). Another operator
of the same statement (`tanh(x @ x)`: a low_efficiency tanh beside a
healthy mm), or the same operator at other shapes (one `x @ w` line called
with two batch sizes), rides along in "also" without lending the primary
its severity or its stake.
Findings of one layer at one line (two hot operators of one statement) stay
separate, and findings without a location are never merged.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from diagnose.report.model import Finding, Report

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}
OPERATOR_LAYERS = ("operators", "microbench", "efficiency")
SYMPTOM_TIER = {"low_efficiency": 1, "hot_operator": 2}  # the rest are causes (tier 0)


def _clamp(x: float) -> float:
    return max(0.0, min(1.0, x))


def recorded_span(report: Report) -> tuple[float | None, str]:
    """(seconds the operator pass recorded, how): in function mode with --iters above --profile-iters only
    the last iterations are recorded (instrumented_iterations holds just those), so their count times
    their median; otherwise the operator pass's wall time."""
    it, iters = report.run.instrumented_iterations, report.target.iters
    if it and iters and it.n < iters and it.median_s > 0:
        return it.n * it.median_s, f"{it.n} recorded iterations x their median {it.median_s:.4g} s"
    return report.run.instrumented_wall_s, "the operator pass's wall time"


def operator_wall_fraction(report: Report) -> tuple[float, str]:
    """(share of the run spent in torch operators, 0..1; where that number comes from)."""
    s = report.python_summary or {}
    if s.get("total_s") and s.get("operator_share") is not None:
        return _clamp(float(s["operator_share"])), "operator share x torch built-ins' share of the cProfile pass"
    total_us = (report.operator_summary or {}).get("total_self_cpu_us")
    span, _ = recorded_span(report)
    if total_us and span:
        return _clamp(total_us / (span * 1e6)), "operator share x operator self CPU time over the operator pass"
    return 1.0, "operator share (operators assumed to be the whole run)"


def operator_stake(report: Report, share_pct: float | None) -> dict[str, Any]:
    """time_at_stake_pct / _basis for a finding about `share_pct`% of operator self CPU time."""
    if share_pct is None:
        return {"time_at_stake_pct": None, "time_at_stake_basis": "unknown"}
    fraction, basis = operator_wall_fraction(report)
    return {"time_at_stake_pct": round(float(share_pct) * fraction, 2), "time_at_stake_basis": basis}


def stake(finding: Finding) -> float:
    value = finding.evidence.get("time_at_stake_pct")
    return float(value) if isinstance(value, (int, float)) else 0.0


def fill(finding: Finding, report: Report) -> Finding:
    """Give a finding from a rule that does not estimate its time at stake a default one."""
    if "time_at_stake_pct" in finding.evidence:
        return finding
    share = finding.evidence.get("share_pct")
    if finding.layer in OPERATOR_LAYERS:
        finding.evidence.update(operator_stake(report, share))
    elif isinstance(share, (int, float)):
        finding.evidence.update(time_at_stake_pct=round(float(share), 2),
                                time_at_stake_basis=f"the {finding.layer or 'rule'}'s share")
    else:
        finding.evidence.update(time_at_stake_pct=None, time_at_stake_basis="unknown")
    return finding


def rank_key(f: Finding) -> tuple:
    return (f.severity == "low", -stake(f), SEVERITY_RANK.get(f.severity, 3))


def rank(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=rank_key)


def _same_time(a: Finding, b: Finding) -> bool:
    """Pieces about the same time: the whole line (either has no operator), or one operator at one shape."""
    if a.op is None or b.op is None:
        return True
    shapes_a, shapes_b = a.evidence.get("input_shapes"), b.evidence.get("input_shapes")
    return a.op == b.op and (shapes_a is None or shapes_b is None or shapes_a == shapes_b)


def dedup(findings: list[Finding]) -> list[Finding]:
    """Merge findings of two or more layers at the same location (see the module docstring)."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        if f.location:
            groups.setdefault(f.location, []).append(f)
    merged: dict[int, Finding] = {}  # id of the group's first finding -> the merged one
    dropped: set[int] = set()
    for group in groups.values():
        if len({f.layer for f in group}) < 2:
            continue
        primary = min(group, key=lambda f: (SYMPTOM_TIER.get(f.kind, 0), *rank_key(f)))
        others = [f for f in group if f is not primary]
        evidence = dict(primary.evidence)
        evidence["also"] = [{"kind": f.kind, "severity": f.severity, "layer": f.layer, "op": f.op,
                             "title": f.title, "suggestion": f.suggestion,
                             "evidence": {k: v for k, v in f.evidence.items() if k != "also"}}
                            for f in others]
        same = [f for f in group if _same_time(f, primary)]
        stakes = [f.evidence.get("time_at_stake_pct") for f in same
                  if isinstance(f.evidence.get("time_at_stake_pct"), (int, float))]
        if stakes and max(stakes) > stake(primary):
            best = max(same, key=stake)
            evidence["time_at_stake_pct"] = best.evidence["time_at_stake_pct"]
            evidence["time_at_stake_basis"] = f"{best.kind}: {best.evidence.get('time_at_stake_basis')}"
        worst = min(same, key=lambda f: SEVERITY_RANK.get(f.severity, 3))
        severity = worst.severity if SEVERITY_RANK.get(worst.severity, 3) < SEVERITY_RANK.get(primary.severity, 3) \
            else primary.severity
        if severity != primary.severity:  # say which piece made the line this severe
            evidence["severity_from"] = f"{worst.kind} ({worst.layer})"
        merged[id(group[0])] = dataclasses.replace(primary, severity=severity, evidence=evidence)
        dropped.update(id(f) for f in group)
    out = []
    for f in findings:
        if id(f) in merged:
            out.append(merged[id(f)])
        elif id(f) not in dropped:
            out.append(f)
    return out
