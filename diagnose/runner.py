"""The child process that runs one pass: `python -m diagnose.runner SPEC.json`.

It runs the target as `python script.py ARGS` would (or imports it and calls
`function` warmup+iters times), optionally under one layer's recorder, and
always writes `result.json` into the spec's workdir, even when the target
raises, calls sys.exit or os._exit, or is interrupted. The parent never runs
user code; this process exists so that whatever the target does cannot take
the report down with it.

In script mode the runner finds the script's steps and measures the window
the spec asks for (diagnose/steps.py): the layer's recorder starts when the
window begins and stops when it ends, and by default the target is then
ended like a normal exit. A pass that does not know yet whether the script
has steps (`expect_steps` not true) records from the workload's start and
starts over when a window begins; a script without steps is measured whole.
The markers observers wait for are in diagnose/markers.py.

It reads a protocol.PassSpec and writes a protocol.PassResult (the fields
are documented there): only this process writes it, atomically. Nothing of
it follows a process the target forks (`_disown`); in an operator pass such
a process records itself (diagnose/children.py).

Under torchrun (the spec has `distributed`), every rank runs this module: it
works in `rank<RANK>/` under the pass workdir, writes its result.json there
with `rank` (its identity from torchrun's environment, and when it finished),
and leaves the pass-level start marker when the first rank starts and the stop
marker when the last local rank stops (diagnose/distributed/launcher.py).
"""

from __future__ import annotations

import faulthandler
import os
import runpy
import signal
import sys
import threading
import time
import traceback
import types
from typing import Any

from diagnose import children, loops, markers, procfs, protocol
from diagnose.doctor import process as process_facts
from diagnose.doctor.environment import CpuStat, read_own_cpu_stat
from diagnose.layers import get as get_layer
from diagnose.protocol import PassResult, PassSpec, PinnedThreads, PinnedWorkers, TorchInfo, WindowSpec
from diagnose.report import io as report_io
from diagnose.report.model import (Compile, GraphBreak, ProcessFacts, PythonThread, Recompile, SubnormalScan,
                                   ThreadCall)
from diagnose.stall import STACKS_FILE
from diagnose.steps import StepClock, WindowComplete
from diagnose.usercode import UserCode

# exit status of the runner itself when the function named in the spec is missing
NO_FUNCTION = 97
FULL_RUN = WindowSpec(skip=0, steps=1 << 62, stop_after_window=False)  # --full-run: count steps, record all


def _torch_info(torch, info: TorchInfo) -> None:
    info.version = torch.__version__
    try:
        for line in torch.__config__.parallel_info().splitlines():
            if line.startswith("ATen parallel backend:"):
                info.parallel_backend = line.split(":", 1)[1].strip()
    except Exception:  # noqa: BLE001 - informational only
        pass
    info.intra_op_threads = torch.get_num_threads()
    info.inter_op_threads = torch.get_num_interop_threads()


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1  # sys.exit("message") exits 1, like python


def _traceback_summary(tb, runner_file: str) -> list[str]:
    frames = [f for f in traceback.extract_tb(tb) if os.path.realpath(f.filename) != runner_file
              and "/runpy.py" not in f.filename and not f.filename.startswith("<frozen")]
    return [f"{f.filename}:{f.lineno} in {f.name}: {(f.line or '').strip()}" for f in frames[-12:]]


def _pin_threads(torch, n: int) -> PinnedThreads:
    """Sweep point: run with n intra-op threads whatever the target asks for.

    The target's own torch.set_num_threads calls in this process are recorded
    and ignored; in forked children (DataLoader workers) they still apply.
    OMP_NUM_THREADS and MKL_NUM_THREADS are set too, before the target runs,
    for what it imports or starts later (numpy's BLAS, child processes): the
    point is forked from the fork server, whose torch never ran a parallel
    region, so this process is set up as a fresh one with those variables.
    """
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(n)
    torch.set_num_threads(n)
    real, owner = torch.set_num_threads, os.getpid()
    ignored: list[int] = []

    def pinned(k: int) -> None:
        if os.getpid() == owner:
            ignored.append(k)
        else:
            real(k)

    torch.set_num_threads = pinned
    return PinnedThreads(value=n, ignored_calls=ignored)


MAX_THREAD_CALLS = 20  # targets set their thread counts a handful of times; a loop that sets them is cut here


