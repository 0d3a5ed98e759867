"""Pure views of report.sampled (diagnose attach PID) shared by the renderers (no py-spy, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.report.model import Report, Sampled

DISTORTION_POINTS = 10.0  # an operator's share, operator pass against sampling, differing by more is distorted
TOP_OPERATORS = 10
TOP_FUNCTIONS = 8
TOP_LIBRARIES = 6


def attached(report: Report) -> bool:
    return report.target.mode == "attach"


def outcome(report: Report) -> str:
    """The run's line for an attach report: what was sampled, for how long, and how it ended."""
    s = report.sampled
    pid = report.target.pid
    if s is None:
        return f"attached to process {pid}: nothing was sampled"
    procs = len(s.processes)
    head = (f"attached to process {pid} for {s.duration_s:.1f} s: {s.samples} busy thread samples at {s.rate_hz:g} Hz"
            + (f" in {procs} processes" if procs > 1 else ""))
    if report.run.interrupted:
        return head + "; interrupted: the report holds what was sampled before Ctrl-C or SIGTERM"
    if s.exited:
        return head + "; the process exited while sampled: the report holds what came before"
    return head


def lines(s: Sampled) -> list[str]:
    """The section's lines: operators by sampling, Python hotspots, time outside torch, steps."""
    out = []
    if s.steps is not None:
        st = s.steps
        out.append(f"steps: {st.steps} starts of {st.detail} ({st.detector}); median {1000 * st.median_s:.1f} ms "
                   f"between starts")
    if s.operators:
        out.append(f"operators by sampling ({s.operator_samples} samples inside an ATen operator, "
                   f"{100 * s.operator_samples / max(1, s.samples):.0f}% of the busy samples):")
        for o in s.operators[:TOP_OPERATORS]:
            where = f" at {o.source}" if o.source else ""
            lib = f" ({o.function} at {o.library_line})" if o.library_line and o.library_line != o.source else ""
            inside = f" in {o.modules.rsplit(' > ', 1)[-1]}" if o.modules else ""
            out.append(f"  {o.name} {o.share_pct:.1f}%{where}{inside}{lib}")
    if s.libraries:
        out.append("time outside torch, by library (share of the busy samples):")
        for lib in s.libraries[:TOP_LIBRARIES]:
            out.append(f"  {lib.library} {lib.share_pct:.1f}%" + (f" from {lib.source}" if lib.source else ""))
    if s.functions:
        out.append("Python hotspots (innermost Python frame; share of the busy samples, the part inside operators):")
        for f in s.functions[:TOP_FUNCTIONS]:
            out.append(f"  {f.function} at {f.location} ({f.kind}): {f.self_pct:.1f}% "
                       f"({f.in_operators_pct:.0f}% of it in operators)")
    if len(s.processes) > 1:
        out.append("processes: " + ", ".join(f"{p.pid} ({p.role}) {p.samples} samples" for p in s.processes[:8]))
    return out + [f"note: {n}" for n in s.notes]


@dataclass(frozen=True)
class SharePair:
    op: str
    traced_pct: float  # its rows' self_pct summed over shapes (operator pass); 0 when absent
    sampled_pct: float  # its share of the samples inside an operator (uninstrumented pass); 0 when absent
    distorted: bool  # they differ by more than DISTORTION_POINTS


def beside(report: Report, top: int = TOP_OPERATORS) -> list[SharePair]:
    """The operators with the largest share in either measure, each with both shares (derived, not stored:
    report.operators and report.sampled are the data); [] without both."""
    if report.sampled is None or not report.operators:
        return []
    traced: dict[str, float] = {}
    for row in report.operators:
        traced[row.name] = traced.get(row.name, 0.0) + row.self_pct
    sampled = {o.name: o.share_pct for o in report.sampled.operators}
    names = sorted(set(traced) | set(sampled), key=lambda n: -max(traced.get(n, 0.0), sampled.get(n, 0.0)))[:top]
    return [SharePair(n, traced.get(n, 0.0), sampled.get(n, 0.0),
                      abs(traced.get(n, 0.0) - sampled.get(n, 0.0)) > DISTORTION_POINTS) for n in names]


def beside_lines(report: Report) -> list[str]:
    rows = beside(report)
    if not rows:
        return []
    out = ["operator share: operator pass vs sampled uninstrumented pass (py-spy)"]
    for r in rows:
        flag = "  <- distorted by instrumentation" if r.distorted else ""
        out.append(f"  {r.op}: {r.traced_pct:.1f}% vs {r.sampled_pct:.1f}%{flag}")
    return out
