"""diagnose(target, config) -> Report: runs the passes and writes the report.

Pass 1 runs the target uninstrumented (its output goes to the terminal, its
wall time is the reference); each layer with a recorder then gets a pass of
its own. Whatever happens to a pass, the report is written with what was
measured; the exit code says how the target fared.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Protocol

from diagnose import __version__, findings, machine, markers, steps as steps_mod, target as target_mod
from diagnose.errors import ExitCode, OutputError, TargetError
from diagnose.launch import PassOutcome, run_pass
from diagnose.layers import LAYERS, OPT_IN
from diagnose.layers.base import DerivedContext
from diagnose.layers.microbench import MicrobenchOptions
from diagnose.layers.operators.recorder import OperatorsOptions
from diagnose.layers.threads.sweep import SweepOptions
from diagnose import render
from diagnose.render import plots
from diagnose.report import io as report_io
from diagnose.report.model import (
    Compile, Doctor, GraphBreak, IterationStats, LayerStatus, ProcessFacts, Recompile, Report, Steps, SubnormalScan,
    Sweep, TargetInfo, ThreadCall, Threads,
)
from diagnose.runner import NO_FUNCTION
from diagnose.stall import STALL_AFTER_S
from diagnose.target import Target
from diagnose.tools.callgraph import CallgraphOptions

# Files diagnose writes into an output directory; never replaced without --force.
ARTIFACT_NAMES = (
    "report.json", "report.md", "report.html", "trace.json", "callgraph.png", "callgraph.dot",
    "profile.pstats", "threads.png", "roofline.png", "reproducers", "flamegraph.png", "stacks.folded",
)


@dataclass(frozen=True)
class Config:
    """One run's options, typed, each with its one default (the CLI's defaults are these).

    Run-wide options are fields; a layer's options are a group defined beside the code that reads them
    (OperatorsOptions in layers/operators/recorder.py, ...). Frozen: a variant is `dataclasses.replace(config,
    ...)`. The runner's child gets the groups it needs as JSON (`_spec`: report.io.to_dict, read back with
    report.io.typed).
    """

    output_dir: str | None = None
    force: bool = False
    reports_root: str = "reports"  # where the default output directory goes
    timeout_s: float | None = None
    stall_after_s: float = STALL_AFTER_S  # a pass whose tree used no CPU this long is hung (0: never; stall.py)
    layers: tuple[str, ...] = tuple(LAYERS)
    baseline: bool = True  # False: skip the uninstrumented pass (quick single-layer commands)
    fork_server: bool = True  # fork the passes from a process with torch imported (diagnose/forkserver.py)
    # script mode: the window every pass measures (diagnose/steps.py); function mode uses Target.warmup/iters
    skip_steps: int = steps_mod.DEFAULT_SKIP_STEPS
    steps: int = steps_mod.DEFAULT_STEPS
    full_run: bool = False  # record the whole run in every pass (steps are still counted)
    operators: OperatorsOptions = OperatorsOptions()
    callgraph: CallgraphOptions = CallgraphOptions()  # the python layer's call graph
    microbench: MicrobenchOptions = MicrobenchOptions()
    sweep: SweepOptions = SweepOptions()  # re-run at several thread (and DataLoader worker) counts, recommend one
    doctor: bool = False  # --doctor: every trial this machine can run, not only those answering a warning
    what_if: tuple[str, ...] = ()  # --what-if: variant names, or ("auto",) (diagnose/whatif/variants.py)
    vtune: str | None = None  # hotspots, threading or uarch-exploration: a pass under `vtune -collect`
    nproc_per_node: int | None = None  # run every pass under torchrun with this many ranks (diagnose/distributed)
    torchrun_args: tuple[str, ...] = ()  # rendezvous options for several nodes


class Progress(Protocol):
    def pass_started(self, index: int, total: int, name: str, description: str, captured: bool) -> None: ...

    def tick(self, elapsed_s: float) -> None: ...

    def pass_finished(self, name: str, outcome: PassOutcome) -> None: ...

    def layer_finished(self, name: str, status: str, elapsed_s: float) -> None: ...

    def note(self, text: str) -> None: ...


class NullProgress:
    def pass_started(self, *args: Any) -> None:
        pass

    def tick(self, elapsed_s: float) -> None:
        pass

    def pass_finished(self, *args: Any) -> None:
        pass

    def layer_finished(self, *args: Any) -> None:
        pass

    def note(self, text: str) -> None:
        pass


@dataclass
class Result:
    report: Report
    output_dir: str
    exit_code: ExitCode


def default_output_dir(name: str, root: str, now: float | None = None) -> str:
    """root/NAME-YYYYmmdd-HHMMSS, with -2, -3, ... when that exists already."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = os.path.join(root, f"{name}-{stamp}")
    path, n = base, 2
    while os.path.exists(path):
        path, n = f"{base}-{n}", n + 1
    return path


