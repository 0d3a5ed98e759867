"""PNG pictures drawn from the report (never from a profiler): threads.png.

matplotlib with the Agg backend (no display needed); each function returns
None when it drew the picture, else the reason it could not.
"""

from __future__ import annotations

from typing import Any

from diagnose.report.model import Report

MAX_PROCESSES_DRAWN = 6  # the rest are summed into "other processes"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(p: dict[str, Any]) -> str:
    role = (p.get("role") or "process").replace("_", " ")
    return f"{role} {p.get('pid')}"


def threads_png(report: Report, path: str) -> str | None:
    t = report.threads or {}
    timeline = t.get("timeline") or {}
    xs = timeline.get("t_s") or []
    if len(xs) < 2:
        return "the thread sampler took too few samples to draw a timeline"
    try:
        plt = _pyplot()
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); pip install matplotlib"
    usable = t.get("usable_cpus") or report.machine.usable_cpus
    info = {p.get("pid"): p for p in t.get("processes") or []}
    series = timeline.get("processes") or []
    series = sorted(series, key=lambda s: -sum(v or 0 for v in s.get("cpu_used") or []))
    drawn, rest = series[:MAX_PROCESSES_DRAWN], series[MAX_PROCESSES_DRAWN:]
    labels = [_label(info.get(s["pid"], {"pid": s["pid"]})) for s in drawn]

    def stack(key: str) -> list[list[float]]:
        rows = [[v or 0.0 for v in s.get(key) or [0.0] * len(xs)] for s in drawn]
        if rest:
            rows.append([sum((s.get(key) or [0.0] * len(xs))[i] or 0.0 for s in rest) for i in range(len(xs))])
        return rows

    if rest:
        labels.append(f"{len(rest)} other processes")
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, constrained_layout=True)
    top.stackplot(xs, stack("runnable"), labels=labels, step="pre", alpha=0.85)
    bottom.stackplot(xs, stack("cpu_used"), labels=labels, step="pre", alpha=0.85)
    busy = timeline.get("machine_busy_cpus")
    if busy and any(v is not None for v in busy):
        bottom.step(xs, [v if v is not None else float("nan") for v in busy], where="pre", color="black",
                    linewidth=1, linestyle=":", label="whole machine busy")
    for ax in (top, bottom):
        if usable:
            ax.axhline(usable, color="crimson", linewidth=1.5, linestyle="--", label=f"usable CPUs ({usable})")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    top.set_ylabel("runnable threads")
    bottom.set_ylabel("CPUs used")
    bottom.set_xlabel("seconds since the measured workload began")
    wait = t.get("runqueue_wait_share")
    title = f"Threads of {report.target.script}: mean runnable {t.get('mean_runnable') or 0:.2f} on {usable} usable CPUs"
    if wait is not None:
        title += f", run-queue wait {wait * 100:.0f}% of runnable time"
    top.set_title(title, fontsize=10)
    top.legend(loc="upper right", fontsize=8)
    bottom.legend(loc="upper right", fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
