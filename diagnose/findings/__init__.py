"""Findings: rules that turn layer results into a short, ranked diagnosis.

A rule is a function `rule(report) -> list[Finding]` that reads only the
report (never a profiler), so it can be re-run on a loaded report.json.
Adding a rule = a function in the module of its layer + an entry in RULES.
Every finding carries the numbers that crossed its threshold in `evidence`.
"""

from __future__ import annotations

from diagnose.findings import efficiency, microbench, operators, python, threads
from diagnose.report.model import Finding, Report

RULES = [
    operators.hot_operator,
    operators.copy_overhead,
    operators.memory_churn,
    python.python_overhead,
    threads.oversubscription,
    threads.undersubscription,
    threads.external_contention,
    microbench.sequential_operator,
    efficiency.low_efficiency,
]

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


def derive(report: Report) -> list[Finding]:
    """All findings, most important first: severity, then share of time at stake."""
    out: list[Finding] = []
    for rule in RULES:
        out.extend(rule(report))
    out.sort(key=lambda f: (SEVERITY_RANK[f.severity], -float(f.evidence.get("share_pct") or 0.0)))
    return out