REPRODUCER_FILE = re.compile(r"^\d\d_[\w.-]+\.py$")  # microbench/reproducer.py's names


def prepare_output_dir(path: str, force: bool) -> None:
    """Create (or accept) the output directory without endangering user files.

    With `force`, an earlier report's own files are removed first (report
    files, pictures, the trace, reproducer scripts by their names), so that
    nothing of an earlier run is shown as this one's; anything else in the
    directory, or in reproducers/, stays.
    """
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutputError(f"output directory {path} exists and is not a directory; nothing was written")
    clashes = [n for n in ARTIFACT_NAMES if os.path.lexists(os.path.join(path, n))] if os.path.isdir(path) else []
    if clashes and not force:
        raise OutputError(
            f"{path} already holds {', '.join(clashes)} from an earlier report; "
            "choose another -o, or add --force to replace those files"
        )
    for name in clashes:
        _remove_own(os.path.join(path, name))
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".diagnose-write-test-"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write to {path}: {exc.strerror or exc}") from None


def _remove_own(path: str) -> None:
    """Remove one of diagnose's artifacts: a file, or reproducers/ minus whatever a user put there."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            for name in os.listdir(path):
                if REPRODUCER_FILE.match(name) and os.path.isfile(os.path.join(path, name)):
                    os.unlink(os.path.join(path, name))
            if not os.listdir(path):
                os.rmdir(path)
        else:
            os.unlink(path)
    except OSError as exc:
        raise OutputError(f"cannot replace {path}: {exc.strerror or exc}") from None


def _stats(samples: list[float]) -> IterationStats | None:
    if not samples:
        return None
    qs = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
    return IterationStats(n=len(samples), median_s=statistics.median(samples), q1_s=qs[0], q3_s=qs[2],
                          min_s=min(samples), max_s=max(samples))


@dataclass
class Window:
    """What every pass of a script-mode run is told about its steps (runner.py, steps.py).

    The first pass (the uninstrumented one) looks for the window with a
    minimum duration; the passes after it measure the same number of steps
    and, knowing that the script has steps, record only the window. When the
    first pass found no window (no steps, or fewer than --skip-steps) the
    later ones measure the whole run, as it did.
    """

    spec: dict[str, Any] | None  # steps.WindowSpec as JSON; None: the whole run (--full-run, or no window)
    expect_steps: bool | None = None  # None: not known yet

    @classmethod
    def first(cls, target: Target, config: Config) -> "Window":
        if target.mode != "script" or config.full_run:
            return cls(None)
        return cls({"skip": config.skip_steps, "steps": config.steps, "min_window_s": steps_mod.MIN_WINDOW_S,
                    "stop_after_window": True})

    def empty(self, result: dict[str, Any] | None) -> bool:
        """The window began and the script ended before its first step was over."""
        seen = (result or {}).get("steps") or {}
        return self.spec is not None and bool(seen.get("window_began")) and not seen.get("window_steps")

    def after_first(self, result: dict[str, Any] | None) -> "Window":
        seen = (result or {}).get("steps") or {}
        if self.spec is None or not seen.get("window_began") or not seen.get("window_steps"):
            return Window(None, expect_steps=False)
        return Window({**self.spec, "steps": max(1, int(seen.get("window_steps") or self.spec["steps"])),
                       "min_window_s": 0.0}, expect_steps=True)


def _spec(target: Target, config: Config, name: str, layer: str | None,
          window: Window | None = None) -> dict[str, Any]:
    window = window or Window(None)
    return {
        "pass": name, "layer": layer, "script": target.path, "display_script": target.script,
        "argv": list(target.argv), "mode": target.mode, "function": target.function,
        "warmup": target.warmup, "iters": target.iters, "cwd": os.getcwd(),
        "window": window.spec, "expect_steps": window.expect_steps,
        # the layers' options as JSON (read back with report_io.typed); re-runs add theirs (_rerun)
        "options": {"operators": report_io.to_dict(config.operators), "callgraph": report_io.to_dict(config.callgraph)},
        **({"distributed": {"nproc_per_node": config.nproc_per_node, "torchrun_args": list(config.torchrun_args)}}
           if config.nproc_per_node else {}),
    }


def _apply_outcome(report: Report, outcome: PassOutcome) -> None:
    """How the target fared, from the first pass (the baseline unless it was skipped)."""
    res = outcome.result or {}
    run = report.run
    run.exit_code = res.get("exit_code") if outcome.result else outcome.returncode
    run.error = outcome.error
    run.traceback = res.get("traceback") or []
    run.timed_out = outcome.status == "timeout"
    run.interrupted = outcome.status == "interrupted"
    torch_info = res.get("torch") or {}
    m = report.machine
    m.torch_version = torch_info.get("version")
    m.parallel_backend = torch_info.get("parallel_backend")
    m.intra_op_threads = torch_info.get("intra_op_threads")
    m.inter_op_threads = torch_info.get("inter_op_threads")
    m.default_intra_op_threads = torch_info.get("default_intra_op_threads")


def _apply_baseline(report: Report, outcome: PassOutcome) -> None:
    res = outcome.result or {}
    report.run.wall_s = res.get("wall_s")
    report.run.pass_s = round(outcome.elapsed_s, 3)
    report.run.iterations = _stats(res.get("iteration_s") or [])
    report.run.minor_faults = res.get("minor_faults")
    if res.get("process"):
        report.doctor = Doctor(process=report_io.typed(ProcessFacts, res["process"]))
    if res.get("thread_calls"):
        report.threads = report.threads or Threads()
        report.threads.thread_calls = report_io.typed(list[ThreadCall], res["thread_calls"])


def _apply_instrumented(report: Report, outcome: PassOutcome) -> None:
    res = outcome.result or {}
    if res.get("wall_s") is not None:
        report.run.instrumented_wall_s = res["wall_s"]
        report.run.instrumented_minor_faults = res.get("minor_faults")
        times = res.get("iteration_s") or []
        recorded = (res.get("raw") or {}).get("recorded_iters")
        if recorded:  # with a profiler schedule only the last iterations are instrumented
            times = times[-recorded:]
        report.run.instrumented_iterations = _stats(times)
    raw = res.get("raw") or {}
    if "input_scan" in raw:  # the doctor's scan of operator inputs (layers/operators/recorder.py)
        report.doctor = report.doctor or Doctor()
        process = report.doctor.process = report.doctor.process or ProcessFacts()
        process.operator_inputs = [report_io.typed(SubnormalScan, row) for row in raw["input_scan"]]
        process.operator_inputs_scope = raw.get("input_scan_scope") or (
            "nothing: no step ran before the window (--skip-steps 0, --full-run, or no steps found)")


def exit_code_for(report: Report) -> ExitCode:
    if report.run.interrupted:
        return ExitCode.INTERRUPTED
    if report.run.error or report.run.exit_code or report.run.timed_out:
        return ExitCode.TARGET_FAILED
    return ExitCode.OK


def write_report(report: Report, output_dir: str) -> None:
    """Every file of the report into output_dir; a disk that fills up (or any write error) is an OutputError
    with the reason, never a traceback."""
    try:
        _write_report(report, output_dir)
    except OSError as exc:
        raise OutputError(f"cannot write the report into {output_dir}: {exc.strerror or exc}") from None


def _write_report(report: Report, output_dir: str) -> None:
    """The registry's renderers in order (diagnose/render/__init__.py): the drawings, written first (report.html
    embeds the pictures it finds in output_dir); then the report learns its files; then the documents render it."""
    renderers = render.RENDERERS.values()
    drawn = [r.render(report, output_dir) for r in renderers if not r.document]
    for rendered in drawn:
        _write_files(output_dir, rendered)
    documents = [r for r in renderers if r.document and r.written]
    _record_files(report, drawn, [name for r in documents for name in r.files])
    for r in documents:
        _write_files(output_dir, r.render(report, output_dir))


def _record_files(report: Report, drawn: list[render.Rendered], documents: list[str]) -> None:
    """report.artifacts and each layer's `missing` from what the drawings made, and the documents' own files:
    the one place the report learns its files, before any document renders it. A picture that could not be
    drawn is named missing in the layer whose data it shows (when that layer ran), with why."""
    layer_of = {p.file: p.layer for p in render.PICTURES}
    for rendered in drawn:
        for name in rendered.files:
            report.artifacts[render.artifact_key(name)] = name
        for name, why in rendered.missing.items():
            if layer_of.get(name) in report.layers:
                report.layers[layer_of[name]].missing[name] = why
    for name in documents:
        report.artifacts[render.artifact_key(name)] = name


def _write_files(output_dir: str, rendered: render.Rendered) -> None:
    """Each file whole or not at all (a temporary name, then renamed)."""
    for name, content in rendered.files.items():
        path = os.path.join(output_dir, name)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)


def diagnose(target: Target, config: Config, progress: Progress | None = None) -> Result:
    progress = progress or NullProgress()
    target_mod.validate(target)
    output_dir = config.output_dir or default_output_dir(target.stem, config.reports_root)
    created = not os.path.exists(output_dir)
    prepare_output_dir(output_dir, config.force)

    report = Report(
        target=TargetInfo(script=target.script, argv=list(target.argv), mode=target.mode, function=target.function,
                          warmup=target.warmup if target.function else None,
                          iters=target.iters if target.function else None),
        machine=machine.describe(),
    )
    report.run.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report.run.diagnose_version = __version__
    if config.nproc_per_node:  # a torchrun job: per-rank results go to report.distributed
        from diagnose.distributed import view as distributed_view

        report.distributed = distributed_view.start(_spec(target, config, "", None)["distributed"])
    layers = [LAYERS[name] for name in config.layers]
    if config.what_if:  # opt-in, after the doctor: it re-runs the workload with code changes applied
        layers.append(OPT_IN["what_if"])
    passes: list[tuple[str, Any]] = [("baseline", None)] if config.baseline else []
    observers: list[Any] = []
    derived: list[Any] = []
    for layer in layers:
        reason = layer.available()
        if not reason and layer.observes and not config.baseline:
            reason = "it observes the uninstrumented pass, which this command does not run"
        if reason:
            report.layers[layer.name] = LayerStatus("skipped", reason)
        elif layer.observes:
            observers.append(layer)
        elif layer.derived:
            derived.append(layer)
        else:
            passes.append((layer.name, layer))
    if config.vtune:
        vtune_layer = OPT_IN["vtune"]
        reason = vtune_layer.available()
        if reason:
            report.layers["vtune"] = LayerStatus("skipped", reason)
        else:
            passes.append(("vtune", vtune_layer))

    workroot = tempfile.mkdtemp(prefix="diagnose-")
    server = _LazyServer(config.fork_server and not config.nproc_per_node)
    try:
        try:
            window = _run_passes(target, config, report, passes, observers, workroot, output_dir, created,
                                 progress, steps=len(passes) + len(derived), server=server)
            context = DerivedContext(
                config, tick=progress.tick, server=server.get() if derived else None,
                run_workload=_workload_runner(target, config, workroot, progress, window, server)
                if config.baseline else None,
                on_trial=lambda i, n, name, kind="doctor": progress.pass_started(i, n, kind, f"trial {name}", True),
                say=progress.note)
            for i, layer in enumerate(derived, 1):
                _run_derived(layer, report, workroot, output_dir, progress, len(passes) + i,
                             len(passes) + len(derived), context)
            if config.sweep.enabled and not report.run.interrupted:
                _sweep(target, config, report, workroot, progress, window, server)
        except KeyboardInterrupt:  # between passes: keep what was measured
            report.run.interrupted = True
        if report.distributed:
            distributed_view.finish(report)
        report.findings = findings.derive(report)
        write_report(report, output_dir)
    finally:
        server.close()
        shutil.rmtree(workroot, ignore_errors=True)
    return Result(report=report, output_dir=output_dir, exit_code=exit_code_for(report))


class _LazyServer:
    """The run's fork server, started when the first pass needs it (it imports torch: seconds)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.server = None

    def get(self):
        if self.enabled and self.server is None:
            from diagnose.forkserver import ForkServer

            self.server = ForkServer.start(while_waiting=plots.preload)
            self.enabled = self.server is not None  # could not start: every pass is a fresh process
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _run_passes(target, config, report, passes, observers, workroot, output_dir, created, progress,
                steps: int, server: _LazyServer) -> Window:
    """Every pass in turn; returns the window the passes after the first measured."""
    window = Window.first(target, config)
    for index, (name, layer) in enumerate(passes, 1):
        if report.run.interrupted:
            report.layers[name] = LayerStatus("skipped", "diagnose was interrupted before this pass")
            continue
        description = layer.description if layer else "the target uninstrumented (reference wall time)"
        captured = layer is not None
        progress.pass_started(index, steps, name, description, captured)
        workdir = os.path.join(workroot, name)
        while True:
            watching = _Watching(observers if layer is None else [], workroot, os.path.join(workdir, markers.START))
            try:
                spec = _spec(target, config, name, layer.name if layer else None, window)
                spec["wait_for"] = watching.ready_files()
                prefix = layer.command_prefix(workdir, config) if layer else None
                outcome = run_pass(spec, workdir, passthrough=not captured, timeout_s=config.timeout_s,
                                   on_tick=progress.tick, on_start=watching.attach, command_prefix=prefix,
                                   server=server.get(), stall_after_s=config.stall_after_s or None)
            finally:
                watching.detach()
            if index == 1 and outcome.status == "ok" and window.empty(outcome.result):
                # the script ended right where the window began: what the observers kept is its tail;
                # measure the whole run instead, as the passes after this one will
                shutil.rmtree(workdir, ignore_errors=True)
                window = Window(None, expect_steps=False)
                continue
            break
        progress.pass_finished(name, outcome)
        if outcome.stall is not None:  # hung: its stacks, and the run did not end well
            from diagnose.hangs import hangs
            from diagnose.usercode import UserCode

            report.hangs += hangs(name, outcome.stall, UserCode(target.path))
            report.run.error = report.run.error or outcome.error
        if outcome.ranks is not None:  # a torchrun pass: what each rank measured
            from diagnose.distributed import view as distributed_view

            distributed_view.record_pass(report, name, layer.name if layer else None, outcome.ranks)
        if index == 1:
            if (outcome.result or {}).get("exit_code") == NO_FUNCTION:
                _discard(output_dir, created)
                raise TargetError(outcome.result["error"])
            _apply_outcome(report, outcome)
            report.steps = _steps(target, config, window, outcome.result)
            report.compile = _compile((outcome.result or {}).get("compile"))
            window = window.after_first(outcome.result)
        if layer is None:
            _apply_baseline(report, outcome)
            for observer_layer in observers:
                status = watching.analyse(observer_layer, outcome, report)
                report.layers[observer_layer.name] = status
                _move_artifacts(report, watching.workdir(observer_layer), output_dir)
            continue
        if outcome.status == "interrupted":
            report.run.interrupted = True
        if layer.name == "operators":  # the contract's instrumented_wall_s is the operator pass
            _apply_instrumented(report, outcome)
        status = _analysed(layer, outcome, report, workdir)
        status.elapsed_s = round(outcome.elapsed_s, 3)
        report.layers[layer.name] = status
        _move_artifacts(report, workdir, output_dir)
    return window