def _record_thread_calls(torch, usercode: UserCode, calls: list[ThreadCall]) -> None:
    """Uninstrumented pass: note in `calls` where the target sets its thread counts (for the threads findings):
    torch.set_num_threads / set_num_interop_threads, and the DataLoaders it builds with workers.

    One dict lookup per call, which targets make a handful of times; forked
    children (DataLoader workers) are not recorded.
    """
    owner = os.getpid()
    for name in ("set_num_threads", "set_num_interop_threads"):
        real = getattr(torch, name)

        def recorded(k: int, _real=real, _name=name) -> None:
            if os.getpid() == owner and len(calls) < MAX_THREAD_CALLS:
                calls.append(ThreadCall(_name, k, usercode.location(sys._getframe(1))))
            _real(k)

        setattr(torch, name, recorded)
    from torch.utils.data import DataLoader

    real_init = DataLoader.__init__

    def init(self, *args, **kwargs) -> None:
        workers = args[5] if len(args) > 5 else kwargs.get("num_workers", 0)
        if os.getpid() == owner and isinstance(workers, int) and workers > 0 and len(calls) < MAX_THREAD_CALLS:
            calls.append(ThreadCall("DataLoader", workers, usercode.location(sys._getframe(1))))
        real_init(self, *args, **kwargs)

    DataLoader.__init__ = init


MAX_PYTHON_THREADS = 256  # a script that starts a thread per batch is cut here; the rest count as unnamed threads
OWN_THREAD_PREFIX = "diagnose-"  # diagnose's own threads in the target (loops.py, children.py) are not the target's


def _record_python_threads(usercode: UserCode, started: list[PythonThread]) -> None:
    """Uninstrumented pass: note in `started` each thread the target starts with Python's threading (a producer
    thread, a ThreadPoolExecutor's workers): its kernel tid, name, the function it runs and the user's line that
    started it. /proc names such a thread like its process, as it does OpenMP's workers, so without this the thread
    sampler counts a busy Python thread in torch's intra-op pool (layers/threads/analysis.pool_of).

    One wrapper around Thread.start, after which the thread's native_id is set (start waits until the thread
    runs); forked children (DataLoader workers) are not recorded.
    """
    owner, real_start = os.getpid(), threading.Thread.start

    def start(thread: threading.Thread) -> None:
        func = getattr(thread, "_target", None)  # before the start: run() deletes it when the thread ends
        if func is None and type(thread).run is not threading.Thread.run:  # a subclass's own run()
            func = type(thread).run
        real_start(thread)
        if os.getpid() != owner or len(started) >= MAX_PYTHON_THREADS or thread.name.startswith(OWN_THREAD_PREFIX):
            return
        code = getattr(func, "__code__", None)
        defined_at = (f"{usercode.display(code.co_filename)}:{code.co_firstlineno}"
                      if code is not None and usercode.is_user(code.co_filename) else None)
        started.append(PythonThread(pid=owner, tid=thread.native_id or 0, name=thread.name,
                                    target=getattr(func, "__qualname__", None), defined_at=defined_at,
                                    started_at=usercode.location(sys._getframe(1))))

    threading.Thread.start = start


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # torch sizes its intra-op pool from these at import


def _imported_torch(namespace: dict[str, Any]) -> bool:
    """Whether a module's globals hold anything of torch's (`import torch`, `from torch import nn`, ...)."""
    for value in namespace.values():
        name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(name, str) and (name == "torch" or name.startswith("torch.")):
            return True
    return False


