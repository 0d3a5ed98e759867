"""Pure views of report.memory shared by the memory layer, its finding and the renderers (no torch, no I/O)."""

from __future__ import annotations

from diagnose.report.model import Memory

MIB = 1 << 20


def per_step(mem: Memory) -> tuple[float | None, str | None]:
    """(the growth per step that counts, its source): torch's live bytes where they grow through the window
    (exact: the bytes of the tensors kept), else the RSS's (which also holds the heap's fragmentation and
    memory outside torch); (None, None) when neither grows."""
    for g in (mem.allocator, mem.rss):
        if g is not None and g.continues and g.slope is not None:
            return g.slope.bytes_per_step, g.source
    return None, None


def projected_rate(mem: Memory) -> tuple[float | None, str | None]:
    """(the rate the projection uses, its source): the RSS's where it grows through the window (what the
    machine will have to give: under glibc a kept 1 MiB tensor costs 1-1.5 MiB of RSS), else torch's."""
    for g in (mem.rss, mem.allocator):
        if g is not None and g.continues and g.slope is not None:
            return g.slope.bytes_per_step, g.source
    return None, None


def mib(x: float | None) -> str:
    """Bytes as the report's prose writes them: '2.3 MiB', '-0.1 MiB', '1.2 GiB'."""
    if x is None:
        return "?"
    if abs(x) >= 1 << 30:
        return f"{x / (1 << 30):.2f} GiB"
    return f"{x / MIB:.2f} MiB" if abs(x) < 100 * MIB else f"{x / MIB:.0f} MiB"


def lines(mem: Memory) -> list[str]:
    """The section's lines for the terminal, Markdown and HTML: each reading's growth, where it leads, what the
    window left alive step after step, the peak."""
    out = []
    for g in (mem.allocator, mem.rss):
        if g is not None:
            what = ("torch's live bytes (operator pass)" if g.source == "allocator" else
                    f"RSS of the process tree (attached, read every {g.interval_s:g} s)" if g.interval_s else
                    "RSS (uninstrumented pass)")
            out.append(f"{what}: {g.verdict}")
    p = mem.projection
    rate, source = projected_rate(mem)
    if p is not None and rate is not None:
        if p.more_bytes is not None:
            text = (f"projection: {p.total_steps} steps in all ({p.basis}); by the last, {mib(p.more_bytes)} more "
                    f"than at step {p.step_at_window_end} at the {'RSS' if source == 'rss' else 'allocator'}'s rate")
        else:
            text = f"projection: the script's length is unknown ({p.basis})"
        if p.headroom_bytes is not None:
            text += f"; the process may still take {mib(p.headroom_bytes)}"
            if p.cgroup_limit_bytes is not None:
                text += f" (cgroup limit {mib(p.cgroup_limit_bytes)})"
        out.append(text)
    r = mem.retained
    if r is not None:
        growing = [g for g in r.groups if g.bytes_per_step > 0]
        for g in growing[:4]:
            if g.grown_buffer:
                how = "a buffer re-made bigger every step"
            elif g.held_by == "container":
                how = f"held by {g.holder or 'a container'}" + (f" (put there at {g.holder_line})" if g.holder_line else "")
                how += f", with its autograd graph ({g.grad_fn})" if g.grad_fn else ""
            elif g.held_by == "autograd graph":
                how = "saved for a backward that has not run, kept by an autograd graph" + (
                    f" ({g.holder} at {g.holder_line})" if g.holder and g.holder_line else "")
            else:
                how = "held by something diagnose could not name"
            inside = f" in module {g.module}" if g.module else ""
            out.append(f"kept {mib(g.bytes_per_step)}/step: {g.op or '?'}{inside} at {g.source or '?'}, {how}")
        if not growing and r.allocations:
            out.append(f"alive at the window's end: {r.allocations} allocations made in it, {mib(r.bytes)}; none kept "
                       "step after step")
    k = mem.peak
    if k is not None:
        parts = [f"{name} {mib(v)}" for name, v in (("parameters", k.parameters_bytes), ("gradients", k.gradients_bytes),
                                                  ("optimizer state", k.optimizer_state_bytes)) if v is not None]
        if k.window_peak_bytes is not None:
            saved = f"saved for backward {mib(k.saved_for_backward_bytes)}"
            if k.saved_by_module:
                saved += " (" + ", ".join(f"{m} {mib(b)}" for m, b in k.saved_by_module[:3]) + ")"
            parts += [saved, f"temporaries and outputs {mib(k.temporaries_bytes)}"]
        if parts:
            out.append("at the peak: " + ", ".join(parts))
    return out + [f"note: {n}" for n in mem.notes]