def _steps(target: Target, config: Config, window: Window, result: dict[str, Any] | None) -> Steps | None:
    """report.steps from the first pass's step clock (script mode)."""
    if target.mode != "script":
        return None
    seen = (result or {}).get("steps") or {}
    out = Steps(detector=seen.get("detector"), detail=seen.get("detail"), steps_seen=int(seen.get("steps_seen") or 0),
                skip_steps=config.skip_steps, steps=config.steps, full_run=config.full_run,
                ended_target=bool(seen.get("stopped_target")), batch_size=seen.get("batch_size"),
                setup_s=_round(seen.get("setup_s")), warmup_s=[round(x, 6) for x in seen.get("warmup_s") or []])
    if seen.get("window_began") and window.spec is not None:
        out.window_first = int(seen["window_first"])
        out.window_last = out.window_first + int(seen.get("window_steps") or 0) - 1
        waits = seen.get("data_wait_s") or []
        out.data_wait_s = round(sum(waits), 6) if waits else None
        out.data_wait_at = seen.get("data_wait_at")
    out.notes = steps_mod.notes(out, seen, result)
    return out


def _compile(data: dict[str, Any] | None) -> Compile | None:
    """report.compile from the first pass's torch._dynamo counters (runner.compile_info)."""
    if not data:
        return None
    return Compile(compile_s=_round(data.get("compile_s")), in_window_s=_round(data.get("in_window_s")),
                   frames=int(data.get("frames") or 0), graphs=int(data.get("graphs") or 0),
                   graph_breaks=[GraphBreak(b["reason"], int(b["count"])) for b in data.get("graph_breaks") or []],
                   recompiles=[Recompile(r["code"], list(r["reasons"]), int(r["count"]))
                               for r in data.get("recompiles") or []],
                   error=data.get("error"))


