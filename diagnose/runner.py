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

result.json: pass, layer, exit_code, error, error_kind, traceback, wall_s
(the window, else the whole workload), iteration_s (function mode: each
measured call; script mode: each step of the window), steps (script mode:
StepClock.result()), torch, raw (the layer's data), raw_error, overrides
(sweep points), thread_calls (uninstrumented pass: the target's
set_num_threads and set_num_interop_threads calls with their user line).

Under torchrun (the spec has `distributed`), every rank runs this module: it
works in `rank<RANK>/` under the pass workdir, writes its result.json there
with `rank` (its identity from torchrun's environment, and when it finished),
and leaves the pass-level start marker when the first rank starts and the stop
marker when the last local rank stops (diagnose/distributed/launcher.py).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import time
import traceback
from typing import Any

from diagnose import markers
from diagnose.doctor import process as process_facts
from diagnose.steps import StepClock, WindowComplete, WindowSpec

# exit status of the runner itself when the function named in the spec is missing
NO_FUNCTION = 97
FULL_RUN = WindowSpec(skip=0, steps=1 << 62, stop_after_window=False)  # --full-run: count steps, record all


def _torch_info(torch) -> dict[str, Any]:
    info: dict[str, Any] = {"version": torch.__version__}
    try:
        for line in torch.__config__.parallel_info().splitlines():
            if line.startswith("ATen parallel backend:"):
                info["parallel_backend"] = line.split(":", 1)[1].strip()
    except Exception:  # noqa: BLE001 - informational only
        pass
    info["intra_op_threads"] = torch.get_num_threads()
    info["inter_op_threads"] = torch.get_num_interop_threads()
    return info


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


def _pin_threads(torch, n: int) -> dict[str, Any]:
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
    return {"value": n, "ignored_calls": ignored}


def _record_thread_calls(torch, script: str, cwd: str) -> list[dict[str, Any]]:
    """Uninstrumented pass: note where the target sets its thread counts (for the threads findings).

    One dict lookup per call, which targets make a handful of times; forked
    children (DataLoader workers) are not recorded.
    """
    from diagnose.usercode import UserCode

    usercode, owner, calls = UserCode(script, cwd), os.getpid(), []
    for name in ("set_num_threads", "set_num_interop_threads"):
        real = getattr(torch, name)

        def recorded(k: int, _real=real, _name=name) -> None:
            if os.getpid() == owner and len(calls) < 20:
                calls.append({"call": _name, "threads": k, "location": usercode.location(sys._getframe(1))})
            _real(k)

        setattr(torch, name, recorded)
    return calls


def compile_info() -> dict[str, Any] | None:
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
            recompiles.append({"code": f"{getattr(code, 'co_name', '?')} at {where}",
                               "reasons": [str(r)[:300] for r in reasons[:5]], "count": len(reasons)})
        return {"compile_s": float(times.get("_compile.compile_inner", 0.0)), "frames": frames,
                "graphs": int((counters.get("stats") or {}).get("unique_graphs", 0)),
                "graph_breaks": [{"reason": r, "count": n} for r, n in breaks[:20]], "recompiles": recompiles}
    except Exception as exc:  # noqa: BLE001 - torch's internals move between versions: say so, lose nothing else
        return {"error": f"{type(exc).__name__}: {exc}"}


_stack_file = None  # kept open for faulthandler, which writes to its file descriptor from a signal handler


def install_stack_dump(workdir: str) -> None:
    """SIGUSR1 writes every Python thread's stack into stacks.txt (diagnose/stall.py asks when a pass hangs)."""
    global _stack_file
    import faulthandler

    from diagnose.stall import STACKS_FILE

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


def _pin_workers(workers: int) -> dict[str, Any]:
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
    return {"value": workers, "target_asked_for": seen}


class Run:
    def __init__(self, spec: dict[str, Any]):
        self.spec = spec
        self.result: dict[str, Any] = {
            "pass": spec["pass"], "layer": spec.get("layer"), "exit_code": 0, "error": None,
            "error_kind": None, "traceback": [], "wall_s": None, "iteration_s": [],
            "torch": None, "raw": None, "raw_error": None, "overrides": {},
        }
        self.recorder = None
        self.recording = False
        self.finished = False
        self.t0: float | None = None
        self.clock: StepClock | None = None
        self.compile_before: float | None = None  # torch.compile seconds spent when the window began
        self.faults0: int | None = None  # this process's minor page faults when the measured part began
        self.baseline = not spec.get("layer")  # the uninstrumented pass (and the doctor's trial passes)
        self.cpu_stat0: dict[str, Any] | None = None  # the cgroup's cpu.stat when the measured part began
        self.ended_after_window = False
        self.whatif = None  # a what-if pass's variant (diagnose/whatif/child.py)

    def record_exit(self, code: int, kind: str, message: str | None) -> None:
        self.result["exit_code"] = code
        self.result["error_kind"] = kind
        self.result["error"] = message

    def execute(self) -> None:
        spec = self.spec
        # Imported before the clock starts, in every pass alike: profiler start
        # imports torch._dynamo (~1.4 s), which the uninstrumented pass would
        # otherwise pay inside its clock (an optimizer's first use imports it).
        import torch
        import torch._dynamo  # noqa: F401
        import torch.profiler  # noqa: F401

        self.result["torch"] = {"default_intra_op_threads": torch.get_num_threads()}
        options = spec.get("options") or {}
        if options.get("intra_op_threads"):
            self.result["overrides"]["intra_op_threads"] = _pin_threads(torch, int(options["intra_op_threads"]))
        elif not spec.get("layer"):
            self.result["thread_calls"] = _record_thread_calls(torch, spec["script"], spec.get("cwd") or os.getcwd())
        if options.get("flush_denormal"):  # a doctor trial (diagnose/doctor/trials.py)
            self.result["overrides"]["flush_denormal"] = {"value": bool(torch.set_flush_denormal(True))}
        if options.get("what_if"):  # a what-if pass (diagnose/whatif/): seeded, the variant applied from outside
            from diagnose.whatif.child import WhatIfChild

            self.whatif = WhatIfChild(torch, options["what_if"], spec["pass"])
            self.whatif.install()
        if options.get("dataloader_workers") is not None:
            self.result["overrides"]["dataloader_workers"] = _pin_workers(int(options["dataloader_workers"]))
        if spec.get("layer"):
            from diagnose.layers import get

            self.recorder = get(spec["layer"]).recorder(spec)
            self.recorder.prepare()  # hooks and modes in place before the target compiles anything
        script = spec["script"]
        sys.argv = [spec.get("display_script", script), *spec.get("argv", [])]
        sys.path[0] = os.path.dirname(script)
        if spec["mode"] == "script":
            self._run_script(torch, script)
            return
        namespace = runpy.run_path(script, run_name="__diagnose_target__")
        func = namespace.get(spec["function"])
        if not callable(func):
            self.record_exit(NO_FUNCTION, "no_function",
                             f"{spec.get('display_script', script)} has no function '{spec['function']}'")
            return
        warmup = spec.get("warmup", 0)
        for i in range(warmup):
            if i == warmup - 1 and self.recorder is not None:
                self.recorder.last_warmup_step()
            func()
        self._start(record=True)
        times = self.result["iteration_s"]
        for _ in range(spec["iters"]):
            t = time.perf_counter()
            func()
            times.append(time.perf_counter() - t)
            if self.recorder is not None:
                self.recorder.step()
        self._stop_clock()

    def _run_script(self, torch, script: str) -> None:
        window = WindowSpec.from_json(self.spec.get("window"))
        full_run = window is None
        self.clock = StepClock(FULL_RUN if full_run else window,
                               on_begin=None if full_run else self._begin_window,
                               on_end=None if full_run else self._end_window,
                               on_last_warmup=self.recorder.last_warmup_step if self.recorder else None,
                               agreement=_agreement(self.spec))
        self.clock.keep_inputs = self.baseline
        self.clock.install(torch)
        # a pass that knows the script has steps records only the window; others record from the start
        self._start(record=full_run or not self.spec.get("expect_steps"))
        try:
            runpy.run_path(script, run_name="__main__")
        except WindowComplete:
            self.ended_after_window = True  # the window is measured: the target ends here, like a normal exit
        self._stop_clock()

    def _start(self, record: bool) -> None:
        # observers (the thread sampler) begin measuring when this marker appears, once they watch for it
        markers.wait_for(self.spec.get("wait_for") or [])
        self._mark(markers.START)
        if record and self.recorder is not None:
            self.recorder.start()
            self.recording = True
        self._start_clock()

    def _start_clock(self) -> None:
        """The measured part begins: its clock, page-fault count and (uninstrumented) the cgroup's counters."""
        self.t0 = time.perf_counter()
        self.faults0 = minor_faults()
        if self.baseline:
            self.cpu_stat0 = process_facts.cpu_stat()

    def _mark(self, name: str) -> None:
        markers.touch(self.spec["workdir"], name)
        if self.spec.get("rank"):  # a torchrun rank: the first to start / the last to stop marks the pass
            from diagnose.distributed import launcher

            launcher.mark(self.spec, name, started=name != markers.STOP)

    def _begin_window(self) -> None:
        """The window begins: observers and the recorder start over, the clock too."""
        self._mark(markers.WINDOW)
        self.compile_before = (compile_info() or {}).get("compile_s", 0.0)
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
        if self.t0 is not None and self.result["wall_s"] is None:
            self.result["wall_s"] = time.perf_counter() - self.t0
            faults = minor_faults()
            if faults is not None and self.faults0 is not None:
                self.result["minor_faults"] = faults - self.faults0
            self._mark(markers.STOP)
            if self.baseline:  # after the stop marker: the thread sampler does not watch the readings
                self._read_process()

    def _read_process(self) -> None:
        """The doctor's readings at the window's end (diagnose/doctor/process.py), after the clock stopped."""
        try:
            after = process_facts.cpu_stat()
            clock = self.clock
            subnormals, scope = process_facts.scan_subnormals(clock._root if clock else None,  # noqa: SLF001
                                                              clock.last_inputs if clock else ())
            libraries = process_facts.libraries()
            self.result["process"] = {
                "libraries": libraries,
                "blas_pools": process_facts.blas_pools(libraries, bool(self.spec.get("forked"))),
                "cpu_stat_path": (after or {}).get("path"),
                "cpu_stat_before": (self.cpu_stat0 or {}).get("values") or {},
                "cpu_stat_after": (after or {}).get("values") or {},
                "subnormals": subnormals, "subnormal_scope": scope,
            }
        except Exception as exc:  # noqa: BLE001 - best effort: the doctor says what it could not read
            self.result["process_error"] = f"{type(exc).__name__}: {exc}"

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
        compiled = compile_info()
        if compiled:
            if self.compile_before is not None and "compile_s" in compiled:
                compiled["in_window_s"] = max(0.0, compiled["compile_s"] - self.compile_before)
            self.result["compile"] = compiled
        if self.whatif is not None:
            self.whatif.write(compiled)
        if self.clock is not None:
            if final:
                self.clock.uninstall()
            steps = self.clock.result()
            self.result["steps"] = steps
            if steps["window_began"]:
                self.result["iteration_s"] = steps["step_s"]
                if not steps["window_ended"] and steps["window_wall_s"]:
                    # the script ended inside the window: its wall time is up to the last step
                    self.result["wall_s"] = steps["window_wall_s"]
        if self.recorder is not None and self.result["raw"] is None and self.result["raw_error"] is None:
            try:
                self._stop_recorder()
                if final:
                    self.recorder.release()
                self.result["raw"] = self.recorder.collect(self.spec["workdir"])
            except Exception as exc:  # noqa: BLE001 - reported as the layer's failure
                self.result["raw_error"] = f"{type(exc).__name__}: {exc}"
        elif self.recorder is not None and final:
            self.recorder.release()
        try:
            import torch

            self.result["torch"] = {**(self.result["torch"] or {}), **_torch_info(torch)}
        except Exception:  # noqa: BLE001
            pass
        if self.spec.get("rank"):
            self.result["rank"] = {**self.spec["rank"], **({"finished_at": time.time()} if final else {})}
        path = os.path.join(self.spec["workdir"], "result.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(self.result, fh, default=str)
        os.replace(path + ".tmp", path)


def _agreement(spec: dict[str, Any]):
    """A torchrun rank's WindowAgreement (the ranks end the window at one step); None outside torchrun."""
    if not spec.get("rank"):
        return None
    from diagnose.distributed.window import WindowAgreement

    return WindowAgreement(int(spec["rank"]["rank"]))


def main(argv: list[str]) -> int:
    with open(argv[0]) as fh:
        spec = json.load(fh)
    if spec.get("distributed"):  # one rank of a torchrun job: a workdir of its own
        from diagnose.distributed import launcher

        spec = launcher.enter_rank(spec)
    install_stack_dump(spec["workdir"])
    os.chdir(spec.get("cwd") or os.getcwd())
    run = Run(spec)
    runner_file = os.path.realpath(__file__)
    real_os_exit = os._exit

    def os_exit_hook(code):  # the target called os._exit: keep what was measured
        run.record_exit(code, "os_exit", f"the target called os._exit({code})")
        try:
            run.finish()
        finally:
            real_os_exit(code)

    os._exit = os_exit_hook
    # SIGTERM (e.g. from the parent's timeout) becomes an interruption we can report
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    code = 0
    try:
        run.execute()
        code = run.result["exit_code"]
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
        run.result["traceback"] = where
        # what `python script.py` would have printed, without diagnose's frames
        print("Traceback (most recent call last):", *(f"  {w}" for w in where), message,
              sep="\n", file=sys.stderr)
    finally:
        os._exit = real_os_exit
        run.finish()
    sys.stdout.flush()
    sys.stderr.flush()
    if spec.get("rank") and run.ended_after_window:
        # a torchrun rank whose window is measured and written: leave without the interpreter's finalisation,
        # where torch 2.13's gloo process group destructor can deadlock (the script's own clean-up, after the
        # window, was skipped anyway; every rank ends at the same step, after its last collective)
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
