"""Memory layer: where memory goes, whether it grows, and what keeps it alive (report.memory).

It has no pass of its own: it reads what the other passes carry, so it costs
no extra run of the target.
- The uninstrumented pass (readings.py, child side): the RSS at every step
  boundary of the window (StepsSeen.rss_bytes), and at the window's end the
  memory there is (MemAvailable, the cgroup's limit), the parameter,
  gradient and optimizer-state bytes, and the script's length from its loops
  (PassResult.memory). `from_baseline` turns them into `memory.rss` (the
  slope per step, growth.py), `memory.projection` and the peak's first parts.
- The operator pass (retained.py, child side, on its profile_memory events):
  torch's live bytes at each step boundary, what the window left alive by
  site and who holds it, the peak's allocations. `from_operators` turns them
  into `memory.allocator`, `memory.retained` and the rest of `memory.peak`.
- findings/memory.py judges them (memory_growth); render/ draws memory.png
  and the sections.
"""

from __future__ import annotations

from typing import Any

from diagnose.layers.memory.growth import growth, projection
from diagnose.report import io as report_io
from diagnose.report.memory import mib, per_step, projected_rate  # noqa: F401 - the layer's views, re-exported
from diagnose.report.model import Memory, MemoryAtPeak, Report, Retained


def from_baseline(report: Report, result) -> None:
    """The uninstrumented pass's readings (a protocol.PassResult) into report.memory."""
    seen = result.steps if result is not None else None
    if seen is None or not seen.window_began or not seen.rss_bytes:
        return
    mem = report.memory = report.memory or Memory()
    mem.rss = growth("rss", list(seen.rss_bytes))
    if report.distributed is not None:  # distributed/collect.py merges the ranks' results from the first one's
        mem.notes.append("a torchrun job: the RSS and readings are the lowest rank's that wrote a result (each rank "
                         "is a process of its own); torch's allocations per rank are not read")
    readings = result.memory
    mem.projection = projection(None, readings)
    if readings is not None:
        mem.notes += [f"could not read: {e}" for e in readings.errors]
        peak = mem.peak = mem.peak or MemoryAtPeak()
        peak.parameters_bytes, peak.gradients_bytes = readings.parameters_bytes, readings.gradients_bytes
        peak.optimizer_state_bytes = readings.optimizer_state_bytes
        peak.scope = _scope(peak)
    _project(mem)


def from_operators(report: Report, raw: dict[str, Any]) -> None:
    """The operator pass's memory profile (raw["memory_profile"], retained.py) into report.memory."""
    data = raw.get("memory_profile")
    if data is None:
        return  # the layer was off (Config.memory), or a result from before it
    if "skipped" in data:  # said where the section exists; it is not made for this alone
        if report.memory is not None:
            report.memory.notes.append(data["skipped"])
        return
    if not data.get("marks") and report.memory is None:
        return  # no steps (or --full-run without a window): no per-step memory to report, as the RSS has none
    mem = report.memory = report.memory or Memory()
    if "error" in data:
        mem.notes.append(f"the operator pass's memory profile could not be read: {data['error']}")
        return
    if data.get("marks"):
        mem.allocator = growth("allocator", list(data.get("live_bytes") or []))
    else:
        mem.notes.append("no step boundary was marked in the operator pass's profile (no steps, or --full-run): "
                         "torch's live bytes per step are not known")
    mem.retained = report_io.typed(Retained, data.get("retained") or {})
    if data.get("analysis_s") is not None:
        mem.retained.scope += (f"; read in {data['analysis_s']:.2f} s after the window, from "
                               f"{data.get('allocation_events', 0)} allocation events")
    peak = data.get("peak") or {}
    if peak:
        p = mem.peak = mem.peak or MemoryAtPeak()
        p.saved_for_backward_bytes = peak.get("saved_for_backward_bytes")
        p.temporaries_bytes = peak.get("temporaries_bytes")
        p.window_peak_bytes = peak.get("window_peak_bytes")
        p.saved_by_module = [list(x) for x in peak.get("saved_by_module") or []]
        p.scope = _scope(p)
    _project(mem)


def _project(mem: Memory) -> None:
    p = mem.projection
    rate, source = projected_rate(mem)
    if p is None:
        return
    p.more_bytes = None
    if rate is not None and p.total_steps is not None and p.step_at_window_end is not None:
        p.more_bytes = round(rate * max(0, p.total_steps - p.step_at_window_end), 1)


def _scope(p: MemoryAtPeak) -> str:
    parts = []
    if p.parameters_bytes is not None:
        parts.append("parameters, gradients and optimizer state: the tensors themselves at the uninstrumented "
                     "pass's window end (the outermost module's parameters and buffers, their .grad, the state of "
                     "each optimizer whose step() ran)")
    if p.window_peak_bytes is not None:
        parts.append("saved for backward and temporaries: the allocations made in the operator pass's window "
                     "alive when its live bytes peaked, split by whether a backward operator freed them")
    return "; ".join(parts)
