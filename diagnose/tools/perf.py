"""Linux `perf stat`: can it count here, the command line, and its `-x,` CSV output.

Contract
- `unavailable()` is None when `perf stat` counts cycles and instructions on
  this machine, else the reason (perf missing, not permitted, or the events
  `<not supported>`: no PMU, e.g. a VM without PMU passthrough). It runs
  `perf stat -x, -e cycles,instructions true` once per process and keeps the
  answer (`functools.cache`), never at import.
- `stat_command(pid, out)`: `perf stat -x, -e EVENTS -p PID -o OUT`, which
  counts the process and the threads it creates until SIGINT.
- `parse_stat_csv(text)`: the documented `-x,` format (perf-stat(1), "CSV
  FORMAT"): counter value, unit, event name, run time, percentage of the run
  the counter was scheduled, then optional metric value and unit. Values may
  be `<not supported>` or `<not counted>`; event names may carry modifiers
  (`cycles:u` when perf fell back to user-space counting); comment lines
  (`#`) and blank lines are skipped. Commas inside fields are not quoted by
  perf, so the first five fields are read from the left and the metric unit
  is the rest.
- `metrics(events)`: CPI, IPC, miss rates, CPUs utilised, and whether
  counters were multiplexed (scheduled < 100% of the run: perf scaled them).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from typing import Any

EVENTS = ("cycles", "instructions", "cache-references", "cache-misses", "branches", "branch-misses",
          "task-clock", "context-switches", "cpu-migrations", "page-faults")
PROBE_EVENTS = ("cycles", "instructions")
NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"
PARANOID = "/proc/sys/kernel/perf_event_paranoid"


def parse_stat_csv(text: str) -> dict[str, dict[str, Any]]:
    """event name (modifiers stripped) -> {value, unit, supported, counted, running_pct, metric, metric_unit}."""
    events: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(",", 6)
        if len(fields) < 3:
            continue
        raw, unit, name = fields[0], fields[1], fields[2]
        if not name:  # an extra metric line with the earlier fields empty
            continue
        entry: dict[str, Any] = {"raw_name": name, "unit": unit or None, "value": None, "supported": True,
                                 "counted": True, "running_pct": None, "metric": None, "metric_unit": None}
        if raw == NOT_SUPPORTED:
            entry.update(supported=False, counted=False)
        elif raw == NOT_COUNTED:
            entry["counted"] = False
        else:
            entry["value"] = _number(raw)
        if len(fields) > 4:
            entry["running_pct"] = _number(fields[4])
        if len(fields) > 5 and fields[5]:
            entry["metric"] = _number(fields[5])
        if len(fields) > 6 and fields[6]:
            entry["metric_unit"] = fields[6].strip() or None
        events[name.split(":")[0]] = entry
    return events


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def metrics(events: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def val(name: str) -> float | None:
        e = events.get(name)
        return e["value"] if e and e["counted"] else None

    cycles, instructions = val("cycles"), val("instructions")
    out: dict[str, Any] = {
        "cycles": int(cycles) if cycles is not None else None,
        "instructions": int(instructions) if instructions is not None else None,
        "cpi": round(cycles / instructions, 3) if cycles and instructions else None,
        "ipc": round(instructions / cycles, 3) if cycles and instructions else None,
        "cache_miss_pct": _pct(val("cache-misses"), val("cache-references")),
        "branch_miss_pct": _pct(val("branch-misses"), val("branches")),
        "task_clock_ms": val("task-clock"),
        "cpus_utilized": (events.get("task-clock") or {}).get("metric"),
        "context_switches": _int(val("context-switches")),
        "cpu_migrations": _int(val("cpu-migrations")),
        "page_faults": _int(val("page-faults")),
        "not_supported": sorted(n for n, e in events.items() if not e["supported"]),
        "not_counted": sorted(n for n, e in events.items() if e["supported"] and not e["counted"]),
        "multiplexed": sorted(n for n, e in events.items()
                              if e["counted"] and e["running_pct"] is not None and e["running_pct"] < 99.5),
    }
    return out


def _pct(part: float | None, whole: float | None) -> float | None:
    return round(100.0 * part / whole, 2) if part is not None and whole else None


def _int(x: float | None) -> int | None:
    return int(x) if x is not None else None


def stat_command(pid: int, out_path: str, events: tuple[str, ...] = EVENTS, perf: str = "perf") -> list[str]:
    return [perf, "stat", "-x,", "-e", ",".join(events), "-p", str(pid), "-o", out_path]


def _paranoid() -> str | None:
    try:
        with open(PARANOID) as fh:
            return fh.read().strip()
    except OSError:
        return None


def diagnose_probe(returncode: int, stderr: str) -> str | None:
    """The reason perf cannot count cycles and instructions, from a probe's result (None: it can)."""
    events = parse_stat_csv(stderr)
    missing = [e for e in PROBE_EVENTS if e in events and not events[e]["supported"]]
    if missing:
        return (f"no hardware counters: perf stat prints <not supported> for {', '.join(missing)} "
                "(typically a VM without PMU passthrough)")
    if returncode != 0 or any(e not in events for e in PROBE_EVENTS):
        first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no output")
        paranoid = _paranoid()
        hint = f" (kernel.perf_event_paranoid is {paranoid})" if paranoid is not None else ""
        return f"perf stat could not count cycles and instructions{hint}: {first[:200]}"
    if any(not events[e]["counted"] for e in PROBE_EVENTS):
        return "perf stat printed <not counted> for cycles/instructions even on `true`: the PMU is busy or absent"
    return None


@functools.cache
def unavailable(perf: str = "perf") -> str | None:
    exe = shutil.which(perf)
    if exe is None:
        return "perf is not installed (apt-get install linux-perf, or linux-tools-$(uname -r))"
    try:
        proc = subprocess.run([exe, "stat", "-x,", "-e", ",".join(PROBE_EVENTS), "true"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"perf stat could not run: {exc}"
    return diagnose_probe(proc.returncode, proc.stderr)