def _follow_thread_variables(torch, usercode: UserCode, calls: list[ThreadCall] | None) -> None:
    """The target's own OMP_NUM_THREADS / MKL_NUM_THREADS assignments (`os.environ[...] = ...`, os.putenv).

    This process imports torch before the target runs, and torch sizes its intra-op pool from these
    variables when it is imported: a script that sets one before its own `import torch` runs that many
    threads under plain Python, and would not here. An audit hook on os.putenv (which every os.environ
    assignment calls) sees the assignment and the line that made it, exactly; a source search for the
    variable's name could not tell an assignment that ran from one in a branch that did not. When the
    user's code making it holds nothing of torch yet, the count is applied with torch.set_num_threads, as
    plain Python's import would; with `calls` (the uninstrumented pass) the assignment is recorded. The
    hook cannot be removed and sees every audited event (sys._getframe, open, import), each then costing
    about 0.15 us more; a torch operator raises none. Forked children (DataLoader workers) are left alone.
    """
    real, owner = torch.set_num_threads, os.getpid()
    wanted = {name.encode(): name for name in THREAD_VARIABLES}

    def hook(event: str, args: tuple) -> None:
        if event != "os.putenv" or os.getpid() != owner:
            return
        key = args[0].encode() if isinstance(args[0], str) else args[0]
        name = wanted.get(key)
        if name is None:
            return
        value = args[1].decode(errors="replace") if isinstance(args[1], bytes) else str(args[1])
        frame = sys._getframe(1)
        while frame is not None and not usercode.is_user(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None or not value.strip().isdigit() or int(value) < 1:
            return
        if not _imported_torch(frame.f_globals):
            real(int(value))
        if calls is not None and len(calls) < MAX_THREAD_CALLS:
            calls.append(ThreadCall(name, int(value), usercode.location(frame)))

    sys.addaudithook(hook)


def compile_info() -> Compile | None:
    """torch.compile's work in this process so far: its compile time, frames and graphs, graph breaks and
    recompiles with their reasons (torch._dynamo's own counters); None when nothing was compiled."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return None
    try:
        counters = utils.counters
        frames = int((counters.get("frames") or {}).get("total", 0))
        if not frames:
            return None
        names, values = utils.compile_times(repr="csv", aggregate=True)
        times = dict(zip(names, values))
        breaks = sorted(((str(r).strip().splitlines()[0][:300] if r else "?", int(n))
                         for r, n in (counters.get("graph_break") or {}).items()), key=lambda x: -x[1])
        recompiles = []
        for code, reasons in list(utils.guard_failures.items())[:20]:
            where = f"{os.path.relpath(code.co_filename)}:{code.co_firstlineno}" if hasattr(code, "co_filename") else str(code)
            recompiles.append(Recompile(f"{getattr(code, 'co_name', '?')} at {where}",
                                        [str(r)[:300] for r in reasons[:5]], len(reasons)))
        return Compile(compile_s=float(times.get("_compile.compile_inner", 0.0)), frames=frames,
                       graphs=int((counters.get("stats") or {}).get("unique_graphs", 0)),
                       graph_breaks=[GraphBreak(r, n) for r, n in breaks[:20]], recompiles=recompiles)
    except Exception as exc:  # noqa: BLE001 - torch's internals move between versions: say so, lose nothing else
        return Compile(error=f"{type(exc).__name__}: {exc}")


_stack_file = None  # kept open for faulthandler, which writes to its file descriptor from a signal handler


def install_stack_dump(workdir: str) -> None:
    """SIGUSR1 writes every Python thread's stack into stacks.txt (diagnose/stall.py asks when a pass hangs)."""
    global _stack_file
    try:
        _stack_file = open(os.path.join(workdir, STACKS_FILE), "w")
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True, chain=False)
    except (OSError, RuntimeError, ValueError):
        pass  # no dump then; the hang is still detected and reported


def minor_faults() -> int | None:
    """This process's minor page faults so far (/proc/self/stat, field 10): pages it touched for the first
    time, fresh memory from the allocator among them."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[7])
    except (OSError, ValueError, IndexError):
        return None


def _scheduling(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> protocol.Scheduling | None:
    """The threads' schedstat between two readings; a thread started meanwhile counts from zero. None: no
    schedstat here, or the kernel's scheduler statistics are off (every reading 0 0)."""
    if not after or not any(run or wait for run, wait in after.values()):
        return None
    run = sum(r - before.get(tid, (0, 0))[0] for tid, (r, _) in after.items())
    wait = sum(w - before.get(tid, (0, 0))[1] for tid, (_, w) in after.items())
    return protocol.Scheduling(run_s=round(max(0, run) / 1e9, 6), wait_s=round(max(0, wait) / 1e9, 6))


def _pin_workers(workers: int) -> PinnedWorkers:
    """Sweep point: every DataLoader gets `workers` worker processes."""
    from torch.utils.data import DataLoader

    real_init = DataLoader.__init__
    seen: list[int] = []

    def init(self, *args, **kwargs):
        args = list(args)
        if len(args) > 5:  # num_workers given positionally
            seen.append(args[5])
            args[5] = workers
        else:
            seen.append(kwargs.get("num_workers", 0))
            kwargs["num_workers"] = workers
        if workers == 0:  # options that DataLoader rejects without workers
            kwargs.pop("prefetch_factor", None)
            kwargs["persistent_workers"] = False
        real_init(self, *args, **kwargs)

    DataLoader.__init__ = init
    return PinnedWorkers(value=workers, target_asked_for=seen)