def _round(x: float | None, digits: int = 6) -> float | None:
    return round(x, digits) if isinstance(x, (int, float)) else None


def _run_derived(layer: Any, report: Report, workroot: str, output_dir: str, progress: Progress,
                 index: int, total: int, context: DerivedContext) -> None:
    """A layer computed from the others' results (it may run its own probe, never the target)."""
    if report.run.interrupted:
        report.layers[layer.name] = LayerStatus("skipped", "diagnose was interrupted before this layer")
        return
    workdir = os.path.join(workroot, layer.name)
    os.makedirs(workdir, exist_ok=True)
    progress.pass_started(index, total, layer.name, layer.description, True)
    t0 = time.monotonic()
    try:
        status = layer.derive(context, report, workdir)
    except KeyboardInterrupt:
        report.run.interrupted = True
        status = LayerStatus("skipped", "interrupted (Ctrl-C or SIGTERM) while this layer ran")
    except Exception as exc:  # noqa: BLE001 - the layer fails, the report is still written
        status = LayerStatus("failed", f"{type(exc).__name__}: {exc}")
    progress.layer_finished(layer.name, status.status, time.monotonic() - t0)
    status.elapsed_s = round(time.monotonic() - t0, 3)
    report.layers[layer.name] = status
    _move_artifacts(report, workdir, output_dir)


