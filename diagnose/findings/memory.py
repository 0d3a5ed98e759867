"""Rules on report.memory (diagnose/layers/memory/): memory_growth.

- memory_growth: memory grows through the window, not only at its start
  (layers/memory/growth.py: the slope's 95% interval above 64 KiB/step, and
  the later half growing at least half as fast, its interval above 0). The
  growth per step is torch's live bytes' (exact: the bytes of the tensors
  kept) where the operator pass recorded them, else the RSS's. RSS growth
  that continues raises it where the operator pass saw torch's live bytes
  stay flat too: the heap grows, not tensors torch keeps, and the title says
  so, naming what the step keeps from one step to the next if anything. It
  did not until 2026-11-29 ("the heap, not tensors"), and a GPT-2 training
  loop that appends `out.loss` to a list (not `.item()`) was reported
  healthy while its RSS grew 50 MiB a step, projected at 73 GiB by its last
  step against 21 GiB free: run plainly it held 7.2 GiB at step 200 and
  0.9 GiB without the append. The clean loops that rule was for
  (examples/mlp.py's heap, 0.1-0.6 MiB a step) sit under the RSS's floor,
  and a heap that settles is warm-up (the later half).
  Location: the line that keeps the memory, from the site that accounts for
  most growth per step (memory.retained): the line that puts a tensor into
  its container (the append, the assignment, the cat) when it was found,
  else the line that made the allocations.
  Severity from the projection (the RSS rate, else the allocator's, times
  the steps left) against the headroom (MemAvailable, or the cgroup limit
  less its use): `high` when it reaches the headroom (the run will run out),
  `medium` from a quarter of it, else `low`; `medium` when the script's
  length is unknown (growth without a known end). Memory is not time: no
  time at stake is claimed, so the stake does not change the severity;
  except where the run is expected to run out (`high`): it does not finish,
  so all its time is at stake, as a hang's (findings/hangs.py), and it ranks
  first. Without that the GPT-2 loop above listed its high memory_growth
  after two low findings with a few percent of the step at stake.
"""

from __future__ import annotations

from diagnose.report.memory import mib, per_step, projected_rate
from diagnose.report.model import Finding, Memory, Report, RetainedGroup, Stake

HIGH_SHARE = 1.0  # projected growth / headroom from which the run is expected to run out of memory
MEDIUM_SHARE = 0.25

GRAPH_FIX = ("Store what you need without its graph: `.detach()` on a tensor you keep (`outputs.append(out.detach())`), "
             "`.item()` on a scalar (`losses.append(loss.item())`, `total += loss.item()`), or run a loop with no "
             "backward under torch.inference_mode() (no graph is built at all).")
CONTAINER_FIX = ("Bound what you keep: a cache of fixed size (functools.lru_cache(maxsize=N), an OrderedDict "
                 "evicting its oldest entry, collections.deque(maxlen=N)), or keep a summary (`.item()`, a running "
                 "mean) instead of the tensors.")
BUFFER_FIX = ("torch.cat([buf, x]) copies the whole buffer every step and keeps it growing: preallocate it once "
              "(`buf = torch.empty(total, ...)`, then `buf[i:i + n] = x`), or collect the pieces in a list and "
              "torch.cat once at the end; bound it if it need not hold every step.")


def _kept(mem: Memory) -> list[RetainedGroup]:
    """The retained sites kept at one line (the container's, else the allocating one) that account for most
    growth per step, most first; [] when no site grows."""
    by_line: dict[str | None, list[RetainedGroup]] = {}
    for g in (mem.retained.groups if mem.retained else []):
        if g.bytes_per_step > 0:
            by_line.setdefault(g.holder_line or g.source, []).append(g)
    if not by_line:
        return []
    best = max(by_line.values(), key=lambda gs: sum(g.bytes_per_step for g in gs))
    return sorted(best, key=lambda g: (g.held_by != "container", -g.bytes_per_step))


def _fix(groups: list[RetainedGroup]) -> str:
    if not groups:
        return ("Find what keeps tensors from one step to the next: a list or dict of outputs or losses, a "
                "buffer grown with torch.cat. " + GRAPH_FIX)
    if any(g.grown_buffer for g in groups):
        return BUFFER_FIX
    if any(g.held_by == "autograd graph" or g.grad_fn for g in groups):
        return GRAPH_FIX
    return CONTAINER_FIX


def _held(groups: list[RetainedGroup]) -> str:
    """What keeps tensors from one step to the next, without their bytes (heap growth: they are not the bytes)."""
    g = next((x for x in groups if x.held_by == "container"), groups[0])
    fn = next((x.grad_fn for x in groups if x.grad_fn), None)
    who = f"{g.holder} (at {g.holder_line})" if g.holder and g.holder_line else (g.holder or "something")
    return f"{who} keeps tensors made at {g.source or '?'}" + (f" with their autograd graph ({fn})" if fn else "")