class Run:
    def __init__(self, spec: PassSpec):
        self.spec = spec
        self.result = PassResult(name=spec.name, layer=spec.layer)
        self.recorder = None
        self.recording = False
        self.finished = False
        self.t0: float | None = None
        self.clock: StepClock | None = None
        self.compile_before: float | None = None  # torch.compile seconds spent when the window began
        self.faults0: int | None = None  # this process's minor page faults when the measured part began
        self.sched0: dict[int, tuple[int, int]] = {}  # its threads' schedstat then (procfs.task_sched_ns)
        self.baseline = not spec.instrumented  # the uninstrumented pass (and the re-runs: trials, sweep points)
        self.cpu_stat0: CpuStat | None = None  # the cgroup's cpu.stat when the measured part began
        self.ended_after_window = False
        self.whatif = None  # a what-if pass's variant (diagnose/whatif/child.py)
        self.script_length: tuple[int | None, str] | None = None  # the memory layer's (total steps, how read)
        self.child: children.ChildPass | None = None  # in a process the target forked during an operator pass

    def record_exit(self, code: int, kind: str, message: str | None) -> None:
        self.result.exit_code = code
        self.result.error_kind = kind
        self.result.error = message

    def execute(self) -> None:
        spec = self.spec
        # Imported before the clock starts: profiler start imports torch._dynamo
        # (~1.4 s), which the uninstrumented pass would otherwise pay inside its
        # clock (an optimizer's first use imports it). A re-run of the
        # uninstrumented workload over the first pass's window (a trial, a sweep
        # point, a repeat) does not: what the script imports lands before that
        # window in every re-run alike, and a re-run in a fresh interpreter (an
        # allocator or BLAS trial) spent 1.7 s of its 3.3 s start on it here.
        import torch

        if spec.instrumented or spec.window is None or not spec.expect_steps:
            import torch._dynamo  # noqa: F401
        import torch.profiler  # noqa: F401

        self.result.torch.default_intra_op_threads = torch.get_num_threads()
        overrides, applied = spec.overrides, self.result.applied
        if overrides.intra_op_threads:
            applied.intra_op_threads = _pin_threads(torch, overrides.intra_op_threads)
        else:  # the target's own thread settings: followed in every pass, recorded in the uninstrumented one
            usercode = UserCode(spec.script, spec.cwd or os.getcwd())
            calls = self.result.thread_calls if spec.layer is None else None
            _follow_thread_variables(torch, usercode, calls)  # first: it applies a count with torch's own call
            if calls is not None:
                _record_thread_calls(torch, usercode, calls)
                _record_python_threads(usercode, self.result.python_threads)
        if overrides.flush_denormal:  # a doctor trial (diagnose/doctor/trials.py)
            applied.flush_denormal = bool(torch.set_flush_denormal(True))
        if overrides.what_if is not None:  # a what-if pass (diagnose/whatif/): seeded, the variant applied
            from diagnose.whatif.child import WhatIfChild  # imports torch-side helpers only what-if passes need

            self.whatif = WhatIfChild(torch, overrides.what_if, spec.name)
            self.whatif.install()
        if overrides.dataloader_workers is not None:
            applied.dataloader_workers = _pin_workers(overrides.dataloader_workers)
        if spec.layer is not None:
            self.recorder = get_layer(spec.layer).recorder(spec)
            self.recorder.prepare()  # hooks and modes in place before the target compiles anything
        script = spec.script
        sys.argv = [spec.display_script or script, *spec.argv]
        sys.path[0] = os.path.dirname(script)
        if spec.mode == "script":
            self._run_script(torch, script)
            return
        namespace = runpy.run_path(script, run_name="__diagnose_target__")
        func = namespace.get(spec.function)
        if not callable(func):
            self.record_exit(NO_FUNCTION, "no_function",
                             f"{spec.display_script or script} has no function '{spec.function}'")
            return
        window = spec.window or WindowSpec()
        for i in range(window.skip):
            if i == window.skip - 1 and self.recorder is not None:
                self.recorder.last_warmup_step()
            func()
        self._start(record=True)
        times = self.result.iteration_s
        for _ in range(window.steps):
            t = time.perf_counter()
            func()
            times.append(time.perf_counter() - t)
            if self.recorder is not None:
                self.recorder.step()
        self._stop_clock()

    def _run_script(self, torch, script: str) -> None:
        window = self.spec.window
        full_run = window is None
        self.clock = StepClock(FULL_RUN if full_run else window,
                               on_begin=None if full_run else self._begin_window,
                               on_end=None if full_run else self._end_window,
                               on_last_warmup=self.recorder.last_warmup_step if self.recorder else None,
                               agreement=_agreement(self.spec))
        self.clock.keep_inputs = self.baseline
        if self.baseline and self.spec.memory:  # the memory layer's RSS at every step boundary (layers/memory/)
            from diagnose.layers.memory.readings import rss_reader  # the memory layer's child side

            self.clock.read_rss = rss_reader()
        if self.recorder is not None and hasattr(self.recorder, "step_boundary") and self.spec.memory:
            self.clock.on_step = self.recorder.step_boundary  # the operator pass marks each step in its profile
        self.clock.install(torch)
        hint = window.loop if window else None
        # the first pass looks for the main loop (with --full-run too: its steps are still counted)
        find = window.find_loop if window else self.spec.expect_steps is None
        probed = loops.probe(script, only=hint) if hint or find else None
        finder = None
        if probed is not None and hint:  # the first pass counted this loop's iterations: count them too
            site = probed.sites[0]
            self.clock.arm_loop(lambda: loops.arm(probed, site, self.clock, late=False))
        elif probed is not None:  # no steps known yet: look for the main loop while no other detector fires
            finder = loops.Finder(probed, self.clock)
            finder.start()
        # a pass that knows the script has steps records only the window; others record from the start
        self._start(record=full_run or not self.spec.expect_steps)
        try:
            if probed is not None:
                loops.run(probed)
            else:
                runpy.run_path(script, run_name="__main__")
        except WindowComplete:
            self.ended_after_window = True  # the window is measured: the target ends here, like a normal exit
        finally:
            if finder is not None:
                finder.stop()
        self.clock.settle()  # the loop's stamped boundaries, before anything reads the steps
        self._stop_clock()

    def _start(self, record: bool) -> None:
        # observers (the thread sampler) begin measuring when this marker appears, once they watch for it
        markers.wait_for(list(self.spec.wait_for))
        self._mark(markers.START)
        if record and self.recorder is not None:
            self.recorder.start()
            self.recording = True
        self._start_clock()

    def _start_clock(self) -> None:
        """The measured part begins: its clock, page-fault count and (uninstrumented) the cgroup's counters and
        its threads' schedstat."""
        self.t0 = time.perf_counter()
        self.faults0 = minor_faults()
        if self.baseline:
            self.cpu_stat0 = read_own_cpu_stat()
            self.sched0 = procfs.task_sched_ns(os.getpid())

    def _mark(self, name: str) -> None:
        markers.touch(self.spec.workdir, name)
        if self.spec.rank is not None:  # a torchrun rank: the first to start / the last to stop marks the pass
            from diagnose.distributed import launcher  # torchrun passes only

            launcher.mark(self.spec, name, started=name != markers.STOP)

    def _begin_window(self) -> None:
        """The window begins: observers and the recorder start over, the clock too."""
        self._mark(markers.WINDOW)
        if self.baseline and self.spec.memory:  # the script's length, from the loops around this step boundary
            from diagnose.layers.memory import readings  # the memory layer's child side

            self.script_length = readings.loops(UserCode(self.spec.script, self.spec.cwd or os.getcwd()))
        compiled = compile_info()
        self.compile_before = compiled.compile_s or 0.0 if compiled else 0.0
        if self.recorder is not None:
            if self.recording:
                self.recorder.stop()
            self.recorder.start()
            self.recording = True
        self._start_clock()

    def _end_window(self) -> None:
        self._stop_clock()
        self._stop_recorder()
        self._write(final=False)  # a checkpoint: the measurement survives a hang at exit

    def _stop_recorder(self) -> None:
        if self.recording:
            self.recording = False
            self.recorder.stop()

    def _stop_clock(self) -> None:
        if self.t0 is not None and self.result.wall_s is None:
            self.result.wall_s = time.perf_counter() - self.t0
            faults = minor_faults()
            if faults is not None and self.faults0 is not None:
                self.result.minor_faults = faults - self.faults0
            if self.baseline:
                self.result.scheduling = _scheduling(self.sched0, procfs.task_sched_ns(os.getpid()))
            self._mark(markers.STOP)
            if self.baseline:  # after the stop marker: the thread sampler does not watch the readings
                self._read_process()
                self._read_memory()

    def _read_process(self) -> None:
        """The doctor's readings at the window's end (diagnose/doctor/process.py), after the clock stopped."""
        try:
            after = read_own_cpu_stat()
            clock = self.clock
            frame = clock.loop_frame if clock else None  # the loop detector's loop: its variables hold the weights
            subnormals, scope = process_facts.scan_subnormals(clock._root if clock else None,  # noqa: SLF001
                                                              clock.last_inputs if clock else (),
                                                              loops.variables(frame) if frame is not None else [],
                                                              clock.detail if frame is not None else None)
            libraries = process_facts.libraries()
            self.result.process = ProcessFacts(
                libraries=libraries, blas_pools=process_facts.blas_pools(libraries, self.spec.forked),
                cpu_stat_path=after.path if after else None,
                cpu_stat_before=self.cpu_stat0.values if self.cpu_stat0 else {},
                cpu_stat_after=after.values if after else {},
                subnormals=report_io.typed(list[SubnormalScan], subnormals), subnormal_scope=scope)
        except Exception as exc:  # noqa: BLE001 - best effort: the doctor says what it could not read
            self.result.process_error = f"{type(exc).__name__}: {exc}"

    def _read_memory(self) -> None:
        """The memory layer's readings at the window's end (layers/memory/readings.py), script mode only."""
        clock = self.clock
        if clock is None or clock.began_at is None or not self.spec.memory:
            return
        try:
            from diagnose.layers.memory import readings  # the memory layer's child side

            optimizers = [o for o in (ref() for ref in clock.optimizers.values()) if o is not None]
            self.result.memory = readings.readings(self.script_length, clock._root, optimizers,  # noqa: SLF001
                                                   clock.count, clock.rss_bytes[-1] if clock.rss_bytes else None)
        except Exception as exc:  # noqa: BLE001 - best effort: the memory section says what it could not read
            self.result.memory = protocol.MemoryReadings(errors=[f"{type(exc).__name__}: {exc}"])

    def finish(self) -> None:
        """Stop recording and write result.json; safe to call twice."""
        if self.finished:
            return
        self.finished = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not lose the results
        self._stop_clock()
        self._write(final=True)

    def _write(self, final: bool) -> None:
        """Gather what was measured and write result.json. Once the window is measured this runs before the
        target goes on (a checkpoint), so that a target hanging at exit (a destructor deadlock) leaves its
        results; the final write adds how the target ended."""
        result = self.result
        compiled = compile_info()
        if compiled:
            if self.compile_before is not None and compiled.compile_s is not None:
                compiled.in_window_s = max(0.0, compiled.compile_s - self.compile_before)
            result.compile = compiled
        if self.whatif is not None:
            self.whatif.write(compiled)
        if self.clock is not None:
            if final:
                self.clock.uninstall()
            steps = result.steps = self.clock.result()
            if steps.window_began:
                result.iteration_s = steps.step_s
                if not steps.window_ended and steps.window_wall_s:
                    # the script ended inside the window: its wall time is up to the last step
                    result.wall_s = steps.window_wall_s
        if self.recorder is not None and result.raw is None and result.raw_error is None:
            try:
                self._stop_recorder()
                if final:
                    self.recorder.release()
                result.raw = self.recorder.collect(self.spec.workdir)
            except Exception as exc:  # noqa: BLE001 - reported as the layer's failure
                result.raw_error = f"{type(exc).__name__}: {exc}"
        elif self.recorder is not None and final:
            self.recorder.release()
        try:
            import torch

            _torch_info(torch, result.torch)
        except Exception:  # noqa: BLE001
            pass
        if self.spec.rank is not None:
            result.rank = self.spec.rank.with_finished(time.time()) if final else self.spec.rank
        protocol.write(result, os.path.join(self.spec.workdir, protocol.RESULT_FILE))


