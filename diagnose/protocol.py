"""The typed corridor between the parent and a pass's child: what a pass is asked to do, and what it gives back.

The parent (diagnose/session.py) writes a `PassSpec` as `spec.json` into the
pass's workdir; the child (`python -m diagnose.runner SPEC`, diagnose/runner.py)
reads it back, runs the target, and writes a `PassResult` as `result.json`
beside it. Both files go through report/io's `to_dict` and `typed`, so the
field names below are the one place each is spelled: an option keeps its name
from the command line (config.Config) to the clock that uses it
(steps.StepClock reads `WindowSpec.steps`).

This module is the ground floor: it imports nothing of diagnose's but the
config and the report's types and serialiser, so every other module may use it.
"""

from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from diagnose.config import DEFAULT_SKIP_STEPS, DEFAULT_STEPS, CallgraphOptions, OperatorsOptions
from diagnose.report import io as report_io
from diagnose.report.model import (Compile, GraphBreakAt, IterationStats, ProcessFacts, PythonThread,
                                   StartedProcess, ThreadCall)

SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"
CHILDREN_DIR = "children"  # a pass's workdir: children/<pid>/ holds what a process the target forked recorded

# The role of a process that ran torch work (ChildResult.role, report.model.ProcessShare.role)
MAIN = "main"  # the target's own process
POOL_WORKER = "pool worker"  # a multiprocessing.Pool or ProcessPoolExecutor worker
DATALOADER_WORKER = "DataLoader worker"
PROCESS = "process"  # another multiprocessing.Process (torch.multiprocessing.start_processes with fork, ...)
FORKED_CHILD = "forked child"  # os.fork()


@dataclass(frozen=True)
class WindowSpec:
    """The steps a pass measures: `skip` steps unmeasured, then `steps` measured (diagnose/steps.py).

    In function mode the same two numbers count calls of the function.
    """

    skip: int = DEFAULT_SKIP_STEPS  # --skip-steps
    steps: int = DEFAULT_STEPS  # --steps
    min_window_s: float = 0.0  # the window lasts at least this long (the first pass: steps.MIN_WINDOW_S)
    stop_after_window: bool = True  # end the target once the window is measured (script mode)
    find_loop: bool = False  # the first pass: look for the script's main loop if no other detector fires
    loop: str | None = None  # the passes after it: count this loop's iterations ("line 12", StepsSeen.loop)
    loop_group: int = 1  # ... and time its window's steps in groups of this many (StepsSeen.loop_group)


@dataclass(frozen=True)
class DistributedSpec:
    """Run the pass under torchrun (diagnose/distributed/launcher.py)."""

    nproc_per_node: int
    torchrun_args: tuple[str, ...] = ()  # rendezvous options for several nodes, as the user gave them


@dataclass(frozen=True)
class WhatIfSpec:
    """A what-if pass's side (diagnose/whatif/child.py)."""

    variant: str | None  # the variant applied; None: the unchanged side
    out_dir: str  # where the child writes what it applied and the outputs it captured


@dataclass(frozen=True)
class Overrides:
    """What a re-run of the uninstrumented workload changes from inside (a sweep point, a doctor trial, a
    what-if pass); the environment at launch is the launcher's (launch.run_pass `extra_env`)."""

    intra_op_threads: int | None = None  # pin torch's (and OpenMP's, MKL's) threads (runner._pin_threads)
    dataloader_workers: int | None = None  # every DataLoader gets this many workers (runner._pin_workers)
    flush_denormal: bool = False  # torch.set_flush_denormal(True) before the target runs
    what_if: WhatIfSpec | None = None


@dataclass(frozen=True)
class RankIdentity:
    """A torchrun rank as torchrun's environment describes it (distributed/launcher.identity)."""

    rank: int
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    hostname: str | None = None
    pid: int | None = None
    omp_num_threads: str | None = None  # OMP_NUM_THREADS as the rank saw it
    run_id: str | None = None
    started_at: float | None = None  # time.time()
    finished_at: float | None = None  # time.time() at its final write; None: it did not finish

    def with_finished(self, at: float) -> "RankIdentity":
        return replace(self, finished_at=at)