def _rerun(target: Target, config: Config, workroot: str, progress: Progress, window: "Window", name: str,
           kind: str, env: dict[str, str], options: dict[str, Any], server: "_LazyServer | None" = None) -> PassOutcome:
    """The uninstrumented workload again, over the same window, with runner `options`: a sweep point or a doctor
    trial. With `env` (applied at launch) a fresh interpreter, else forked from the fork server when there is
    one. Ctrl-C propagates."""
    spec = _spec(target, config, name, None, window)
    spec["options"].update(options)
    outcome = run_pass(spec, os.path.join(workroot, name), passthrough=False, timeout_s=config.timeout_s,
                       on_tick=progress.tick, stall_after_s=config.stall_after_s or None, extra_env=env or None,
                       server=server.get() if server is not None and not env else None)
    progress.pass_finished(kind, outcome)
    if outcome.status == "interrupted":
        raise KeyboardInterrupt
    return outcome


def _workload_runner(target: Target, config: Config, workroot: str, progress: Progress, window: "Window",
                     server: "_LazyServer"):
    """DerivedContext.run_workload: a re-run's step (or call) times, or why it measured none."""
    def run(name: str, env: dict[str, str], options: dict[str, Any]) -> list[float] | str:
        outcome = _rerun(target, config, workroot, progress, window, name, "doctor", env, options, server)
        res = outcome.result or {}
        if outcome.status != "ok" or res.get("exit_code"):
            return outcome.error or res.get("error") or f"the pass ended with status {outcome.status}"
        times = res.get("iteration_s") or ([res["wall_s"]] if res.get("wall_s") else [])
        return times or "the pass measured no step"
    return run


