"""The thread sweep: measure the workload at several thread settings, recommend one.

A recommendation needs a measurement (docs/measurements.md): each point is a process
of its own, forked from the fork server, that sets OMP_NUM_THREADS /
MKL_NUM_THREADS and torch.set_num_threads to the point's value before the
script runs (OpenMP reads its variables when its pool starts: the server
never started one), running the uninstrumented workload, and optionally
every DataLoader pinned to a worker count. Points are
run in interleaved rounds (1,2,8,1,2,8,...) so drift on a shared machine
hits them alike. Throughput is iterations per second in function mode (the
median iteration) and runs per second in script mode (the wall time).

The recommendation is the smallest setting whose median throughput is
within `TOLERANCE` of the best: fewer threads leave CPUs to everything else
at no measurable cost. A setting above the usable CPUs oversubscribes the
machine by construction, so it must earn its place: it counts as the best
only when it is clearly faster than the best setting within the usable CPUs,
by more than `TOLERANCE` and (with two runs or more per point) in every run.
On a 2-vCPU VM, 8 and 2 threads of the same matmul loop measured alike with
±20% run-to-run noise (8 ahead in some runs, 2 in others); a lead that is
not clear is reported beside the recommendation (`passed_over`) instead.

Pure logic: `run_point(threads, workers) -> seconds or None` is injected,
so the choice of points and the recommendation are tested exactly.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from diagnose.config import SweepOptions
from diagnose.layers.base import DerivedContext, Layer
from diagnose.protocol import Overrides
from diagnose.report import io as report_io
from diagnose.report.model import LayerStatus, Report, Sweep, Threads

TOLERANCE = 0.05



def thread_values(usable_cpus: int, configured: int | None) -> list[int]:
    """1, 2, 4, ... up to the usable CPUs, the usable count itself, and the configured value."""
    values = {usable_cpus}
    n = 1
    while n < usable_cpus:
        values.add(n)
        n *= 2
    if configured:
        values.add(configured)
    return sorted(values)


def worker_values(usable_cpus: int, configured: int | None) -> list[int]:
    values = set(range(0, usable_cpus + 1))
    if configured is not None:
        values.add(configured)
    return sorted(values)


def measure(points: list[dict[str, Any]], run_point: Callable[[int, int | None], float | None],
            repeats: int, on_point: Callable[[int, int, dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run every point `repeats` times, interleaved; fill each point's seconds per unit of work."""
    for p in points:
        p["runs_s"] = []
        p["failed_runs"] = 0
    total = len(points) * repeats
    done = 0
    for _ in range(repeats):
        for p in points:
            done += 1
            if on_point:
                on_point(done, total, p)
            seconds = run_point(p["intra_op_threads"], p.get("dataloader_workers"))
            if seconds is None or seconds <= 0:
                p["failed_runs"] += 1
            else:
                p["runs_s"].append(seconds)
    for p in points:
        runs = p["runs_s"]
        p["median_s"] = statistics.median(runs) if runs else None
        p["throughput_per_s"] = 1.0 / p["median_s"] if runs else None
        p["spread_pct"] = (round(100 * (max(runs) - min(runs)) / p["median_s"], 1) if len(runs) > 1 else None)
    return points


