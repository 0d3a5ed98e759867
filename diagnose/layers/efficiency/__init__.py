"""The efficiency layer: is each hot operator running as fast as this machine allows?

A derived layer (no pass of its own, analyse() after every pass). It takes
the hot rows of the operator pass (roofline.select_rows), estimates each
call's FLOPs and bytes from its recorded shapes (work.py: done in the
operator pass's process, where torch is loaded; for rows without it, e.g.
an older report, in a subprocess, since the orchestrator never imports
torch), gets the machine's
peaks (probe.py: from the per-machine cache, else measured in a subprocess,
~5 s on 2 cores), times the probe's process-spread step once more for the
machine's spread history (probe.sample_spread, ~0.5 s in a helper forked from
the run's fork server) and places every row on the roofline (roofline.py). The
result goes to `report.efficiency` (model.Efficiency): the probe's result
with `cached` and `cache_path` (model.Peaks), the roofs at the run's threads
(model.Roofs), a roofline.place row per operator (model.RooflineRow), how the
times were taken, and the operator pass's instrumentation overhead.

The `low_efficiency` finding (diagnose/findings/efficiency.py) reads it;
`roofline.png` is drawn from it (diagnose/render/plots.py).

The achieved rates come from the operator pass's self CPU times, which carry
its instrumentation overhead (report.run.overhead_ratio): per call it is a few
microseconds, negligible for the large kernels this layer is about.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from diagnose import machine
from diagnose.layers.base import DerivedContext, Layer, last_line, run_helper
from diagnose.layers.efficiency import probe, roofline
from diagnose.report import io as report_io
from diagnose.report.model import Efficiency, LayerStatus, Peaks, Report, Work

# probe, roofline and work are imported where used: each of them also runs as
# `python -m diagnose.layers.efficiency.<module>`, which imports this package first

WORK_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 120.0


class EfficiencyLayer(Layer):
    name = "efficiency"
    description = "hot operators against this machine's measured GEMM and memory-bandwidth peaks (roofline)"
    derived = True

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        tick = context.tick
        if not report.operators:
            return LayerStatus("skipped", "the operator pass recorded no operators (it needs the operators layer)")
        rows = roofline.select_rows(report.operators)
        if not rows:
            return LayerStatus("skipped", f"no ATen operator takes >= {roofline.MIN_SHARE_PCT:g}% of operator time")
        t0 = time.monotonic()
        server = context.server
        works = _estimate_work(rows, workdir, tick, t0, server)
        peaks = _peaks(report, workdir, tick, t0, server)
        sampled = _sample_spread(workdir, tick, t0, server)
        if not isinstance(sampled, str):
            peaks.spread_history, peaks.spread_samples = sampled.history, sampled.samples
        m = report.machine
        roofs, placed = roofline.analyse(rows, works, peaks, m.intra_op_threads, m.usable_cpus,
                                         report.microbenchmarks)
        overhead = report.run.overhead_ratio
        report.efficiency = Efficiency(
            peaks=peaks, roofs=roofs, operators=placed,
            timing="achieved rates use self CPU time from the instrumented operator pass"
                   + (f" (it ran {overhead:.2f}x the uninstrumented wall time)" if overhead else ""),
            instrumentation_overhead=round(overhead, 3) if overhead else None,
        )
        status = LayerStatus("ok")
        if peaks.contended:
            status.notes.append("other processes took CPUs while the peaks were measured: the roofs are low, "
                                "so efficiencies read high; run `diagnose probe --refresh` on a quiet machine")
        if peaks.process_spread is not None and peaks.process_spread.contended:
            status.notes.append("other processes took CPUs while the probe measured how far processes spread, so "
                                "findings judge their numbers on the 10% floor instead; `diagnose probe --refresh` "
                                "on a quiet machine measures it")
        if isinstance(sampled, str):  # how far the history has come is in the roofs line (fmt.spread_source)
            status.notes.append(sampled)
        for o in placed:
            if o.efficiency_pct is None:
                status.notes.append(f"{o.name} {o.input_shapes}: no efficiency ({o.reason or 'no work estimate'})")
        if roofs.raised_by:
            status.notes.append(f"the compute roof is {roofs.gflops_per_s:.4g} GFLOP/s, what {roofs.raised_by} "
                                f"reached: the probe's fp32 GEMM peak, {roofs.probed_gflops_per_s:.4g}, is lower than "
                                "a kernel this machine ran (its square GEMMs run slower than this shape here, or it "
                                "was measured in a busy or slow stretch of the CPUs; `diagnose probe --refresh` on a "
                                "quiet machine measures it again)")
        if peaks.cached:
            status.notes.append(f"machine peaks from the cache ({peaks.cache_path}, measured "
                                f"{peaks.measured_at}); `diagnose probe --refresh` measures again")
        return status


def _run(cmd: list[str], log_path: str, timeout_s: float, tick, t0: float, server=None) -> subprocess.CompletedProcess:
    """A helper process with progress ticks; stdout captured, stderr to a log; raises when it fails."""
    code, out = run_helper(cmd, log_path, timeout_s, tick, t0, capture_stdout=True, server=server)
    if code is None:
        raise RuntimeError(f"{cmd[2]} took more than {timeout_s:g} s")
    if code:
        raise RuntimeError(f"{cmd[2]} exited with {code}: {last_line(log_path)}")
    return subprocess.CompletedProcess(cmd, code, out)


def _estimate_work(rows, workdir: str, tick, t0: float, server=None) -> list[Work]:
    if all(r.work is not None for r in rows):  # estimated in the operator pass (operators.attach_work)
        return [r.work for r in rows]
    src, out = os.path.join(workdir, "rows.json"), os.path.join(workdir, "work.json")
    with open(src, "w") as fh:
        json.dump([{"name": r.name, "input_shapes": r.input_shapes, "dtypes": r.dtypes,
                    "input_strides": r.input_strides, "contiguous": r.contiguous,
                    "concrete_inputs": r.concrete_inputs} for r in rows], fh)
    _run([sys.executable, "-m", "diagnose.layers.efficiency.work", src, out], os.path.join(workdir, "work.log"),
         WORK_TIMEOUT_S, tick, t0, server)
    with open(out) as fh:
        return report_io.typed(list[Work], json.load(fh))


def _sample_spread(workdir: str, tick, t0: float, server) -> probe.SampledSpread | str:
    """One more timing of the probe's spread step for the machine's history (probe.sample_spread), or why not."""
    cmd = [sys.executable, "-m", "diagnose.layers.efficiency.probe", "--sample-spread"]
    try:
        done = _run(cmd, os.path.join(workdir, "spread.log"), PROBE_TIMEOUT_S, tick, t0, server)
        return report_io.typed(probe.SampledSpread, json.loads(done.stdout.decode()))
    except (RuntimeError, ValueError, TypeError) as exc:
        return f"the spread history was not sampled ({exc}): the probe's own process spread is the floor"


def _peaks(report: Report, workdir: str, tick, t0: float, server) -> Peaks:
    """The full probe's peaks for this machine: from the cache, else measured (and cached)."""
    m = report.machine
    if m.torch_version:
        key = probe.machine_key(m.cpu_model, m.usable_cpus, m.torch_version, "full", machine.vector_isa())
        hit = probe.cached_peaks(key)
        if hit is not None:
            return report_io.typed(Peaks, {**hit, "cached": True, "cache_path": probe.cache_path(key)})
    cmd = [sys.executable, "-m", "diagnose.layers.efficiency.probe", "--json"]
    done = _run(cmd, os.path.join(workdir, "probe.log"), PROBE_TIMEOUT_S, tick, t0, server)
    data = json.loads(done.stdout.decode())  # the probe's result with "cached" and "cache_path"
    return report_io.typed(Peaks, {**data, "cached": bool(data.get("cached", False))})