def _sweep(target: Target, config: Config, report: Report, workroot: str, progress: Progress,
           window: Window, server: "_LazyServer") -> None:
    """Measure the uninstrumented workload at several thread settings (layers/threads/sweep.py); each point
    is forked from the fork server and pins its threads itself (runner._pin_threads)."""
    from diagnose.layers.threads import sweep

    state = {"index": 0, "total": 0}

    def on_point(index: int, total: int, point: dict[str, Any]) -> None:
        state.update(index=index, total=total)
        workers = point.get("dataloader_workers")
        progress.pass_started(index, total, "sweep", f"{point['intra_op_threads']} intra-op threads"
                              + (f", {workers} DataLoader workers" if workers is not None else ""), True)

    def run_point(threads: int, workers: int | None) -> float | None:
        outcome = _rerun(target, config, workroot, progress, window, f"sweep-{state['index']}", "sweep", {},
                         {"intra_op_threads": threads, "dataloader_workers": workers}, server)
        res = outcome.result or {}
        if outcome.status != "ok":
            return None
        pinned = (res.get("overrides") or {}).get("dataloader_workers") or {}
        if workers is not None and not pinned.get("target_asked_for"):
            return None  # no DataLoader was built in this run: the point did not measure what it claims
        return statistics.median(res["iteration_s"]) if res.get("iteration_s") else res.get("wall_s")

    threads = report.threads = report.threads or Threads()
    workers = threads.dataloader_workers
    try:
        result = sweep.run_sweep(
            run_point, usable_cpus=report.machine.usable_cpus, configured_threads=report.machine.intra_op_threads,
            configured_workers=workers, has_dataloader=bool(workers), repeats=config.sweep.repeats,
            threads=config.sweep.threads, on_point=on_point)
        # what one point's time is per: a call (function mode), a step of the window (run_point takes the
        # median step), or the whole run when the script has no steps
        unit = "iterations" if target.function else "steps" if report.steps and report.steps.window_steps else "runs"
        threads.sweep = report_io.typed(Sweep, {**result, "unit": unit})
    except KeyboardInterrupt:
        threads.sweep = Sweep(status="interrupted before the sweep finished")
        raise