@dataclass(frozen=True)
class PassSpec:
    """One pass: which target, which layer's recorder (None: uninstrumented), which window, which options."""

    name: str  # "baseline", "operators", "sweep-3", "trial-0-jemalloc", ...
    layer: str | None  # the layer whose recorder runs in the child; None: uninstrumented
    script: str  # the target's absolute path
    display_script: str  # as the user typed it: the script's sys.argv[0]
    argv: tuple[str, ...]  # the script's arguments
    function: str | None  # function mode: the function to call; None: script mode
    cwd: str  # the directory the user ran diagnose in
    # the measured window; None: the whole run (--full-run, or the first pass found no window)
    window: WindowSpec | None
    expect_steps: bool | None = None  # the first pass found steps (True), none (False), or not known yet (None)
    # the first pass saw the model called from other threads: the operator pass records every thread
    # (torch.profiler's profile_all_threads, which records no per-operator memory)
    all_threads: bool = False
    memory: bool = True  # the memory layer's readings: RSS per step (uninstrumented), allocations (operator pass)
    operators: OperatorsOptions = OperatorsOptions()  # the operator pass's options
    callgraph: CallgraphOptions = CallgraphOptions()  # the python pass's options
    overrides: Overrides = Overrides()
    distributed: DistributedSpec | None = None
    wait_for: tuple[str, ...] = ()  # files observers create when they watch (markers.wait_for)
    workdir: str = ""  # where the child writes result.json and its artifacts (set by launch.run_pass)
    forked: bool = False  # forked from the fork server (doctor/process.py blas_pools reads it)
    pass_workdir: str | None = None  # a torchrun rank: the pass's workdir (its own is rank<R>/ below it)
    rank: RankIdentity | None = None  # a torchrun rank: who it is (set by the rank itself)

    @property
    def mode(self) -> str:
        return "function" if self.function else "script"

    @property
    def instrumented(self) -> bool:
        return self.layer is not None

    def with_(self, **changes: Any) -> "PassSpec":
        return replace(self, **changes)


@dataclass
class StepsSeen:
    """What the step clock saw in one pass (steps.StepClock.result)."""

    detector: str | None = None  # mark_step, optimizer, forward, loop; None: no step found
    loop: str | None = None  # the loop detector's loop in the script ("line 12"; diagnose/loops.py)
    # the loop detector timed the window's steps in groups of this many iterations, each step its group's mean
    # (steps under steps.GROUP_BELOW_S: a clock read every iteration would cost more than 1% of them); 1: each
    loop_group: int = 1
    detail: str | None = None  # "Adam.step()", "BertModel forward", "diagnose.mark_step() at train.py:40"
    steps_seen: int = 0  # steps the script ran (of the detector that counted them)
    setup_s: float | None = None  # workload start to step 1's start
    warmup_s: list[float] = field(default_factory=list)  # the skipped steps' times (at most KEPT_WARMUP_STEPS)
    step_s: list[float] = field(default_factory=list)  # the window's steps' times
    data_wait_s: list[float] = field(default_factory=list)  # per window step: time inside DataLoader iterators
    data_wait_at: str | None = None  # the line that waited longest for data
    batch_size: int | None = None  # dim 0 of the outermost module's first tensor input, the most common
    window_began: bool = False
    window_ended: bool = False
    window_first: int | None = None  # the window's first step (skip + 1)
    window_steps: int = 0  # steps measured in the window
    window_wall_s: float | None = None  # the window's start to its end (or its last step)
    stopped_target: bool = False  # the clock ended the target after the window
    switches: list[str] = field(default_factory=list)  # detector changes before the window
    ignored: dict[str, int] = field(default_factory=dict)  # boundaries of detectors not used, by detector
    off_main_thread: int = 0  # calls of the outermost module from threads other than the main one
    hook_notes: list[str] = field(default_factory=list)  # hooks a module refused, and what counted its calls instead
    # modules torch's set-up code called outside any forward (quantize_dynamic's observers, jit.trace): class -> calls
    set_up_calls: dict[str, int] = field(default_factory=dict)
    # the process's resident set (bytes) at the window's start and at the end of each of its steps (the
    # uninstrumented pass: layers/memory/readings.RssReader; at most MAX_WINDOW_STEP_TIMES + 1)
    rss_bytes: list[int] = field(default_factory=list)


