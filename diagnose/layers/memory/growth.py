"""Memory layer: whether per-step memory readings grow, by how much, and where that leads (pure functions).

The growth per step is the slope of an ordinary least-squares line through
the readings (the window's start, then each step's end), with a 95% interval
from the slope's standard error: slope +- t(0.975, n-2) x SE, SE =
sqrt(residual variance / sum((x - mean x)^2)). Not the last reading against
the first: one late allocation (or one freed cache) would decide it.

Warm-up is not growth. Growth *continues* only when
- the interval's lower end is above MIN_GROWTH_BYTES_PER_STEP (so above 0),
- and the later half of the window grows too: its own slope's interval
  above 0 and reaching trends.LATE_MIN_SHARE (half) of the whole window's,
  as step_drift judges its later half (trends.rises).
Optimizer state made at the first step, caches filling, a heap settling
give a slope whose later half is flat; a list that keeps a tensor every
step gives the same slope in both halves. The later half is judged on its
interval, not its point: attached to examples/keep_graph.py (2 MiB a step)
beside the suite's other worker, a run read 95 MiB/s over 4.75 s and
44.65 MiB/s [38.5 to 50.8] in the later half, its pace slowed by the
neighbour, and its point, under half of 95, called a list that grows by
the step warm-up (a fresh clone, 2026-11-28).
"""

from __future__ import annotations

from diagnose.report.memory import MIB, mib
from diagnose.report.model import MemoryGrowth, MemoryProjection, MemorySlope
from diagnose.trends import LATE_MIN_SHARE, line

# below these per step nothing is called growth: torch's live bytes are exact, so 64 KiB; the RSS also moves with
# glibc's heap (a clean MLP training loop, examples/mlp.py: 0.1-0.6 MiB/step over 20 steps while torch's live
# bytes stayed flat), so 512 KiB, half the 1 MiB/step the layer must detect
MIN_GROWTH_BYTES_PER_STEP = {"allocator": 64 * 1024, "rss": 512 * 1024}
# attach mode reads the RSS over time: the same 512 KiB floor, per second (a leak of 1 MiB a second is found)
MIN_GROWTH_BYTES_PER_S = 512 * 1024
# ... over at least this long: a process's heap can climb by a few MiB a second for seconds at a time (examples/
# mlp.py's RSS, read every 0.25 s after it entered its loop: ~7 MiB/s for a second, ~1 MiB/s for 8 more, then flat;
# 2 s of readings in that stretch passed every other test)
MIN_GROWTH_SPAN_S = 4.0
MIN_READINGS = 4  # a line through fewer readings says nothing

def slope_of(readings: list[int]) -> MemorySlope | None:
    whole = line([float(r) for r in readings])
    if whole is None:
        return None
    out = MemorySlope(bytes_per_step=round(whole[0], 1), ci_low=round(whole[1], 1), ci_high=round(whole[2], 1),
                      steps=len(readings) - 1)
    late = line([float(r) for r in readings[len(readings) // 2:]]) if len(readings) >= 2 * MIN_READINGS else None
    if late is not None:
        out.late_bytes_per_step, out.late_ci_low, out.late_ci_high = (round(x, 1) for x in late)
    return out


def growth(source: str, readings: list[int], interval_s: float | None = None) -> MemoryGrowth:
    """The readings, their slope and whether growth continues through the window (module docstring).
    `interval_s`: the readings are that far apart in time (diagnose attach), not step boundaries: the slope
    is per reading and the floor MIN_GROWTH_BYTES_PER_S x interval_s."""
    out = MemoryGrowth(source=source, readings_bytes=list(readings), interval_s=interval_s)
    if len(readings) < MIN_READINGS:
        out.verdict = f"{len(readings)} readings: too few for a slope (at least {MIN_READINGS})"
        return out
    s = out.slope = slope_of(readings)
    if interval_s:
        def per(x: float | None) -> str:
            return mib(x / interval_s if x is not None else None)
        rate = (f"{per(s.bytes_per_step)}/s [{per(s.ci_low)} to {per(s.ci_high)}] over {s.steps * interval_s:g} s "
                f"({s.steps + 1} readings)")
        floor = MIN_GROWTH_BYTES_PER_S * interval_s
        floor_text = f"{MIN_GROWTH_BYTES_PER_S // 1024} KiB/s"
        unit = "s"
    else:
        def per(x: float | None) -> str:
            return mib(x)
        rate = f"{mib(s.bytes_per_step)}/step [{mib(s.ci_low)} to {mib(s.ci_high)}] over {s.steps} steps"
        floor = MIN_GROWTH_BYTES_PER_STEP.get(source, MIN_GROWTH_BYTES_PER_STEP["rss"])
        floor_text = f"{floor // 1024} KiB/step"
        unit = "step"
    if s.ci_low < floor:
        out.verdict = (f"no growth: {rate}, the interval's low end under {floor_text}"
                       if s.ci_high > 0 else f"no growth: {rate}")
        return out
    if interval_s and s.steps * interval_s < MIN_GROWTH_SPAN_S:
        out.verdict = (f"grows {rate}, but over less than {MIN_GROWTH_SPAN_S:g} s: too short to tell growth that "
                       "continues from a heap settling (a longer --duration tells)")
        return out
    if s.late_bytes_per_step is None:
        out.verdict = f"grows {rate}, but too few {'readings' if interval_s else 'steps'} to tell growth that continues from warm-up"
        return out
    late = f"{per(s.late_bytes_per_step)}/{unit} [{per(s.late_ci_low)} to {per(s.late_ci_high)}] in the later half"
    if s.late_ci_high < LATE_MIN_SHARE * s.bytes_per_step or s.late_ci_low <= 0:
        out.verdict = f"warm-up, not growth: {rate}, but {late}"
        return out
    out.continues = True
    out.verdict = f"grows {rate}; {late}: it continues through the window"
    return out


def projection(per_step: float | None, readings) -> MemoryProjection:
    """Where `per_step` bytes a step lead by the script's end (protocol.MemoryReadings `readings`)."""
    out = MemoryProjection()
    if readings is None:
        out.basis = "not read (the uninstrumented pass did not reach the window's end inside the script)"
        return out
    out.total_steps, out.basis = readings.total_steps, readings.total_basis
    out.step_at_window_end = readings.step_at_window_end
    out.rss_bytes, out.mem_available_bytes = readings.rss_bytes, readings.mem_available_bytes
    out.cgroup_limit_bytes, out.cgroup_used_bytes = readings.cgroup_limit_bytes, readings.cgroup_used_bytes
    room = [x for x in (readings.mem_available_bytes,
                        (readings.cgroup_limit_bytes - readings.cgroup_used_bytes)
                        if readings.cgroup_limit_bytes is not None and readings.cgroup_used_bytes is not None else None)
            if x is not None]
    out.headroom_bytes = max(0, min(room)) if room else None
    if per_step is not None and out.total_steps is not None and out.step_at_window_end is not None:
        out.more_bytes = round(per_step * max(0, out.total_steps - out.step_at_window_end), 1)
    return out