class _Watching:
    """The observer layers on one pass; a layer whose observer fails is reported as failed."""

    def __init__(self, layers: list[Any], workroot: str, start_marker: str):
        self.root = workroot
        self.start_marker = start_marker
        self.observers: dict[str, Any] = {}
        self.errors: dict[str, str] = {}
        for layer in layers:
            os.makedirs(self.workdir(layer), exist_ok=True)
            try:
                self.observers[layer.name] = layer.observer(self.workdir(layer))
            except Exception as exc:  # noqa: BLE001 - the layer fails, the run goes on
                self.errors[layer.name] = f"could not start: {type(exc).__name__}: {exc}"

    def workdir(self, layer: Any) -> str:
        return os.path.join(self.root, layer.name)

    def ready_files(self) -> list[str]:
        """Files the runner waits for before the workload begins (markers.wait_for)."""
        return [o.ready_file for o in self.observers.values() if getattr(o, "ready_file", None)]

    def attach(self, pid: int) -> None:
        self._each("attach", pid, self.start_marker)

    def detach(self) -> None:
        self._each("detach")

    def _each(self, method: str, *args: Any) -> None:
        for name, observer in list(self.observers.items()):
            try:
                getattr(observer, method)(*args)
            except Exception as exc:  # noqa: BLE001
                self.errors[name] = f"{method} failed: {type(exc).__name__}: {exc}"
                if method == "attach":
                    del self.observers[name]

    def analyse(self, layer: Any, outcome: PassOutcome, report: Report) -> LayerStatus:
        if layer.name in self.errors:
            return LayerStatus("failed", f"the {layer.name} observer {self.errors[layer.name]}")
        status = _analysed(layer, outcome, report, self.workdir(layer))
        status.elapsed_s = round(outcome.elapsed_s, 3)
        return status


def _analysed(layer: Any, outcome: Any, report: Report, workdir: str) -> LayerStatus:
    """A layer's analysis; a crash in it fails that layer, with the reason, not the report."""
    try:
        return layer.analyse(outcome, report, workdir)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - every other layer and the report are still written
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        return LayerStatus("failed", f"its analysis failed: {type(exc).__name__}: {exc} "
                                     f"({os.path.basename(where.filename)}:{where.lineno}; a bug in diagnose, "
                                     "please report it)")


def _move_artifacts(report: Report, workdir: str, output_dir: str) -> None:
    try:
        _move(report, workdir, output_dir)
    except OSError as exc:
        raise OutputError(f"cannot write into {output_dir}: {exc.strerror or exc}") from None


def _move(report: Report, workdir: str, output_dir: str) -> None:
    for key, fname in list(report.artifacts.items()):
        src = os.path.join(workdir, fname)
        dst = os.path.join(output_dir, fname)
        if os.path.isdir(src) and os.path.isdir(dst):  # a reproducers/ a user kept files in: merge into it
            for name in os.listdir(src):
                os.replace(os.path.join(src, name), os.path.join(dst, name))
        elif os.path.exists(src):
            shutil.move(src, dst)


def _discard(output_dir: str, created: bool) -> None:
    """Remove the output directory only if this run created it and left it empty."""
    if created:
        try:
            os.rmdir(output_dir)
        except OSError:
            pass