@dataclass
class MemoryReadings:
    """The uninstrumented pass's memory readings at its window's end (diagnose/layers/memory/readings.py)."""

    rss_bytes: int | None = None  # resident set then
    mem_available_bytes: int | None = None  # /proc/meminfo MemAvailable
    cgroup_limit_bytes: int | None = None  # the cgroup's memory limit; None: no limit (or no cgroup)
    cgroup_used_bytes: int | None = None  # the cgroup's memory use
    step_at_window_end: int | None = None  # steps the script had run
    total_steps: int | None = None  # steps the script will run, from the loops around the step; None: unknown
    total_basis: str = ""  # how total_steps was read, or why it is unknown
    parameters_bytes: int | None = None  # the outermost module's parameters and buffers
    gradients_bytes: int | None = None  # their .grad tensors
    optimizer_state_bytes: int | None = None  # state tensors of the optimizers whose step() ran
    errors: list[str] = field(default_factory=list)  # readings that failed, and why


@dataclass
class TorchInfo:
    """The child's torch, and its thread settings when the pass ended."""

    version: str | None = None
    parallel_backend: str | None = None  # "OpenMP", from torch.__config__.parallel_info()
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    default_intra_op_threads: int | None = None  # before the target ran


@dataclass
class PinnedThreads:
    """A sweep point's thread pin (runner._pin_threads)."""

    value: int
    ignored_calls: list[int] = field(default_factory=list)  # the target's own set_num_threads calls, ignored


@dataclass
class PinnedWorkers:
    """A sweep point's DataLoader workers (runner._pin_workers)."""

    value: int
    target_asked_for: list[int] = field(default_factory=list)  # num_workers each DataLoader was built with


@dataclass
class Applied:
    """The overrides as the child applied them."""

    intra_op_threads: PinnedThreads | None = None
    dataloader_workers: PinnedWorkers | None = None
    flush_denormal: bool | None = None  # what torch.set_flush_denormal(True) returned: True where supported


@dataclass
class ChildResult:
    """What a process the target forked recorded in an operator pass, in children/<pid>/result.json: written by
    that process only, atomically, when it ends (children.ChildPass)."""

    pid: int
    role: str  # POOL_WORKER, DATALOADER_WORKER, PROCESS, FORKED_CHILD
    name: str | None = None  # multiprocessing's name for it: "ForkPoolWorker-3"; None: os.fork()
    ended: str = ""  # how it ended: "os._exit", "SIGTERM", "exit"
    wall_s: float | None = None  # from its start (the fork) to its end: children are recorded whole
    raw: dict[str, Any] | None = None  # the operator recorder's data, as PassResult.raw
    raw_error: str | None = None  # its recorder failed: why


@dataclass
class Scheduling:
    """The target process's threads over the window, from schedstat (procfs.task_sched_ns): seconds on a CPU and
    seconds runnable but waiting on a run queue. Threads that ended inside the window are not counted."""

    run_s: float
    wait_s: float

    @property
    def wait_share(self) -> float:
        """The share of the threads' runnable time spent waiting for a CPU."""
        total = self.run_s + self.wait_s
        return self.wait_s / total if total > 0 else 0.0


