"""Pure views of report.sampled (diagnose attach PID) shared by the renderers (no py-spy, no I/O)."""

from __future__ import annotations

from diagnose.report.model import Report, Sampled

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
            out.append(f"  {o.name} {o.share_pct:.1f}%{where}{lib}")
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