def _what(groups: list[RetainedGroup]) -> str:
    buffer = next((g for g in groups if g.grown_buffer), None)
    if buffer is not None:
        return f"a buffer re-made bigger every step by {buffer.op or 'an operator'} at {buffer.source or '?'}"
    held = [g for g in groups if g.held_by == "container"]
    graph = [g for g in groups if g.held_by == "autograd graph"]
    total = mib(sum(g.bytes_per_step for g in groups))
    modules = sorted({x.module for x in graph if x.module is not None})
    inside = f" in module{'s' if len(modules) > 1 else ''} {', '.join(modules[:3])}" if modules else ""
    saved = f"{mib(sum(x.bytes_per_step for x in graph))} of it saved for a backward that never runs{inside}"
    if held:
        g = held[0]
        fn = next((x.grad_fn for x in held if x.grad_fn), None)
        text = f"{g.holder or 'a container'} keeps tensors made at {g.source or '?'}"
        if fn:
            return text + f" with their autograd graph ({fn}): {total} a step, " + (saved if graph else "")
        return text + f": {total} a step"
    if graph and graph[0].holder:  # the graph's root is a variable: `total += loss` without .item()
        return (f"tensors an autograd graph saved for a backward that never runs{inside}, {total} a step, the graph "
                f"kept alive by {graph[0].holder}")
    if graph:
        return (f"tensors an autograd graph saved for a backward that never runs{inside}, {total} a step: something "
                "keeps the graph alive (an output with a grad_fn, a loss in a list, `total += loss`)")
    g = groups[0]
    return f"{total} a step of tensors made by {g.op or '?'} at {g.source or '?'}"


def memory_growth(report: Report) -> list[Finding]:
    mem = report.memory
    if mem is None:
        return []
    rate, source = per_step(mem)
    if rate is None:
        return []
    # the heap grows, not tensors torch keeps (module docstring): said, not left out
    heap = source == "rss" and mem.allocator is not None and mem.allocator.slope is not None \
        and not mem.allocator.continues
    g = mem.allocator if source == "allocator" else mem.rss
    s = g.slope
    p = mem.projection
    more, room = (p.more_bytes, p.headroom_bytes) if p is not None else (None, None)
    if more is not None and room:
        share = more / room
        severity = "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"
        severity_why = f"the projected growth is {share:.0%} of the memory the process may still take"
    elif more is not None:
        severity, severity_why = "medium", "the memory the process may still take is not known"
    else:
        severity, severity_why = "medium", "the script's length is unknown: growth without a known end"
    kept = _kept(mem)
    top = kept[0] if kept else None
    location = (top.holder_line or top.source) if top else None
    what = "torch's live bytes" if source == "allocator" else "the process's RSS"
    if g.interval_s:  # diagnose attach: RSS readings over time, not per step
        def rate(x: float) -> str:
            return mib(x / g.interval_s)
        title = f"Memory grows {rate(s.bytes_per_step)} a second while sampled (the process tree's RSS"
        title += f", 95% interval {rate(s.ci_low)} to {rate(s.ci_high)})"
    else:
        title = f"Memory grows {mib(s.bytes_per_step)} a step through the window ({what}"
        title += f", 95% interval {mib(s.ci_low)} to {mib(s.ci_high)})"
    if heap:
        title += "; torch's live bytes stayed flat: the heap grows, not tensors torch keeps"
        if kept:
            title += f"; kept from step to step: {_held(kept)}"
    elif kept:
        title += f": {_what(kept)}"
    if more == 0 and p.total_steps:  # the window ran to the script's last step
        title += (f"; {mib(s.bytes_per_step * p.total_steps)} over the run's {p.total_steps} steps at this rate "
                  "(the window ran to its end)")
    elif more is not None:
        title += f"; by step {p.total_steps}, {mib(more)} more"
        if room is not None:
            title += f" of {mib(room)} the process may still take"
    rss_rate, rss_source = projected_rate(mem)
    evidence = {
        "growth_per_step_bytes": s.bytes_per_step, "ci_low_bytes": s.ci_low, "ci_high_bytes": s.ci_high,
        "late_half_per_step_bytes": s.late_bytes_per_step, "window_steps": s.steps, "source": source,
        "rss_per_step_bytes": mem.rss.slope.bytes_per_step if mem.rss and mem.rss.slope else None,
        "projection_rate_source": rss_source,
        "total_steps": p.total_steps if p else None, "total_steps_basis": p.basis if p else None,
        "projected_more_bytes": more, "headroom_bytes": room, "projected_share_of_headroom": severity_why,
        "torch_bytes_flat": heap,
    }
    if g.interval_s:  # attach: a "step" of the slope is one reading interval
        evidence["reading_interval_s"] = g.interval_s
    if top is not None:
        evidence.update({"held_by": top.held_by, "holder": top.holder, "made_at": top.source, "op": top.op,
                         "made_in_module": top.module, "kept_bytes_per_step": round(sum(g.bytes_per_step for g in kept), 1),
                         "sites": [{"op": g.op, "made_in_module": g.module, "held_by": g.held_by,
                                    "bytes_per_step": g.bytes_per_step} for g in kept[:5]],
                         "grown_buffer": top.grown_buffer, "grad_fn": top.grad_fn})
    return [Finding(
        kind="memory_growth", severity=severity, title=title, op=None, location=location, evidence=evidence,
        suggestion=_fix(kept), layer="memory",
        stake=Stake(pct=100.0, basis=("the projection reaches the memory the process may still take: the run is "
                                      "expected to run out before its last step, and a run that does not finish "
                                      "loses all its time, as a hang's does"))
        if severity == "high" else
        Stake(pct=None, basis="memory, not time: severity comes from the projection against the memory "
                              "the process may still take"))]
