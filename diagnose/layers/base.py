"""What a layer is.

A layer measures one aspect of the target. It has up to four parts:
- `recorder(spec)`: child side, wraps the workload in its own pass
  (returns None when the layer needs no pass of its own);
- `observer(workdir)`: parent side, watches the uninstrumented pass from
  outside the target (returns None when the layer does not observe);
- `analyse(outcome, report, workdir)`: parent side, turns the pass's raw data
  into report fields and returns the layer's status;
- `available()`: None when it can run here, else the reason it is skipped.

A `derived` layer has neither a pass nor an observer: its
`derive(context, report, workdir)` runs after every pass on what the other
layers measured (efficiency: the operators against the machine's peaks; the
doctor and what-if: trials that re-run the workload), with a
`DerivedContext`: the run's Config, a progress tick, the fork server, and a
way to re-run the workload.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from diagnose import launch
from diagnose.config import Config
from diagnose.launch import PassOutcome
from diagnose.protocol import Overrides, PassResult, PassSpec
from diagnose.report.model import LayerStatus, Report


class Recorder:
    """Child side of a layer (diagnose/runner.py drives it).

    `prepare()` runs before the target's code (hooks and modes that must be in
    place before anything is compiled); `start()`/`stop()` bracket what is
    measured: the window of steps, the measured calls of function mode, or the
    whole workload when the script has no steps; start() after a stop()
    starts over, dropping what was recorded (a window began); `step()` follows
    each measured call of function mode; `last_warmup_step()` announces the
    last step before the window (work that must not be timed, such as the
    operator pass's scan of operator inputs); `release()` undoes `prepare()` once
    the target is done; `collect()` gives the raw JSON-able data for
    `analyse` and may write artifacts into the workdir.
    """

    def prepare(self) -> None:
        pass

    def start(self) -> None:
        pass

    def step(self) -> None:
        pass

    def last_warmup_step(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def release(self) -> None:
        pass

    def collect(self, workdir: str) -> dict[str, Any]:
        return {}


class Observer(Protocol):
    """Watches a pass from outside: attached once the child starts, detached when it ends.

    `start_marker` is the file the child creates when the measured workload
    begins (after interpreter start-up and torch's import).
    """

    def attach(self, pid: int, start_marker: str) -> None: ...

    def detach(self) -> None: ...


@dataclass
class DerivedContext:
    config: Config  # the run's options
    tick: Callable[[float], None] | None = None  # elapsed seconds, for progress lines
    server: Any = None  # the run's fork server, for helper processes (run_helper), or None
    # re-run the uninstrumented workload over the same window: (pass name, environment at launch (a fresh
    # interpreter; {}: forked from the fork server), what the child changes) -> what it measured, or a one-line
    # reason it failed; None: not possible here
    rerun: Callable[[str, dict[str, str], Overrides], PassResult | str] | None = None
    on_trial: Callable[[int, int, str, str], None] | None = None  # (index, total, kind, what) before each re-run
    say: Callable[[str], None] | None = None  # a line for the user now (e.g. what a long layer will cost)


class Layer:
    name: str = ""
    description: str = ""  # what its pass does, for progress lines
    observes: bool = False  # True: no pass of its own, an observer on the uninstrumented pass
    derived: bool = False  # True: no pass, no observer; derive(context, ...) after all passes
    # True: it samples the uninstrumented window (the thread sampler, perf, py-spy, VTune) or re-runs it as trials
    # (doctor, what-if, repeat, sweep): the first pass's window lasts at least steps.MIN_WINDOW_S when it runs
    long_window: bool = False
    # True: its re-runs are compared only with each other (doctor trials, what-if passes, sweep points), never with
    # the first pass: they measure the window's first steps up to about steps.RERUN_WINDOW_S (session.Window.capped)
    compares_reruns: bool = False
    # its options: (the Config field holding them, their type from config.py); the CLI's flags come from it
    options: tuple[str, type] | None = None

    def available(self) -> str | None:
        return None

    def recorder(self, spec: PassSpec) -> Recorder | None:
        return None

    def observer(self, workdir: str) -> Observer | None:
        return None

    def command_prefix(self, workdir: str, config: Config) -> list[str] | None:
        """A command its pass runs under (VTune's collector), or None: the pass runs as is."""
        return None

    def analyse(self, outcome: PassOutcome, report: Report, workdir: str) -> LayerStatus:
        """A pass layer or an observer: its pass's (or the observed pass's) outcome into the report."""
        raise NotImplementedError

    def derive(self, context: DerivedContext, report: Report, workdir: str) -> LayerStatus:
        """A derived layer (`derived = True`): after every pass, from the report and the context's means
        (the run's Config, progress, the fork server, re-running the workload)."""
        raise NotImplementedError


def stop_observer(proc: subprocess.Popen | None, log, wait_s: float, term_wait_s: float) -> None:
    """End an observer process (the thread sampler, py-spy's window): wait `wait_s` for it to finish on its own
    (it takes a last sample once the tree it watches exits), else SIGTERM and `term_wait_s` more, else kill;
    then close its log."""
    if proc is None:
        return
    try:
        proc.wait(timeout=wait_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):
        # workers the target left behind keep the tree alive: stop it with a last sample
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=term_wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        if log:
            log.close()


def last_line(path: str, default: str = "no output") -> str:
    """The last non-empty line of a helper process's log, for a layer's failure reason."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
        return lines[-1] if lines else default
    except OSError:
        return default


def run_helper(cmd: list[str], log_path: str, timeout_s: float, tick: Callable[[float], None] | None = None,
               t0: float | None = None, capture_stdout: bool = False, server=None) -> tuple[int | None, bytes]:
    """Run one of diagnose's own helper processes (never the target) with progress ticks.

    stderr, and stdout unless captured, go to `log_path`. Returns (exit code,
    captured stdout); the exit code is None when it was killed after
    `timeout_s` seconds (counted from `t0`, default now). Ctrl-C kills it and
    propagates. A `python -m MODULE ...` helper is forked from the run's fork
    server when there is one (torch already imported: diagnose/forkserver.py).
    """
    t0 = time.monotonic() if t0 is None else t0
    out_path = log_path + ".stdout"
    if server is not None and cmd[:2] == [sys.executable, "-m"]:
        proc = server.spawn(None, cmd[3:], module=cmd[2], log=log_path, stdin_null=True,
                            stdout=out_path if capture_stdout else None)
    else:
        with open(log_path, "wb") as log, open(out_path, "wb") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out if capture_stdout else log,
                                    stderr=log)
    try:
        if launch.wait(proc, t0, timeout_s, tick) == "timeout":
            _kill(proc)
            return None, b""
    except KeyboardInterrupt:
        _kill(proc)
        raise
    try:
        with open(out_path, "rb") as fh:
            captured = fh.read() if capture_stdout else b""
    except OSError:
        captured = b""
    return proc.returncode, captured


def _kill(proc) -> None:
    try:
        if hasattr(proc, "kill"):
            proc.kill()
        else:  # a child of the fork server: its own process group
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