def _clearly_faster(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """a beats b by more than TOLERANCE, and in every run when both points have two or more."""
    if a["throughput_per_s"] <= (1 + TOLERANCE) * b["throughput_per_s"]:
        return False
    ra, rb = a.get("runs_s") or [], b.get("runs_s") or []
    return len(ra) < 2 or len(rb) < 2 or max(ra) < min(rb)


def recommend(points: list[dict[str, Any]], key: str, budget: int | None = None) -> dict[str, Any] | None:
    """Smallest `key` setting within TOLERANCE of the best throughput.

    Settings above `budget` (the usable CPUs) are the best only when they are
    clearly faster than the best setting within the budget (`_clearly_faster`).
    """
    ok = [p for p in points if p.get("throughput_per_s")]
    if not ok:
        return None
    rate = lambda p: p["throughput_per_s"]  # noqa: E731
    best = max(ok, key=rate)
    inside = [p for p in ok if budget is None or p[key] <= budget]
    passed_over = None
    if inside and best not in inside:
        best_inside = max(inside, key=rate)
        if not _clearly_faster(best, best_inside):
            passed_over = {key: best[key], "throughput_per_s": rate(best),
                           "lead_pct": round(100 * (rate(best) / rate(best_inside) - 1), 1)}
            best = best_inside
    within = [p for p in ok if rate(p) >= (1 - TOLERANCE) * rate(best)]
    choice = min(within, key=lambda p: p[key])
    return {key: choice[key], "throughput_per_s": rate(choice),
            "best": {key: best[key], "throughput_per_s": rate(best)},
            "passed_over": passed_over, "tolerance_pct": round(100 * TOLERANCE)}


def advice(threads: int, workers: int | None) -> dict[str, str]:
    """The exact settings to use, as environment and as code."""
    env = f"OMP_NUM_THREADS={threads} MKL_NUM_THREADS={threads}"
    code = f"torch.set_num_threads({threads})"
    if workers is not None:
        code += f"; DataLoader(..., num_workers={workers})"
    return {"env": env, "code": code}


def run_sweep(run_point: Callable[[int, int | None], float | None], *, usable_cpus: int,
              configured_threads: int | None, configured_workers: int | None, has_dataloader: bool,
              repeats: int = SweepOptions.repeats, threads: tuple[int, ...] | None = None,
              on_point: Callable[[int, int, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Sweep intra-op threads (and DataLoader workers at the chosen thread count)."""
    points = [{"intra_op_threads": t, "dataloader_workers": None}
              for t in (threads or thread_values(usable_cpus, configured_threads))]
    measure(points, run_point, repeats, on_point)
    result: dict[str, Any] = {"repeats": repeats, "tolerance_pct": round(100 * TOLERANCE), "threads": points,
                              "configured_threads": configured_threads, "usable_cpus": usable_cpus}
    pick = recommend(points, "intra_op_threads", usable_cpus)
    chosen_threads = pick["intra_op_threads"] if pick else None
    chosen_workers = None
    if has_dataloader and chosen_threads:
        wpoints = [{"intra_op_threads": chosen_threads, "dataloader_workers": w}
                   for w in worker_values(usable_cpus, configured_workers)]
        measure(wpoints, run_point, repeats, on_point)
        result["workers"] = wpoints
        result["configured_workers"] = configured_workers
        wpick = recommend(wpoints, "dataloader_workers", usable_cpus)
        if wpick:
            chosen_workers = wpick["dataloader_workers"]
            result["workers_pick"] = wpick
    if pick:
        configured = next((p for p in points if p["intra_op_threads"] == configured_threads
                           and p.get("throughput_per_s")), None)
        result["recommendation"] = {
            "intra_op_threads": chosen_threads, "dataloader_workers": chosen_workers,
            "throughput_per_s": pick["throughput_per_s"], "best": pick["best"],
            "passed_over": pick["passed_over"],
            "gain_vs_configured_pct": (round(100 * (pick["throughput_per_s"] / configured["throughput_per_s"] - 1), 1)
                                       if configured else None),
            **advice(chosen_threads, chosen_workers),
        }
    return result


class SweepLayer(Layer):
    """--sweep: the uninstrumented workload again at several thread settings (and DataLoader worker counts),
    each point forked from the fork server, pinning its threads itself (runner._pin_threads); the result goes
    to report.threads.sweep."""

    name = "sweep"
    long_window = True
    compares_reruns = True
    description = "the uninstrumented workload at several thread (and DataLoader worker) counts"
    derived = True
    options = ("sweep", SweepOptions)

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        if context.rerun is None:
            return LayerStatus("skipped", "the workload cannot be re-run from here")
        rerun, state = context.rerun, {"index": 0}  # the point being measured: its passes' names

        def on_point(index: int, total: int, point: dict[str, Any]) -> None:
            state["index"] = index
            workers = point.get("dataloader_workers")
            if context.on_trial:
                context.on_trial(index, total, "sweep", f"{point['intra_op_threads']} intra-op threads"
                                 + (f", {workers} DataLoader workers" if workers is not None else ""))

        def run_point(threads: int, workers: int | None) -> float | None:
            out = rerun(f"sweep-{state['index']}", {},
                        Overrides(intra_op_threads=threads, dataloader_workers=workers))
            if isinstance(out, str):
                return None
            pinned = out.applied.dataloader_workers
            if workers is not None and not (pinned and pinned.target_asked_for):
                return None  # no DataLoader was built in this run: the point did not measure what it claims
            return out.median_s

        threads = report.threads = report.threads or Threads()
        workers = threads.dataloader_workers
        options = context.config.sweep
        try:
            result = run_sweep(
                run_point, usable_cpus=report.machine.usable_cpus, configured_threads=report.machine.intra_op_threads,
                configured_workers=workers, has_dataloader=bool(workers), repeats=options.repeats,
                threads=options.threads, on_point=on_point)
        except KeyboardInterrupt:
            threads.sweep = Sweep(status="interrupted before the sweep finished")
            raise
        # what one point's time is per: a call (function mode), a step of the window (run_point takes the
        # median step), or the whole run when the script has no steps
        unit = ("iterations" if report.target.function
                else "steps" if report.steps and report.steps.window_steps else "runs")
        threads.sweep = report_io.typed(Sweep, {**result, "unit": unit})
        return LayerStatus("ok")
