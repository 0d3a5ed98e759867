"""Findings: rules that turn layer results into a short, ranked diagnosis.

A rule is a function `rule(report) -> list[Finding]` that reads only the
report (never a profiler), so it can be re-run on a loaded report.json.
Adding a rule = a function in the module of its layer + an entry in RULES.
Every finding carries the numbers that crossed its threshold in `evidence`,
and in typed fields what it is ranked by: its `stake` (the share of wall time
a fix could win, with its confidence), `doubts` and `observation` (stake.py
says how they are estimated, how they bound the severity, and how findings
are ranked by them and merged across layers).
What to try for an operator comes from suggestions.py, one table per
operator class. A finding whose measurement its rule doubts (`doubts`) is not
confirmed: `judge` lists it apart, below the findings, and never ranks or
merges it among them; verdict.py says whether the model is healthy.
"""

from __future__ import annotations

from diagnose.findings import (
    budget,
    doctor,
    dtypes,
    efficiency,
    hangs,
    memory,
    microbench,
    operators,
    place,
    python,
    sampled,
    stake,
    steps,
    threads,
    trends,
    verdict,
    whatif,
)
from diagnose.report.model import Finding, Report

RULES = [
    hangs.hang,
    operators.hot_operator,
    operators.copy_overhead,
    operators.memory_churn,
    operators.autograd_in_inference,
    dtypes.dtype,
    python.python_overhead,
    budget.outside_torch,
    threads.oversubscription,
    threads.undersubscription,
    threads.external_contention,
    microbench.sequential_operator,
    efficiency.low_efficiency,
    steps.data_wait,
    doctor.environment,
    whatif.what_if,
    memory.memory_growth,
    trends.input_growth,
    trends.step_drift,
    sampled.instrumentation_distortion,
]

SEVERITY_RANK = stake.SEVERITY_RANK


def settled(report: Report) -> list[Finding]:
    """Every rule's findings, placed, bounded by the step budget and settled (stake.py), in rule order."""
    out: list[Finding] = []
    for rule in RULES:
        out.extend(stake.fill(stake.bound(place.annotate(f, report), report.step_budget)) for f in rule(report))
    return operators.fold_casts(out, report)


def derive(report: Report) -> list[Finding]:
    """The confirmed findings, most important first (by time at stake x confidence, observations last),
    severities bounded by the stake; one finding per line of code. Doubted ones
    are left out (judge lists them as not confirmed)."""
    return _ranked(verdict.split(settled(report))[0])


def _ranked(found: list[Finding]) -> list[Finding]:
    return stake.rank(stake.dedup(stake.rank(found)))


def judge(report: Report) -> None:
    """Judge a measured report (its step budget set): its findings, what is not confirmed, and the verdict."""
    confirmed, doubted = verdict.split(settled(report))
    report.findings = _ranked(confirmed)
    report.not_confirmed = verdict.not_confirmed(report, stake.rank(doubted))
    report.verdict = verdict.of(report)
