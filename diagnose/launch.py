"""Runs one pass of the target in a child process and reports what happened.

The child runs in its own session so that a timeout or Ctrl-C can be
delivered once, to the whole process tree it started: first SIGINT (the
target sees KeyboardInterrupt, the runner writes what it measured), then
SIGKILL after a grace period.

A spec with `distributed` runs under torchrun (diagnose/distributed): the
child is `python -m torch.distributed.run ... -m diagnose.runner SPEC`, each
rank writes its own result, and the outcome carries the merged result the
layers read plus `ranks`, one entry per rank. torchrun forwards our SIGINT to
the ranks, which run in sessions of their own; any that outlive it are killed
by the pids they wrote.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from diagnose import protocol
from diagnose.distributed import collect, launcher
from diagnose.distributed.collect import RankOutcome
from diagnose.protocol import ChildResult, DistributedSpec, PassResult, PassSpec
from diagnose.stall import STACKS_FILE, StallWatch, request_dumps

if TYPE_CHECKING:
    from diagnose.forkserver import ForkServer

# time the child gets to write its results after SIGINT (a timeout, Ctrl-C). Stopping torch.profiler costs about
# 45 µs per recorded operator event (a 64x64 matmul loop on a 2-CPU AVX-512 EPYC: 160k events 8 s, 330k events
# 14 s), and the operator pass's event budget (config.MAX_RECORDED_CALLS torch calls from Python, 2-3 events
# each) allows about 500k: 20 s cut that write short and lost every row of a timed-out pass; 60 s covers it twice
GRACE_S = 60.0
STALLED_GRACE_S = 5.0  # ... when it is hung: a deadlock in C++ ignores SIGINT, so do not wait long


@dataclass
class PassOutcome:
    name: str
    status: str  # ok | target_failed | crashed | timeout | stalled | interrupted
    result: PassResult | None  # None: the child wrote none (it died)
    returncode: int | None
    elapsed_s: float
    output_tail: list[str] = field(default_factory=list)
    timeout_s: float | None = None
    ranks: list[RankOutcome] | None = None  # under torchrun: one per rank (distributed/collect.py)
    # a stalled pass (diagnose/stall.py): {"idle_s", "stacks": [{"rank", "pid", "text"}]}
    stall: dict[str, Any] | None = None
    tool_induced: bool = False  # stalled under a layer while the uninstrumented pass finished (session.py)
    children: list[ChildResult] = field(default_factory=list)  # what the processes the target forked recorded

    @property
    def raw(self) -> dict[str, Any] | None:
        return self.result.raw if self.result else None

    @property
    def error(self) -> str | None:
        if self.status == "timeout":  # the child saw our SIGINT as KeyboardInterrupt
            return f"timed out after {self.timeout_s:g} s (--timeout)"
        if self.status == "stalled":
            return (f"its process tree used no CPU for {self.stall['idle_s']:.0f} s in the {self.name} pass "
                    "(--stall-after); its stacks are in the hang finding")
        if self.result and self.result.error:
            return self.result.error
        if self.status == "crashed":
            return _describe_returncode(self.returncode)
        return None

    def failure_reason(self, what: str) -> str:
        if self.result and self.result.raw_error:
            return f"{what} could not collect its data: {self.result.raw_error}"
        if self.status == "crashed":
            return f"{what} died before writing its results: {_describe_returncode(self.returncode)}"
        return f"{what} produced no data ({self.status})"


def _describe_returncode(rc: int | None) -> str:
    if rc is None:
        return "the process did not end"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"the process was killed by {name}"
    return f"the process exited with code {rc} without writing its results"


def _tail(path: str, lines: int = 20) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            return fh.read().decode("utf-8", "replace").splitlines()[-lines:]
    except OSError:
        return []


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_pass(
    spec: PassSpec,
    workdir: str,
    *,
    passthrough: bool,
    timeout_s: float | None,
    on_tick: Callable[[float], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    extra_env: dict[str, str] | None = None,
    command_prefix: list[str] | None = None,
    server: "ForkServer | None" = None,
    stall_after_s: float | None = None,
) -> PassOutcome:
    """Run one pass; never raises for anything the target does.

    A KeyboardInterrupt in this process is forwarded to the child, which
    writes what it measured; the outcome then has status "interrupted".
    With a fork server the child is forked from it (torch already imported),
    unless the pass needs a fresh process: another environment at load time
    (extra_env), a command prefix, or torchrun (diagnose/forkserver.py).
    """
    os.makedirs(workdir, exist_ok=True)
    dist = spec.distributed
    forked = server is not None and not (dist or command_prefix or extra_env)
    spec = spec.with_(workdir=workdir, forked=forked)  # the runner reads `forked` (doctor/process.py blas_pools)
    spec_path = os.path.join(workdir, protocol.SPEC_FILE)
    protocol.write(spec, spec_path)
    log_path = os.path.join(workdir, "output.log")
    out = None if passthrough or forked else open(log_path, "wb")
    if dist:
        cmd = launcher.command(spec_path, dist)
    else:
        cmd = [sys.executable, "-m", "diagnose.runner", spec_path]
    cmd = [*(command_prefix or []), *cmd]  # e.g. `vtune -collect hotspots -r DIR --`
    t0 = time.monotonic()
    if forked:
        proc = server.spawn("diagnose.runner:main", [spec_path], log=None if passthrough else log_path,
                            stdin_null=not passthrough)
    else:
        proc = subprocess.Popen(
            cmd,
            stdin=None if passthrough else subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT if out else None,
            start_new_session=True,
            env={**os.environ, **extra_env} if extra_env else None,
        )
    if on_start:
        on_start(proc.pid)
    status = None
    stall = None
    watch = StallWatch(proc.pid, stall_after_s) if stall_after_s else None
    try:
        status = wait(proc, t0, timeout_s, on_tick, stalled=watch.stalled if watch else None)
        if status == "timeout":
            _stop(proc)
        elif status == "stalled":
            stall = {"idle_s": watch.idle_s(), "stacks": _dump_stacks(proc, workdir, dist)}
            _stop(proc, grace_s=STALLED_GRACE_S)
    except KeyboardInterrupt:
        status = "interrupted"
        _stop(proc)
    finally:
        if out:
            out.close()
    elapsed = time.monotonic() - t0
    ranks = None
    if dist:
        launcher.stop_leftover_ranks(workdir)
        result, ranks = collect.collect(workdir, spec, proc.returncode)
    else:
        result = protocol.read_result(os.path.join(workdir, protocol.RESULT_FILE))
    children = protocol.read_children(workdir)
    if status is None:
        if result is None:
            status = "crashed"
        elif result.error_kind == "interrupted":
            status = "interrupted"
        elif result.exit_code:
            status = "target_failed"
        else:
            status = "ok"
    return PassOutcome(
        name=spec.name, status=status, result=result, returncode=proc.returncode, elapsed_s=elapsed,
        output_tail=[] if passthrough else _tail(log_path), timeout_s=timeout_s, ranks=ranks, stall=stall,
        children=children,
    )


def wait(proc, t0: float, timeout_s: float | None, on_tick: Callable[[float], None] | None = None,
         stalled: Callable[[], bool] | None = None) -> str | None:
    """Wait for `proc` (a Popen, or a fork server's child), ticking every 0.25 s: None when it ended, "timeout"
    once `timeout_s` passed since `t0`, "stalled" when `stalled()` says so; the process is left running then.
    Ctrl-C propagates."""
    while True:
        try:
            proc.wait(timeout=0.25)
            return None
        except subprocess.TimeoutExpired:
            elapsed = time.monotonic() - t0
            if on_tick:
                on_tick(elapsed)
            if timeout_s is not None and elapsed > timeout_s:
                return "timeout"
            if stalled is not None and stalled():
                return "stalled"


def _dump_stacks(proc, workdir: str, dist: DistributedSpec | None) -> list[dict[str, Any]]:
    """Every runner of a stalled pass writes its threads' stacks (diagnose/stall.py); their texts."""
    if dist:
        runners = []
        for rank, path in launcher.rank_dirs(workdir):
            try:
                with open(os.path.join(path, launcher.PID_FILE)) as fh:
                    runners.append((rank, int(fh.read().strip()), path))
            except (OSError, ValueError):
                continue
    else:
        runners = [(None, proc.pid, workdir)]
    request_dumps([pid for _, pid, _ in runners])
    out = []
    for rank, pid, path in runners:
        try:
            with open(os.path.join(path, STACKS_FILE), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            text = ""
        out.append({"rank": rank, "pid": pid, "text": text[-200_000:],
                    "finished": os.path.exists(os.path.join(path, "result.json"))})
    return out


def _stop(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    _signal_group(proc, signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except (subprocess.TimeoutExpired, KeyboardInterrupt):  # too slow, or a second Ctrl-C
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
    # stragglers the target left behind (workers that ignored SIGINT)
    _signal_group(proc, signal.SIGKILL)