@dataclass
class PassResult:
    """What one pass measured: how the target ended, its timings and steps, and its layer's data."""

    name: str
    layer: str | None = None
    exit_code: int = 0  # the target's, as `python script.py` would have exited
    error: str | None = None  # one line: how the target failed, or None
    error_kind: str | None = None  # exception, exit, os_exit, interrupted, no_function, crashed
    traceback: list[str] = field(default_factory=list)  # the target's frames, file:line in function: code
    wall_s: float | None = None  # the window, else the whole workload
    # function mode: each measured call; script mode: each step of the window
    iteration_s: list[float] = field(default_factory=list)
    minor_faults: int | None = None  # this process's minor page faults over wall_s
    # its threads' time on a CPU and waiting for one, over wall_s (uninstrumented passes: the baseline, re-runs)
    scheduling: Scheduling | None = None
    steps: StepsSeen | None = None  # script mode: the step clock's account
    torch: TorchInfo = field(default_factory=TorchInfo)
    compile: Compile | None = None  # torch.compile's work in the process (runner.compile_info)
    raw: dict[str, Any] | None = None  # the layer's own data, read only by that layer's analyse
    raw_error: str | None = None  # the layer's recorder failed: why
    applied: Applied = field(default_factory=Applied)
    thread_calls: list[ThreadCall] = field(default_factory=list)  # the uninstrumented pass's set_num_threads calls
    python_threads: list[PythonThread] = field(default_factory=list)  # the threads it started (threading)
    process: ProcessFacts | None = None  # the uninstrumented pass's readings at the window's end (doctor)
    process_error: str | None = None  # why those readings failed
    rank: RankIdentity | None = None  # a torchrun rank's identity
    forked: int = 0  # processes the target forked (os.fork, fork Pools, DataLoader workers)
    # Python processes the target started from a fresh interpreter (spawn, forkserver, subprocess): no pass records
    # them (children.watch_exec)
    not_recorded: list[StartedProcess] = field(default_factory=list)
    ranks_reported: int | None = None  # a torchrun pass's merged result: ranks that wrote a result
    memory: MemoryReadings | None = None  # the uninstrumented pass's memory readings at the window's end

    @property
    def measured_s(self) -> list[float]:
        """The step (or call) times, else the wall time as one sample: what a re-run compares."""
        return list(self.iteration_s) or ([self.wall_s] if self.wall_s else [])

    @property
    def median_s(self) -> float | None:
        """The median step (or call), else the wall time: one re-run's figure (a sweep point, a --repeat run)."""
        samples = self.measured_s
        return statistics.median(samples) if samples else None


@dataclass
class OutputDiff:
    """A what-if pass's outputs against the reference pass's (whatif/outputs.difference)."""

    max_abs_diff: float | None = None
    rel_diff: float | None = None  # max_abs_diff / max |reference|
    error: str | None = None  # why they could not be compared (shapes, counts, non-finite values)


@dataclass
class WhatIfPass:
    """What one what-if pass's child wrote beside its result (whatif/child.py), read by layers/whatif.py."""

    variant: str | None = None  # None: the unchanged side
    root: str | None = None  # the outermost module's class
    applied: str | None = None  # what was applied, or "failed: why"
    calls: int = 0  # calls of the outermost module
    captured: str | None = None  # what the reference pass saved of its output, for the report
    diff: OutputDiff | None = None  # against the reference pass's output; None: not compared
    first_call_s: float | None = None  # the first call with the change applied (compile: tracing and building)
    apply_s: float | None = None  # applying the change (torch.compile() itself)
    compile: Compile | None = None  # torch.compile's counters at the window's end
    graph_breaks: list[GraphBreakAt] = field(default_factory=list)  # dynamo's graph-break log, source as a path
    # channels_last: tensors the variant changed the layout of (4-D parameters and buffers at its first call, 4-D
    # inputs at every call); 0: it changed nothing (no 4-D tensor, or all channels-last already)
    converted: int = 0


def iteration_stats(samples: list[float]) -> IterationStats | None:
    """A pass's step (or call) times as the report's statistics; None without any."""
    if not samples:
        return None
    qs = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return IterationStats(n=len(samples), median_s=statistics.median(samples), q1_s=qs[0], q3_s=qs[2],
                          min_s=min(samples), max_s=max(samples))


def write(obj: PassSpec | PassResult | WhatIfPass, path: str) -> None:
    """Atomically: a temporary file of this process's own, then renamed."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(report_io.to_dict(obj), fh, default=str)
    os.replace(tmp, path)


def child_dir(workdir: str, pid: int) -> str:
    return os.path.join(workdir, CHILDREN_DIR, str(pid))


def read_children(workdir: str) -> list[ChildResult]:
    """The results the target's forked processes wrote in a pass's workdir, by pid (those that died unwritten
    are not there)."""
    root = os.path.join(workdir, CHILDREN_DIR)
    try:
        names = sorted(os.listdir(root), key=lambda n: int(n) if n.isdigit() else 0)
    except OSError:
        return []
    found = (read_result(os.path.join(root, name, RESULT_FILE), ChildResult) for name in names)
    return [child for child in found if child is not None]


def read_spec(path: str) -> PassSpec:
    with open(path) as fh:
        return report_io.typed(PassSpec, json.load(fh))


def read_result(path: str, kind: type = PassResult) -> Any:
    """A PassResult (or `kind`) from a child's file; None when it is missing or unreadable (the child died
    before writing it)."""
    try:
        with open(path) as fh:
            return report_io.typed(kind, json.load(fh))
    except (OSError, ValueError):
        return None
