"""The threads layer: who wants the CPUs, across the target's whole process tree.

It has no pass of its own. It observes the uninstrumented pass from outside:
when the pass's child starts, a sampler process (sampler.py) attaches to its
pid, waits for the measured workload to begin (the runner's start marker),
starts over when a window of steps begins (what it saw was setup and
warm-up), and follows it and every descendant through /proc until the
measured part ends (diagnose/markers.py);
`analyse` reads that recording back (recording.py: the types both sides
share) and turns it into `report.threads` (analysis.py), adding
the environment audit (environment.py). The findings that read it live in
diagnose/findings/threads.py; the sweep (sweep.py) is run by the api when
asked for. Nothing here runs inside the target, so its thread pools, GIL and
caches are the ones the user's run has.
"""

from __future__ import annotations

import os
import subprocess
import sys

from diagnose import markers
from diagnose.findings.threads import MIN_DURATION_S
from diagnose.layers.base import Layer, last_line, stop_observer
from diagnose.layers.threads import analysis, environment, recording
from diagnose.report.model import LayerStatus, Report, Threads

RECORDING = "threads-recording.json"
SAMPLER_LOG = "sampler.log"
SAMPLER_EXIT_WAIT_S = 5.0  # after the tree exits the sampler takes one more sample and writes


class SamplerProcess:
    """Observer: one `python -m diagnose.layers.threads.sampler` per watched pass."""

    def __init__(self, workdir: str, interval_s: float | None = None):
        self.workdir = workdir
        self.interval_s = interval_s
        self.proc: subprocess.Popen | None = None
        self.log = None
        self.ready_file = os.path.join(workdir, "sampler.ready")  # the runner waits for it (markers.py)
        if os.path.exists(self.ready_file):  # from an earlier attempt at this pass
            os.unlink(self.ready_file)

    def attach(self, pid: int, start_marker: str) -> None:
        folder = os.path.dirname(start_marker)
        cmd = [sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid", str(pid),
               "--out", os.path.join(self.workdir, RECORDING), "--start-when", start_marker,
               "--restart-when", os.path.join(folder, markers.WINDOW),
               "--stop-when", os.path.join(folder, markers.STOP), "--ready", self.ready_file]
        if self.interval_s:
            cmd += ["--interval", str(self.interval_s)]
        self.log = open(os.path.join(self.workdir, SAMPLER_LOG), "wb")
        # own session: a Ctrl-C at the terminal goes to the target, not to the sampler,
        # which keeps sampling until the tree it watches has written its partial results
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def detach(self) -> None:
        stop_observer(self.proc, self.log, SAMPLER_EXIT_WAIT_S, SAMPLER_EXIT_WAIT_S)


class ThreadsLayer(Layer):
    name = "threads"
    long_window = True
    description = "samples every thread of the process tree through /proc"
    observes = True

    def available(self) -> str | None:
        if not os.path.isdir(f"/proc/{os.getpid()}/task"):
            return "no Linux /proc here: the thread sampler reads /proc/<pid>/task"
        return None

    def observer(self, workdir: str) -> SamplerProcess:
        return SamplerProcess(workdir)

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        path = os.path.join(workdir, RECORDING)
        if not os.path.exists(path):
            log = last_line(os.path.join(workdir, SAMPLER_LOG), "")
            return LayerStatus("failed", "the thread sampler wrote no recording" + (f": {log}" if log else ""))
        usable = report.machine.usable_cpus or os.cpu_count() or 1
        # the uninstrumented pass recorded the target's thread-count calls and the Python threads it started
        own = report.threads or Threads()
        threads = analysis.analyse(recording.load(path), usable, own.python_threads)
        threads.environment = environment.audit(report.machine, processes=threads.compute_processes or 1)
        threads.thread_calls, threads.python_threads = own.thread_calls, own.python_threads
        report.threads = threads
        seconds = threads.duration_s or 0
        short = (f"the run lasted {seconds} s, under the {MIN_DURATION_S} s the thread findings need: "
                 "no oversubscription or idle-CPU verdict from so few samples; "
                 "a longer run (more iterations or steps) gets one")
        if threads.mean_runnable is None:
            # a target that ended before the sampler's second sample: nothing failed, there was nothing to measure
            return LayerStatus("skipped" if threads.reason else "failed",
                               threads.reason or "too few samples to measure anything",
                               notes=[short] if seconds < MIN_DURATION_S else [])
        status = LayerStatus("ok")
        if threads.health and threads.health.unreadable_files:
            status.notes.append(f"{threads.health.unreadable_files} /proc files could not be read")
        if not threads.schedstat_available:
            status.notes.append("schedstat reads 0 0 0 here: runnable time from sampled thread states "
                                "(coarser, underestimates short waits)")
        if seconds < MIN_DURATION_S:
            status.notes.append(short)
        elif seconds < 1.0:
            status.notes.append(f"the run lasted {seconds} s: few samples, coarse numbers; "
                                "a longer run (more iterations) gives steadier ones")
        return status
