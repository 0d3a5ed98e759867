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
