"""Intel VTune Profiler's command line: is it here, the collect/report commands, its CSV reports.

Contract
- `unavailable()`: None when `vtune` is on PATH, else the reason.
- `collect_command(analysis, result_dir, target_cmd, knobs)`:
  `vtune -collect ANALYSIS -result-dir DIR -quiet [-knob k=v ...] -- CMD...`
  for ANALYSES (hotspots, threading, uarch-exploration); DEFAULT_KNOBS are
  what an engineer would pick for a PyTorch CPU run (user-mode sampling for
  hotspots so it works without the sampling driver; memory bandwidth for
  uarch-exploration). The target command is diagnose's own runner
  (`python -m diagnose.runner SPEC`) whose recorder wraps the measured
  workload in `torch.autograd.profiler.emit_itt()`: every aten op becomes an
  ITT task in VTune's timeline and in `-group-by task` reports.
- `report_commands(result_dir, out_dir)`: the summary and hotspots reports
  as comma-separated CSV (`-format csv -csv-delimiter comma
  -report-output FILE`): summary, hotspots by function, hotspots by task.
- `parse_summary_csv(text)`: VTune's tabular summary, `Hierarchy Level,Metric
  Name,Metric Value` rows (a level-1 row belongs to the level-0 row above
  it); values may carry units (`1.857s`, `24.3%`), nested tables (extra
  columns) are kept as lists. `parse_summary_text(text)` reads the text
  summary that `vtune -collect` and `-report summary` print by default
  (`Name: value`, indentation for the hierarchy). Both give {path: value},
  the path joining the names with "/".
- `parse_table_csv(text)`: a grid report (hotspots by function, module or
  task) -> list of dicts, numbers converted, `CPU Time:Spin Time` style
  column names kept as VTune writes them.
- `summarize(summary, tasks)`: the numbers the report and findings use:
  elapsed and CPU time, effective/spin/overhead time, spin+overhead share,
  CPI rate, effective CPU utilisation, thread count, top ITT tasks (aten ops).
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import sys
from typing import Any

ANALYSES = ("hotspots", "threading", "uarch-exploration")
DEFAULT_KNOBS: dict[str, dict[str, str]] = {
    # user-mode sampling needs no kernel driver; 5 ms intervals suit runs of a few seconds
    "hotspots": {"sampling-mode": "sw", "sampling-interval": "5", "enable-stack-collection": "true"},
    "threading": {"sampling-and-waits": "sw"},
    "uarch-exploration": {"collect-memory-bandwidth": "true", "pmu-collection-mode": "summary"},
}
NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(s|ms|us|%|GB/sec)?\s*(?:\(.*\))?\s*$")


def unavailable(vtune: str = "vtune", short: bool = False) -> str | None:
    if shutil.which(vtune) is None:
        return "vtune is not on PATH" if short else (
            "vtune is not on PATH (Intel VTune Profiler, part of oneAPI: source "
            "/opt/intel/oneapi/vtune/latest/env/vars.sh)")
    return None


def collect_command(analysis: str, result_dir: str, target_cmd: list[str], knobs: dict[str, str] | None = None,
                    vtune: str = "vtune") -> list[str]:
    if analysis not in ANALYSES:
        raise ValueError(f"unknown VTune analysis {analysis!r}; one of {', '.join(ANALYSES)}")
    cmd = [vtune, "-collect", analysis, "-result-dir", result_dir, "-quiet"]
    for k, v in {**DEFAULT_KNOBS[analysis], **(knobs or {})}.items():
        cmd += ["-knob", f"{k}={v}"]
    return cmd + ["--", *target_cmd]


def report_commands(result_dir: str, out_dir: str, vtune: str = "vtune") -> dict[str, list[str]]:
    csv_opts = ["-format", "csv", "-csv-delimiter", "comma"]
    return {
        "summary": [vtune, "-report", "summary", "-result-dir", result_dir, *csv_opts,
                    "-report-output", f"{out_dir}/summary.csv"],
        "functions": [vtune, "-report", "hotspots", "-result-dir", result_dir, *csv_opts,
                      "-report-output", f"{out_dir}/hotspots.csv"],
        "tasks": [vtune, "-report", "hotspots", "-result-dir", result_dir, "-group-by", "task", *csv_opts,
                  "-report-output", f"{out_dir}/tasks.csv"],
    }


def value(text: str) -> Any:
    """'1.857s' -> 1.857, '24.3%' -> 24.3, '9' -> 9.0, anything else stays text ('' -> None)."""
    text = (text or "").strip()
    if not text:
        return None
    m = NUMBER.match(text)
    if not m:
        return text
    x = float(m.group(1))
    unit = m.group(2)
    if unit == "ms":
        x /= 1e3
    elif unit == "us":
        x /= 1e6
    return x


def parse_summary_csv(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    stack: list[str] = []
    rows = list(csv.reader(io.StringIO(text.lstrip("\ufeff"))))
    if not rows:
        return out
    header = [h.strip() for h in rows[0]]
    if header[:3] != ["Hierarchy Level", "Metric Name", "Metric Value"]:
        raise ValueError(f"not a VTune summary CSV (header {','.join(header[:3])!r})")
    for row in rows[1:]:
        if len(row) < 2 or not row[0].strip().isdigit():
            continue
        level, name = int(row[0]), row[1].strip()
        del stack[level:]
        stack.append(name)
        path = "/".join(stack)
        rest = row[2:]
        out[path] = value(rest[0]) if len(rest) <= 1 else [value(x) for x in rest]
    return out


def parse_summary_text(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("vtune:", "|", "-")) or ":" not in line:
            continue
        indent = len(line) - len(line.lstrip(" "))
        name, _, rest = line.strip().partition(":")
        if not rest.strip() and name in ("Top Hotspots", "Top Tasks"):
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, name.strip()))
        out["/".join(n for _, n in stack)] = value(rest)
    return out


def parse_table_csv(text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    return [{k.strip(): value(v) if isinstance(v, str) else v for k, v in row.items() if k} for row in reader]


def metric(summary: dict[str, Any], name: str) -> Any:
    """A metric by its own name, at whatever depth this VTune version put it (the shallowest wins)."""
    hits = [(path.count("/"), v) for path, v in summary.items() if path.split("/")[-1] == name]
    return min(hits, key=lambda h: h[0])[1] if hits else None


def summarize(summary: dict[str, Any], tasks: list[dict[str, Any]] | None = None, top: int = 10) -> dict[str, Any]:
    cpu, spin, overhead = metric(summary, "CPU Time"), metric(summary, "Spin Time"), metric(summary, "Overhead Time")
    util = metric(summary, "Effective CPU Utilization")
    out: dict[str, Any] = {
        "source": "vtune",
        "elapsed_s": _num(metric(summary, "Elapsed Time")),
        "cpu_time_s": _num(cpu),
        "effective_time_s": _num(metric(summary, "Effective Time")),
        "spin_time_s": _num(spin),
        "overhead_time_s": _num(overhead),
        "spin_overhead_pct": (round(100.0 * ((_num(spin) or 0) + (_num(overhead) or 0)) / _num(cpu), 2)
                              if _num(cpu) else None),
        "cpi": _num(metric(summary, "CPI Rate")),
        "effective_cpu_utilization_pct": _num(util),
        "total_thread_count": _num(metric(summary, "Total Thread Count")),
        "paused_time_s": _num(metric(summary, "Paused Time")),
    }
    if tasks:
        key = "Task Type" if "Task Type" in tasks[0] else next(iter(tasks[0]))
        ranked = sorted((t for t in tasks if isinstance(t.get("CPU Time"), float)), key=lambda t: -t["CPU Time"])
        out["top_tasks"] = [{"task": t.get(key), "cpu_time_s": t.get("CPU Time"),
                             "spin_time_s": t.get("CPU Time:Spin Time"),
                             "overhead_time_s": t.get("CPU Time:Overhead Time")} for t in ranked[:top]]
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def summarize_dir(out_dir: str) -> dict[str, Any]:
    """summary.csv (+ tasks.csv when present) written by report_commands / vtune_scripts/report.sh."""
    import os

    with open(os.path.join(out_dir, "summary.csv"), encoding="utf-8", errors="replace") as fh:
        summary = parse_summary_csv(fh.read())
    tasks = None
    if os.path.exists(os.path.join(out_dir, "tasks.csv")):
        with open(os.path.join(out_dir, "tasks.csv"), encoding="utf-8", errors="replace") as fh:
            tasks = parse_table_csv(fh.read())
    return summarize(summary, tasks)


def main(argv: list[str]) -> int:
    import json

    if len(argv) != 1:
        print("usage: python -m diagnose.tools.vtune CSV_DIR   (the directory vtune_scripts/report.sh wrote)",
              file=sys.stderr)
        return 2
    json.dump(summarize_dir(argv[0]), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