def _agreement(spec: PassSpec):
    """A torchrun rank's WindowAgreement (the ranks end the window at one step); None outside torchrun."""
    if spec.rank is None:
        return None
    from diagnose.distributed.window import WindowAgreement  # torchrun passes only

    return WindowAgreement(spec.rank.rank)


def _count_fork(run: Run, owner: int) -> None:
    if os.getpid() == owner:
        run.result.forked += 1


def _disown(run: Run, real_os_exit, interrupted, previous_sigterm) -> None:
    """In a process the target forks (a Pool or DataLoader worker, os.fork()): none of the runner's process-wide
    state follows it, so the child runs as it would without diagnose. Its os._exit is the real one, SIGTERM does
    what it did before the runner (Pool.terminate() ends workers silently, as in a plain run), no stack dump goes
    to the pass's file, the step clock's hooks are gone, and the pass's result is never written from it.

    In an operator pass the child is recorded by a pass of its own (children.ChildPass), which writes its own
    file when it ends."""
    os._exit = real_os_exit
    children.forget_wake()  # a worker's signal pipe, when this is a worker's own child
    sigterm = previous_sigterm if signal.getsignal(signal.SIGTERM) is interrupted else signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, sigterm)
    try:
        faulthandler.unregister(signal.SIGUSR1)
    except (RuntimeError, ValueError):
        pass
    run.finished = True  # finish() writes nothing here
    if run.clock is not None:
        run.clock.uninstall()
    run.child = None
    # Not with every thread recorded: that profile is global, and a fresh one in the child first stops it,
    # reducing all the parent's events there (measured: minutes for a forked child of a model served from
    # threads); the operator layer's notes say the children are not recorded then
    if run.recorder is not None and hasattr(run.recorder, "restart_in_child") and not run.spec.all_threads:
        try:
            run.child = children.ChildPass(run.spec, run.recorder, real_os_exit, sigterm)
        except Exception:  # noqa: BLE001 - the child runs unrecorded rather than fail
            run.child = None


