"""One run's passes: the plan, each pass's PassSpec, its PassResult into the report, and re-runs of the workload.

`Session.run()` runs the uninstrumented pass (its observers watching it),
then one pass per recording layer, then the derived layers; each layer's
`analyse` (or `derive`) fills its own report fields. The first pass also says
how the target fared, how many steps it ran and which window the later passes
measure (`Window`). Whatever happens to a pass, what was measured stays in
the report: a layer that fails is `failed` with its reason.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from diagnose import markers, output, steps as steps_mod, trends
from diagnose.config import Config
from diagnose.distributed import view as distributed_view
from diagnose.errors import TargetError
from diagnose.findings.hangs import tool_induced
from diagnose.hangs import hangs
from diagnose.launch import PassOutcome, run_pass
from diagnose.layers import LAYERS, OPT_IN
from diagnose.layers import memory
from diagnose.layers.base import DerivedContext, Layer
from diagnose.protocol import DistributedSpec, Overrides, PassResult, PassSpec, StepsSeen, WindowSpec, iteration_stats
from diagnose.render import plots
from diagnose.report.model import Doctor, LayerStatus, Report, Steps, Threads
from diagnose.runner import NO_FUNCTION
from diagnose.target import Target
from diagnose.usercode import UserCode


class Progress:
    """What a run tells its user as it goes (render/progress.py's TerminalProgress); this one says nothing."""

    def pass_started(self, index: int, total: int, name: str, description: str, captured: bool) -> None:
        pass

    def tick(self, elapsed_s: float) -> None:
        pass

    def pass_finished(self, name: str, outcome: PassOutcome) -> None:
        pass

    def layer_finished(self, name: str, status: str, elapsed_s: float) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass(frozen=True)
class Window:
    """What every pass is told about its steps (runner.py, steps.py).

    In script mode the first pass (the uninstrumented one) looks for the
    window with a minimum duration; the passes after it measure the same
    number of steps and, knowing that the script has steps, record only the
    window. When the first pass found no window (no steps, or fewer than
    --skip-steps) the later ones measure the whole run, as it did. In
    function mode every pass calls the function skip + steps times.
    """

    spec: WindowSpec | None  # None: the whole run (--full-run, or no window)
    expect_steps: bool | None = None  # None: not known yet
    fixed: bool = False  # function mode: the same calls in every pass

    @classmethod
    def first(cls, target: Target, config: Config, long: bool = True) -> "Window":
        """The first pass's window: --steps steps after --skip-steps, lasting at least steps.MIN_WINDOW_S when
        `long` (a layer that runs samples or re-runs it: Plan.long_window)."""
        if target.function:
            return cls(WindowSpec(config.skip_steps, config.steps, stop_after_window=False), fixed=True)
        if config.full_run:
            return cls(None)
        return cls(WindowSpec(config.skip_steps, config.steps, min_window_s=steps_mod.MIN_WINDOW_S if long else 0.0,
                              find_loop=True))

    def empty(self, result: PassResult | None) -> bool:
        """The window began and the script ended before its first step was over."""
        seen = result.steps if result else None
        return (not self.fixed and self.spec is not None and seen is not None and seen.window_began
                and not seen.window_steps)

    def capped(self, step_s: float | None) -> "Window":
        """The window of a re-run compared only with other re-runs (Layer.compares_reruns): its first steps up to
        about steps.RERUN_WINDOW_S of `step_s` steps (the first pass's median), at least steps.RERUN_MIN_STEPS;
        itself when that is all of it, without steps (the whole run), or in function mode."""
        if self.fixed or self.spec is None or not self.expect_steps or not step_s or step_s <= 0:
            return self
        steps = min(self.spec.steps, max(steps_mod.RERUN_MIN_STEPS, math.ceil(steps_mod.RERUN_WINDOW_S / step_s)))
        return self if steps == self.spec.steps else Window(replace(self.spec, steps=steps),
                                                            expect_steps=True)

    def after_first(self, result: PassResult | None) -> "Window":
        if self.fixed:
            return self
        seen = result.steps if result else None
        if self.spec is None or seen is None or not seen.window_began or not seen.window_steps:
            return Window(None, expect_steps=False)
        # the same steps as the first pass's window: with the loop detector it may have begun after --skip-steps,
        # at the first iteration after the loop was found (diagnose/loops.py)
        skip = seen.window_first - 1 if seen.window_first else self.spec.skip
        return Window(WindowSpec(skip, max(1, seen.window_steps), min_window_s=0.0, loop=seen.loop,
                                 loop_group=seen.loop_group),
                      expect_steps=True)


@dataclass
class Plan:
    """Which layers run how: a pass of their own, an observer on the uninstrumented pass, or derived."""

    passes: list[tuple[str, Layer | None]] = field(default_factory=list)  # (pass name, layer; None: uninstrumented)
    observers: list[Layer] = field(default_factory=list)
    derived: list[Layer] = field(default_factory=list)

    @property
    def long_window(self) -> bool:
        """A layer that runs samples the window or re-runs it (Layer.long_window): the first pass stretches it to
        steps.MIN_WINDOW_S. Otherwise the window is --steps steps: a run of `--layers operators` on 1 ms steps
        recorded a 1 s window at 2-15x in its operator pass, for no layer's need (about 50 of the test suite's runs)."""
        layers = [layer for _, layer in self.passes if layer] + self.observers + self.derived
        return any(layer.long_window for layer in layers)

    @classmethod
    def of(cls, config: Config, report: Report) -> "Plan":
        """The layers the config asks for; one that cannot run here is `skipped` in the report, with why."""
        plan = cls(passes=[("baseline", None)] if config.baseline else [])
        layers = [LAYERS[name] for name in config.layers]
        if config.what_if:  # opt-in, after the doctor: it re-runs the workload with code changes applied
            layers.append(OPT_IN["what_if"])
        if config.repeat.runs > 1:  # the same workload, unchanged: run-to-run drift
            layers.append(OPT_IN["repeat"])
        if config.sweep.enabled:  # last: it re-runs the workload at several thread counts
            layers.append(OPT_IN["sweep"])
        if config.vtune:
            layers.append(OPT_IN["vtune"])
        if config.sample:  # an observer on the uninstrumented pass: py-spy's stacks beside the operator pass
            layers.append(OPT_IN["sample"])
        for layer in layers:
            reason = layer.available()
            if not reason and layer.observes and not config.baseline:
                reason = "it observes the uninstrumented pass, which this command does not run"
            if reason:
                report.layers[layer.name] = LayerStatus("skipped", reason)
            elif layer.observes:
                plan.observers.append(layer)
            elif layer.derived:
                plan.derived.append(layer)
            else:
                plan.passes.append((layer.name, layer))
        return plan


class Session:
    """The passes of one run, in a work directory of their own; `close()` removes it and the fork server."""

    def __init__(self, target: Target, config: Config, report: Report, output_dir: str, created: bool,
                 progress: Progress):
        self.target, self.config, self.report = target, config, report
        self.output_dir, self.created, self.progress = output_dir, created, progress
        self.workroot = tempfile.mkdtemp(prefix="diagnose-")
        self.server = _LazyServer(config.fork_server and not config.nproc_per_node)
        self.window = Window.first(target, config)
        self.measured = 0  # measure()'s runs so far
        self.cwd = os.getcwd()  # where the target runs
        self.all_threads = False  # the first pass saw the model called from worker threads
        self.distributed = (DistributedSpec(config.nproc_per_node, tuple(config.torchrun_args))
                            if config.nproc_per_node else None)

    def close(self) -> None:
        self.server.close()
        shutil.rmtree(self.workroot, ignore_errors=True)

    def spec(self, name: str, layer: str | None, overrides: Overrides = Overrides(),
             window: Window | None = None) -> PassSpec:
        """The PassSpec of a pass of this run, over `window` (the current one unless given)."""
        t, c, window = self.target, self.config, window or self.window
        return PassSpec(name=name, layer=layer, script=t.path, display_script=t.script, argv=tuple(t.argv),
                        function=t.function, cwd=self.cwd, window=window.spec,
                        expect_steps=window.expect_steps, operators=c.operators, callgraph=c.callgraph,
                        overrides=overrides, distributed=self.distributed, all_threads=self.all_threads,
                        memory=c.memory)

    # ------------------------------------------------------------ the run

    def run(self, plan: Plan) -> None:
        """Every pass, then every derived layer (interrupted: the rest are `skipped`, what ran is kept)."""
        total = len(plan.passes) + len(plan.derived)
        if not self.measured:  # the first window lasts 1 s only for a layer that needs it (Plan.long_window)
            self.window = Window.first(self.target, self.config, long=plan.long_window)
        try:
            for index, (name, layer) in enumerate(plan.passes, 1):
                self._run_pass(index, total, name, layer, plan.observers)
            context = DerivedContext(
                self.config, tick=self.progress.tick, server=self.server.get() if plan.derived else None,
                rerun=self.rerun if self.config.baseline else None,
                on_trial=lambda i, n, kind, what: self.progress.pass_started(i, n, kind, what, True),
                say=self.progress.note)
            for i, layer in enumerate(plan.derived, len(plan.passes) + 1):
                self._run_derived(layer, i, total, context)
        except KeyboardInterrupt:  # between passes: keep what was measured
            self.report.run.interrupted = True

    def _run_pass(self, index: int, total: int, name: str, layer: Layer | None, observers: list[Layer]) -> None:
        report, progress = self.report, self.progress
        if report.run.interrupted:
            report.layers[name] = LayerStatus("skipped", "diagnose was interrupted before this pass")
            return
        description = layer.description if layer else "the target uninstrumented (reference wall time)"
        progress.pass_started(index, total, name, description, layer is not None)
        workdir = os.path.join(self.workroot, name)
        while True:
            watching = _Watching(observers if layer is None else [], self.workroot,
                                 os.path.join(workdir, markers.START))
            try:
                spec = self.spec(name, layer.name if layer else None).with_(wait_for=tuple(watching.ready_files()))
                prefix = layer.command_prefix(workdir, self.config) if layer else None
                outcome = run_pass(spec, workdir, passthrough=layer is None, timeout_s=self.config.timeout_s,
                                   on_tick=progress.tick, on_start=watching.attach, command_prefix=prefix,
                                   server=self.server.get(), stall_after_s=self.config.stall_after_s or None)
            finally:
                watching.detach()
            if index == 1 and outcome.status == "ok" and self.window.empty(outcome.result):
                # the script ended right where the window began: what the observers kept is its tail;
                # measure the whole run instead, as the passes after this one will
                shutil.rmtree(workdir, ignore_errors=True)
                self.window = Window(None, expect_steps=False)
                continue
            break
        progress.pass_finished(name, outcome)
        if outcome.stall is not None:  # hung: its stacks, and the run did not end well
            report.hangs += hangs(name, outcome.stall, UserCode(self.target.path))
            if layer is not None and tool_induced(report, [name]):
                # the uninstrumented run of the same script finished: this layer's instrumentation is the likely
                # cause, never the user's code (findings/hangs.py says so; the layer fails with the reason)
                outcome.tool_induced = True
            else:
                report.run.error = report.run.error or outcome.error
        if outcome.ranks is not None:  # a torchrun pass: what each rank measured
            distributed_view.record_pass(report, name, layer.name if layer else None, outcome.ranks)
        if index == 1:
            if outcome.result is not None and outcome.result.exit_code == NO_FUNCTION:
                output.discard(self.output_dir, self.created)
                raise TargetError(outcome.result.error)
            apply_outcome(report, outcome)
            report.steps = steps_of(self.target, self.config, self.window, outcome.result)
            report.compile = outcome.result.compile if outcome.result else None
            seen = outcome.result.steps if outcome.result else None
            self.all_threads = bool(seen and seen.off_main_thread)
            self.window = self.window.after_first(outcome.result)
        if layer is None:
            apply_baseline(report, outcome)
            for observer in observers:
                report.layers[observer.name] = watching.analyse(observer, outcome, report)
                output.move_artifacts(report, watching.workdir(observer), self.output_dir)
            return
        if outcome.status == "interrupted":
            report.run.interrupted = True
        status = analysed(layer, outcome, report, workdir)
        if outcome.tool_induced:
            status.status = "failed"
            status.reason = (f"the {name} pass hung where the uninstrumented run did not: its instrumentation is "
                             "the likely cause (the stacks are in the hang finding); the other layers are complete")
        status.elapsed_s = round(outcome.elapsed_s, 3)
        report.layers[layer.name] = status
        output.move_artifacts(report, workdir, self.output_dir)

    def _run_derived(self, layer: Layer, index: int, total: int, context: DerivedContext) -> None:
        """A layer computed from the others' results (it may run its own probe, or re-run the workload)."""
        report = self.report
        if report.run.interrupted:
            report.layers[layer.name] = LayerStatus("skipped", "diagnose was interrupted before this layer")
            return
        workdir = os.path.join(self.workroot, layer.name)
        os.makedirs(workdir, exist_ok=True)
        self.progress.pass_started(index, total, layer.name, layer.description, True)
        if layer.compares_reruns and context.rerun is not None:  # its re-runs over the capped window (Window.capped)
            context = replace(context, rerun=self.capped_rerun())
        t0 = time.monotonic()
        try:
            status = layer.derive(context, report, workdir)
        except KeyboardInterrupt:
            report.run.interrupted = True
            status = LayerStatus("skipped", "interrupted (Ctrl-C or SIGTERM) while this layer ran")
        except Exception as exc:  # noqa: BLE001 - the layer fails, the report is still written
            status = LayerStatus("failed", f"{type(exc).__name__}: {exc}")
        self.progress.layer_finished(layer.name, status.status, time.monotonic() - t0)
        status.elapsed_s = round(time.monotonic() - t0, 3)
        report.layers[layer.name] = status
        output.move_artifacts(report, workdir, self.output_dir)

    def measure(self, name: str) -> PassResult | str:
        """The uninstrumented workload once more, its output kept from the terminal, without the first pass's
        observers and report (diagnose compare --repeat): the first call finds the window as the first pass does,
        the later ones measure that window."""
        self.measured += 1
        res = self.rerun(name, {}, Overrides())
        if self.measured == 1 and not isinstance(res, str):
            if self.window.empty(res):  # the script ended where the window began: the whole run, as run() does
                self.window = Window(None, expect_steps=False)
                res = self.rerun(f"{name}-whole", {}, Overrides())
                return res
            self.window = self.window.after_first(res)
        return res

    def capped_rerun(self) -> Callable[[str, dict[str, str], Overrides], PassResult | str]:
        """`rerun` for a layer whose re-runs are compared only with each other (Layer.compares_reruns): over the
        window's first steps up to about steps.RERUN_WINDOW_S (Window.capped), which report.steps records before
        the layer runs (what-if's estimate of its passes reads it)."""
        it, steps = self.report.run.iterations, self.report.steps
        window = self.window.capped(it.median_s if it and it.n else None)
        if window is self.window:
            return self.rerun
        if steps is not None and steps.rerun_steps is None:
            steps.rerun_steps = window.spec.steps
            steps.notes.append(
                f"the re-runs compared only with each other (doctor trials, what-if passes, thread sweep points) "
                f"measure the window's first {window.spec.steps} steps of its {self.window.spec.steps} (about "
                f"{steps_mod.RERUN_WINDOW_S:.0f} s of {it.median_s:.3g} s steps, at least "
                f"{steps_mod.RERUN_MIN_STEPS}): a trial's noise is its passes' spread, not the steps inside one")
        return functools.partial(self.rerun, window=window)

    def rerun(self, name: str, env: dict[str, str], overrides: Overrides,
              window: Window | None = None) -> PassResult | str:
        """DerivedContext.rerun: the uninstrumented workload again, over the same window (or `window`), with
        `overrides`: a sweep point, a doctor trial, a what-if pass or a repeat. With `env` (applied at launch) a
        fresh interpreter, else forked from the fork server. Ctrl-C propagates."""
        outcome = run_pass(self.spec(name, None, overrides, window), os.path.join(self.workroot, name),
                           passthrough=False, timeout_s=self.config.timeout_s, on_tick=self.progress.tick,
                           stall_after_s=self.config.stall_after_s or None, extra_env=env or None,
                           server=self.server.get() if not env else None)
        self.progress.pass_finished(name, outcome)
        if outcome.status == "interrupted":
            raise KeyboardInterrupt
        res = outcome.result
        if outcome.status != "ok" or res is None or res.exit_code:
            return outcome.error or (res.error if res else None) or f"the pass ended with status {outcome.status}"
        return res


# ---------------------------------------------------------------- the first pass into the report

def apply_outcome(report: Report, outcome: PassOutcome) -> None:
    """How the target fared, from the first pass (the baseline unless it was skipped)."""
    res, run = outcome.result, report.run
    run.exit_code = res.exit_code if res else outcome.returncode
    run.error = outcome.error
    run.traceback = list(res.traceback) if res else []
    run.timed_out = outcome.status == "timeout"
    run.interrupted = outcome.status == "interrupted"
    if res is None:
        return
    m, info = report.machine, res.torch
    m.torch_version, m.parallel_backend = info.version, info.parallel_backend
    m.intra_op_threads, m.inter_op_threads = info.intra_op_threads, info.inter_op_threads
    m.default_intra_op_threads = info.default_intra_op_threads


def apply_baseline(report: Report, outcome: PassOutcome) -> None:
    """The uninstrumented pass's timings, page faults, process readings, thread calls and Python threads."""
    report.run.pass_s = round(outcome.elapsed_s, 3)
    res = outcome.result
    if res is None:
        return
    report.run.wall_s = res.wall_s
    report.run.iterations = iteration_stats(res.iteration_s)
    report.run.minor_faults = res.minor_faults
    if res.process is not None:
        report.doctor = Doctor(process=res.process)
    if res.thread_calls or res.python_threads:
        report.threads = report.threads or Threads()
        report.threads.thread_calls = list(res.thread_calls)
        report.threads.python_threads = list(res.python_threads)
    memory.from_baseline(report, res)  # the RSS at every step boundary, and the memory there is


def steps_of(target: Target, config: Config, window: Window, result: PassResult | None) -> Steps | None:
    """report.steps from the first pass's step clock (script mode)."""
    if target.function:
        return None
    seen = result.steps if result and result.steps else StepsSeen()
    out = Steps(detector=seen.detector, detail=seen.detail, steps_seen=seen.steps_seen,
                skip_steps=config.skip_steps, steps=config.steps, full_run=config.full_run,
                ended_target=seen.stopped_target, batch_size=seen.batch_size,
                setup_s=_round(seen.setup_s), warmup_s=[round(x, 6) for x in seen.warmup_s])
    if seen.window_began and window.spec is not None:
        out.window_first = int(seen.window_first)
        out.window_last = out.window_first + seen.window_steps - 1
        out.data_wait_s = round(sum(seen.data_wait_s), 6) if seen.data_wait_s else None
        out.data_wait_at = seen.data_wait_at
        out.window_s = [round(x, 6) for x in (result.iteration_s if result else [])]
        out.drift = trends.drift(out.window_s)
    out.notes = steps_mod.notes(out, seen, result.iteration_s if result else [])
    return out


def _round(x: float | None, digits: int = 6) -> float | None:
    return round(x, digits) if isinstance(x, (int, float)) else None


def analysed(layer: Layer, outcome: PassOutcome | None, report: Report, workdir: str) -> LayerStatus:
    """A layer's analysis; a crash in it fails that layer, with the reason, not the report."""
    try:
        return layer.analyse(outcome, report, workdir)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - every other layer and the report are still written
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return LayerStatus("failed", f"its analysis failed: {type(exc).__name__}: {exc} "
                                     f"({os.path.basename(where.filename)}:{where.lineno}; a bug in diagnose, "
                                     "please report it)")


class _LazyServer:
    """The run's fork server, started when the first pass needs it (it imports torch: seconds)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.server = None

    def get(self):
        if self.enabled and self.server is None:
            from diagnose.forkserver import ForkServer  # imports torch in its own process; only when used

            self.server = ForkServer.start(while_waiting=plots.preload)
            self.enabled = self.server is not None  # could not start: every pass is a fresh process
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


class _Watching:
    """The observer layers on one pass; a layer whose observer fails is reported as failed."""

    def __init__(self, layers: list[Layer], workroot: str, start_marker: str):
        self.root = workroot
        self.start_marker = start_marker
        self.observers: dict[str, object] = {}
        self.errors: dict[str, str] = {}
        for layer in layers:
            os.makedirs(self.workdir(layer), exist_ok=True)
            try:
                self.observers[layer.name] = layer.observer(self.workdir(layer))
            except Exception as exc:  # noqa: BLE001 - the layer fails, the run goes on
                self.errors[layer.name] = f"could not start: {type(exc).__name__}: {exc}"

    def workdir(self, layer: Layer) -> str:
        return os.path.join(self.root, layer.name)

    def ready_files(self) -> list[str]:
        """Files the runner waits for before the workload begins (markers.wait_for)."""
        return [o.ready_file for o in self.observers.values() if getattr(o, "ready_file", None)]

    def attach(self, pid: int) -> None:
        self._each("attach", pid, self.start_marker)

    def detach(self) -> None:
        self._each("detach")

    def _each(self, method: str, *args: object) -> None:
        for name, observer in list(self.observers.items()):
            try:
                getattr(observer, method)(*args)
            except Exception as exc:  # noqa: BLE001
                self.errors[name] = f"{method} failed: {type(exc).__name__}: {exc}"
                if method == "attach":
                    del self.observers[name]

    def analyse(self, layer: Layer, outcome: PassOutcome, report: Report) -> LayerStatus:
        if layer.name in self.errors:
            return LayerStatus("failed", f"the {layer.name} observer {self.errors[layer.name]}")
        status = analysed(layer, outcome, report, self.workdir(layer))
        status.elapsed_s = round(outcome.elapsed_s, 3)
        return status
