"""The sample layer (`diagnose script.py --sample`): py-spy on the uninstrumented pass, a cross-check of the
operator pass.

It has no pass of its own: an observer (attach/window.py, its own process) starts py-spy on the
uninstrumented pass once its workload begins, notes when the window of steps begins, and stops it when the
measured part ends. `analyse` keeps the stacks of the window (a span is clipped to it) and turns them into
`report.sampled` as `diagnose attach` does (attach/stacks.py). The operator pass runs under torch.profiler,
which inflates small operators and the dispatch around them; the uninstrumented pass does not:
findings/sampled.py flags an operator whose share of operator time differs between the two by more than
DISTORTION_POINTS as distorted by instrumentation, and the renderers show the two shares side by side
(report/sampled.beside).
"""

from __future__ import annotations

import os
import subprocess
import sys

from diagnose import markers
from diagnose.attach import stacks, window
from diagnose.config import SAMPLE_RATE_HZ
from diagnose.layers.base import Layer, last_line, stop_observer
from diagnose.report.model import LayerStatus, Report, Sampled
from diagnose.tools import pyspy

EXIT_WAIT_S = 40.0  # py-spy writes its file after SIGINT; a large tree's symbols take a while


class PySpyWindow:
    """Observer: one `python -m diagnose.attach.window` per watched pass."""

    def __init__(self, workdir: str, rate_hz: float = SAMPLE_RATE_HZ):
        self.workdir = workdir
        self.rate_hz = rate_hz
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.ready_file = os.path.join(workdir, "sample.ready")
        if os.path.exists(self.ready_file):
            os.unlink(self.ready_file)

    def attach(self, pid: int, start_marker: str) -> None:
        folder = os.path.dirname(start_marker)
        cmd = [sys.executable, "-m", "diagnose.attach.window", "--pid", str(pid), "--out", self.workdir,
               "--start-when", start_marker, "--restart-when", os.path.join(folder, markers.WINDOW),
               "--stop-when", os.path.join(folder, markers.STOP), "--ready", self.ready_file,
               "--rate", str(self.rate_hz)]
        self.log = open(os.path.join(self.workdir, "window.log"), "wb")  # noqa: SIM115 - closed in detach()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def detach(self) -> None:
        stop_observer(self.proc, self.log, 2.0, EXIT_WAIT_S)


class SampleLayer(Layer):
    name = "sample"
    long_window = True
    description = "py-spy samples the uninstrumented pass's Python and native stacks"
    observes = True

    def available(self) -> str | None:
        if pyspy.executable() is None:
            return "py-spy is not installed: pip install py-spy"
        return None

    def observer(self, workdir: str) -> PySpyWindow:
        return PySpyWindow(workdir)

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        timing_path = os.path.join(workdir, window.TIMING)
        if not os.path.exists(timing_path):
            return LayerStatus("failed", "the sampler wrote nothing: "
                                         + last_line(os.path.join(workdir, "window.log")))
        timing = window.load(timing_path)
        trace = os.path.join(workdir, window.STACKS)
        if timing.error or not os.path.exists(trace) or not os.path.getsize(trace):
            return LayerStatus("failed", timing.error or "py-spy wrote no stacks: "
                                         + last_line(os.path.join(workdir, window.LOG)))
        lo = (timing.window_s or 0.0) * 1e6
        hi = (timing.stop_s or float("inf")) * 1e6
        spans = [s._replace(start_us=int(max(s.start_us, lo)),
                            dur_us=int(min(s.start_us + s.dur_us, hi) - max(s.start_us, lo)))
                 for s in pyspy.read_chrometrace(trace) if s.start_us + s.dur_us > lo and s.start_us < hi]
        spans = [s for s in spans if s.dur_us > 0]
        where = stacks.Where(cwd=os.getcwd())
        result = stacks.analyse(spans, timing.rate_hz, where, stacks.ops_names() if spans else {},
                                {(timing.pid, timing.pid)})
        exe = pyspy.executable()
        report.sampled = Sampled(
            sampler=f"{pyspy.version(exe) if exe else 'py-spy'} record --native --idle --subprocesses "
                    "(uninstrumented pass)",
            rate_hz=timing.rate_hz, duration_s=round(result.duration_s, 3), samples=result.samples,
            operator_samples=result.operator_samples, imputed_samples=result.imputed_samples,
            operators=result.operators, functions=result.functions,
            libraries=result.libraries, steps=result.steps, processes=result.processes,
            notes=stacks.operator_notes(result))
        for p in report.sampled.processes:
            p.role = "target" if p.pid == timing.pid else "child"
        scope = "the window of steps" if timing.window_s is not None else "the whole workload (no window)"
        if not result.samples:
            return LayerStatus("failed", f"no busy stack sampled over {scope} ({(hi - lo) / 1e6:.2f} s at "
                                         f"{timing.rate_hz:g} Hz; py-spy needs about a second to start): more "
                                         "--steps give it time")
        notes = [(f"{result.samples} busy thread samples over {scope} at {timing.rate_hz:g} Hz: a share is known "
                  f"to about {100 / result.samples ** 0.5:.0f} points"),
                 (f"py-spy's pauses slow the sampled pass: its step times (the report's uninstrumented reference) "
                  f"ran about 4% slower under {SAMPLE_RATE_HZ:g} Hz on a 2-CPU machine with both CPUs busy "
                  "(benchmarks/RESULTS.md, \"diagnose attach: the target's step time while sampled\")")]
        return LayerStatus("ok", notes=notes)