def main(argv: list[str]) -> int:
    spec = protocol.read_spec(argv[0])
    if spec.distributed is not None:  # one rank of a torchrun job: a workdir of its own
        from diagnose.distributed import launcher  # torchrun passes only

        spec = launcher.enter_rank(spec)
    install_stack_dump(spec.workdir)
    os.chdir(spec.cwd or os.getcwd())
    run = Run(spec)
    runner_file = os.path.realpath(__file__)
    real_os_exit, owner = os._exit, os.getpid()

    def os_exit_hook(code):  # the target called os._exit: keep what was measured
        if os.getpid() != owner:  # a child the target forked that still holds the hook: not ours to write for
            real_os_exit(code)
        run.record_exit(code, "os_exit", f"the target called os._exit({code})")
        try:
            run.finish()
        finally:
            real_os_exit(code)

    def interrupted(*_):  # SIGTERM (e.g. from the parent's timeout) becomes an interruption we can report
        raise KeyboardInterrupt

    previous_sigterm = signal.getsignal(signal.SIGTERM)
    os._exit = os_exit_hook
    signal.signal(signal.SIGTERM, interrupted)
    os.register_at_fork(after_in_child=lambda: _disown(run, real_os_exit, interrupted, previous_sigterm),
                        after_in_parent=lambda: _count_fork(run, owner))
    if spec.instrumented:
        children.watch_exec(run.result, owner)
    code = 0
    try:
        run.execute()
        code = run.result.exit_code
    except SystemExit as exc:
        code = _exit_code(exc.code)
        if code:
            run.record_exit(code, "exit", f"the target called sys.exit({exc.code!r})")
    except KeyboardInterrupt:
        code = 130
        run.record_exit(code, "interrupted", "interrupted (KeyboardInterrupt)")
    except BaseException as exc:  # noqa: BLE001 - everything the target raises is reported
        code = 1
        where = _traceback_summary(exc.__traceback__, runner_file)
        message = f"{type(exc).__name__}: {exc}".strip()
        run.record_exit(code, "exception", message)
        run.result.traceback = where
        # what `python script.py` would have printed, without diagnose's frames
        print("Traceback (most recent call last):", *(f"  {w}" for w in where), message,
              sep="\n", file=sys.stderr)
    finally:
        if os.getpid() != owner:  # a child the target forked that ran on to the end of the script
            if run.child is not None:
                run.child.end("exit")
        else:
            os._exit = real_os_exit
            run.finish()
            if spec.forked:
                children.end_children()
    sys.stdout.flush()
    sys.stderr.flush()
    if spec.rank is not None and run.ended_after_window:
        # a torchrun rank whose window is measured and written: leave without the interpreter's finalisation,
        # where torch 2.13's gloo process group destructor can deadlock (the script's own clean-up, after the
        # window, was skipped anyway; every rank ends at the same step, after its last collective)
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
