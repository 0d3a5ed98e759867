"""Hardware counters, where the machine has them: perf (CountersLayer) and VTune (VtuneLayer).

CountersLayer observes the uninstrumented pass from outside, like the thread
sampler: when the runner creates its start marker (the measured workload
begins, torch already imported) a watcher thread starts
`perf stat -x, -e cycles,instructions,... -p PID -o FILE`; when a window of
steps begins perf is started over (what it counted was setup and warm-up);
at the stop marker (or when the pass ends) perf gets SIGINT and writes its
counts (diagnose/markers.py).
`analyse` turns them into `report.counters` (model.Counters, from
diagnose/tools/perf.py): source "perf", CPI, IPC, miss rates, cycles,
instructions, CPUs utilised at the top, and every event under `perf`
(model.PerfStat).

When perf cannot count cycles and instructions (no PMU: these VMs print
`<not supported>`; perf missing; kernel.perf_event_paranoid too strict) the
layer is skipped, and its reason says what counters would add and how to get
them (WHAT_COUNTERS_GIVE, HOW_TO_GET_COUNTERS: renderers may show them).

VtuneLayer (not in the default registry: `diagnose --vtune` turns it on once
the launcher can wrap a pass, see `command_prefix`) runs its own pass under
`vtune -collect ...`, with a recorder that wraps the measured workload in
`torch.autograd.profiler.emit_itt()` so every aten op is an ITT task; its
`analyse` runs VTune's CSV reports and puts the summary (CPI, spin and
overhead time, effective CPU use, top aten tasks) in `report.counters.vtune`
(model.VtuneSummary), filling the top-level numbers perf did not give.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
from typing import Any

from diagnose import markers
from diagnose.config import Config
from diagnose.layers.base import Layer, Recorder, last_line
from diagnose.protocol import PassSpec
from diagnose.report import io as report_io
from diagnose.report.model import Counters, LayerStatus, PerfStat, Report, VtuneSummary
from diagnose.tools import perf, vtune


PERF_OUT = "perf-stat.csv"
PERF_LOG = "perf.log"
MARKER_POLL_S = 0.01
PERF_EXIT_WAIT_S = 5.0

WHAT_COUNTERS_GIVE = (
    "with counters the report adds the run's CPI/IPC and cache and branch miss rates (perf), or spin and "
    "overhead time, effective CPU use and CPU time per aten op (VTune)"
)
HOW_TO_GET_COUNTERS = (
    "to get them run on bare metal or a VM with PMU passthrough, with perf installed and "
    "kernel.perf_event_paranoid <= 2 (or as root), or install Intel VTune and use diagnose --vtune / vtune_scripts/"
)


def skip_reason() -> str | None:
    why = perf.unavailable()
    if why is None:
        return None
    vt = vtune.unavailable(short=True)
    if vt is None:
        return f"{why}; VTune is on PATH: diagnose --vtune collects its counters instead"
    return f"{why}; {vt}. {WHAT_COUNTERS_GIVE[0].upper()}{WHAT_COUNTERS_GIVE[1:]}; {HOW_TO_GET_COUNTERS}"


class PerfStatObserver:
    """Observer: `perf stat -p PID` over the measured workload of one pass."""

    def __init__(self, workdir: str, perf_exe: str = "perf"):
        self.workdir = workdir
        self.perf_exe = perf_exe
        self.proc: subprocess.Popen | None = None
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self.command: list[str] | None = None
        self.log = None

    def attach(self, pid: int, start_marker: str) -> None:
        folder = os.path.dirname(start_marker)
        self.thread = threading.Thread(target=self._watch, args=(pid, folder), daemon=True)
        self.thread.start()

    def _watch(self, pid: int, folder: str) -> None:
        start, window, stop = (os.path.join(folder, m) for m in (markers.START, markers.WINDOW, markers.STOP))
        while not os.path.exists(start):
            if self.done.wait(MARKER_POLL_S) or not _alive(pid):
                return
        self._launch(pid)
        restarted = False
        while not os.path.exists(stop):
            if not restarted and os.path.exists(window):  # setup and warm-up are not what is measured
                restarted = True
                self._stop()
                self._launch(pid)
            if self.done.wait(MARKER_POLL_S) or self.proc.poll() is not None:
                break
        self._stop()

    def _launch(self, pid: int) -> None:
        self.command = perf.stat_command(pid, os.path.join(self.workdir, PERF_OUT), perf=self.perf_exe)
        if self.log is None:
            self.log = open(os.path.join(self.workdir, PERF_LOG), "wb")
        # own session: a Ctrl-C at the terminal reaches the target, perf is stopped by us
        self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def _stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)  # perf stat prints its counts on SIGINT
        try:
            proc.wait(timeout=PERF_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def detach(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(timeout=PERF_EXIT_WAIT_S + 1)
        self._stop()
        if self.log:
            self.log.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# the top-level numbers of report.counters that perf fills (over any VTune gave)
PERF_TOP = ("cpi", "ipc", "cycles", "instructions", "cache_miss_pct", "branch_miss_pct", "cpus_utilized")
# those VTune fills where perf did not
VTUNE_TOP = ("cpi", "spin_overhead_pct", "spin_time_s", "overhead_time_s", "cpu_time_s",
             "effective_cpu_utilization_pct")


def counters_from_perf(text: str) -> Counters:
    events = perf.parse_stat_csv(text)
    stat = report_io.typed(PerfStat, {**perf.metrics(events), "events": events})
    return Counters(source="perf", perf=stat, **{k: getattr(stat, k) for k in PERF_TOP})


class CountersLayer(Layer):
    name = "counters"
    long_window = True
    description = "hardware counters (perf stat: cycles, instructions, misses) over the uninstrumented pass"
    observes = True

    def available(self) -> str | None:
        return skip_reason()

    def observer(self, workdir: str) -> PerfStatObserver:
        return PerfStatObserver(workdir)

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        path = os.path.join(workdir, PERF_OUT)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return LayerStatus("failed", "perf stat wrote no counts (the workload may have ended before the "
                                         f"measured part began): {last_line(os.path.join(workdir, PERF_LOG))}")
        counters = counters_from_perf(text)
        if report.counters is None:
            report.counters = counters
        else:  # VTune's pass came first: perf's numbers take the top level, VTune's part stays
            report.counters = dataclasses.replace(report.counters, source=counters.source, perf=counters.perf,
                                                  **{k: getattr(counters, k) for k in PERF_TOP})
        m = counters.perf
        if counters.cpi is None:
            return LayerStatus("failed", "perf stat ran but counted no cycles/instructions for this run"
                                         + (f" (<not supported>: {', '.join(m.not_supported)})"
                                            if m.not_supported else ""))
        status = LayerStatus("ok")
        if m.multiplexed:
            status.notes.append(f"{', '.join(m.multiplexed)} shared the counters with other events (perf "
                                "scaled their counts from the time they ran)")
        if m.not_supported:
            status.notes.append(f"not supported here: {', '.join(m.not_supported)}")
        return status


# ---------------------------------------------------------------- VTune


class IttRecorder(Recorder):
    """Child side of the VTune pass: the measured workload inside emit_itt (aten ops become ITT tasks)."""

    def __init__(self) -> None:
        self.ctx = None

    def start(self) -> None:
        import torch

        self.ctx = torch.autograd.profiler.emit_itt()
        self.ctx.__enter__()

    def stop(self) -> None:
        if self.ctx is not None:
            self.ctx.__exit__(None, None, None)
            self.ctx = None

    def collect(self, workdir: str) -> dict[str, Any]:
        import torch

        return {"itt_available": bool(torch.profiler.itt.is_available())}


class VtuneLayer(Layer):
    """A pass of its own under `vtune -collect`; needs the launcher hook described in `command_prefix`."""

    name = "vtune"
    long_window = True
    description = "the target under Intel VTune (ITT labels per aten op)"
    RESULT_DIR = "vtune-result"

    def available(self) -> str | None:
        return vtune.unavailable()

    def recorder(self, spec: PassSpec) -> IttRecorder:
        return IttRecorder()

    def command_prefix(self, workdir: str, config: Config) -> list[str]:
        """What goes before `python -m diagnose.runner SPEC` in this layer's pass (launch.run_pass)."""
        # collect_command with no target command ends with "--": the runner's command follows
        return vtune.collect_command(config.vtune, os.path.join(workdir, self.RESULT_DIR), [])

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        result_dir = os.path.join(workdir, self.RESULT_DIR)
        if not os.path.isdir(result_dir):
            return LayerStatus("failed", f"vtune wrote no result directory: {outcome.failure_reason('the vtune pass')}")
        cmds = vtune.report_commands(result_dir, workdir)
        texts: dict[str, str] = {}
        for name, cmd in cmds.items():
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            out = cmd[cmd.index("-report-output") + 1]
            if proc.returncode == 0 and os.path.exists(out):
                with open(out, encoding="utf-8", errors="replace") as fh:
                    texts[name] = fh.read()
        if "summary" not in texts:
            return LayerStatus("failed", "vtune -report summary produced no CSV")
        summary = vtune.parse_summary_csv(texts["summary"])
        tasks = vtune.parse_table_csv(texts["tasks"]) if "tasks" in texts else None
        data = report_io.typed(VtuneSummary, {**vtune.summarize(summary, tasks), "summary": summary})
        counters = report.counters or Counters(source="vtune")
        counters.vtune = data
        for key in VTUNE_TOP:
            if getattr(counters, key) is None:
                setattr(counters, key, getattr(data, key))
        report.counters = counters
        status = LayerStatus("ok")
        if not (outcome.raw or {}).get("itt_available"):
            status.notes.append("torch reports ITT unavailable: aten ops are not labelled in the VTune result")
        return status
