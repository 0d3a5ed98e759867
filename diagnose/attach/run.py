"""diagnose attach PID: diagnose a process that is already running, from outside, without stopping it.

    attach(AttachConfig, say) -> Result (the api's: report, output folder, exit code)

Three observers run side by side for --duration seconds, none of them inside the target:
- py-spy (tools/pyspy.py) records the Python and native stacks of every process of the tree;
- the threads layer's sampler (layers/threads/sampler.py, its own process) reads /proc: run-queue wait, pools,
  children, DataLoader workers;
- this process reads the tree's RSS every ATTACH_RSS_INTERVAL_S.
Then stacks.py turns the stacks into report.sampled and a step budget by sampling; the threads layer's
analysis makes report.threads; layers/memory/growth.py judges the RSS series (memory.rss, its readings
interval_s apart). The findings are the usual rules on that report (findings.judge): those whose inputs an
attach report has (threads, memory growth, time outside torch through the step budget's native slice) can
fire; the layers that need to run the script (the operator pass's shapes and exact times, cProfile,
micro-benchmarks, efficiency, counters, doctor, what-ifs) are `skipped` with the command that gets them.

Attaching meets (process.py says how each is told apart, and its exit code): no such process (2), ptrace
not permitted (5), another user's process (6), not Python (7). A target that exits while it is sampled
gives a partial report, exit 3; Ctrl-C gives one too, exit 130.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from diagnose import __version__, findings, machine, output, procfs
from diagnose.api import Result
from diagnose.attach import process, stacks
from diagnose.config import ATTACH_RSS_INTERVAL_S, AttachConfig
from diagnose.errors import ExitCode, UsageError
from diagnose.layers.memory.growth import growth
from diagnose.layers.threads import analysis as threads_analysis
from diagnose.layers.threads import environment, recording
from diagnose.report.model import (
    LayerStatus,
    Memory,
    MemoryProjection,
    Report,
    Sampled,
    TargetInfo,
)
from diagnose.tools import pyspy

PYSPY_GRACE_S = 20.0  # py-spy writes its file after --duration; a large tree's native symbols take a while
THREADS_RECORDING = "threads-recording.json"
STACKS = "stacks.chrometrace.json"
# what attaching from outside cannot measure, per layer, and why
NOT_FROM_OUTSIDE = {
    "operators": "input shapes, call counts and exact operator times need the operator pass, which runs the script "
                 "under torch.profiler (report.sampled has the operators by sampling)",
    "python": "cProfile's call graph needs the script run under it (report.sampled has the Python lines by sampling)",
    "microbench": "micro-benchmarks need the operators' input shapes, which sampling does not see",
    "efficiency": "operator efficiency needs exact operator times and shapes from the operator pass",
    "counters": "hardware counters are read over a pass diagnose runs",
    "doctor": "the doctor's trials re-run the steps with changed settings",
    "what_if": "what-ifs re-run the steps with changed code",
}


def rerun_command(target: process.Attachable) -> str:
    """The diagnose command line that measures what attaching cannot: the script, run by diagnose."""
    if target.script.startswith("-"):
        return "diagnose your_script.py"
    args = f" -- {shlex.join(target.script_args)}" if target.script_args else ""
    ranks = f"--nproc-per-node {len(target.ranks)} " if target.torchrun and target.ranks else ""
    return f"diagnose {ranks}{shlex.quote(target.script)}{args}"


def attach(config: AttachConfig, say: Callable[[str], None] = lambda line: None) -> Result:
    exe = pyspy.executable()
    if exe is None:
        raise UsageError("diagnose attach needs py-spy: pip install py-spy (into the environment diagnose runs from)")
    if config.duration_s < 1 or config.rate_hz <= 0:
        raise UsageError(f"--duration wants seconds >= 1 and --rate samples a second > 0, not {config.duration_s:g} "
                         f"and {config.rate_hz:g}")
    target = process.inspect(config.pid)
    stem = os.path.splitext(os.path.basename(target.script.split()[-1]))[0] or "process"
    out_dir = config.output_dir or output.default_output_dir(f"{stem}-attach", config.reports_root)
    created = not os.path.exists(out_dir)
    output.prepare_output_dir(out_dir, config.force)
    workdir = tempfile.mkdtemp(prefix="diagnose-attach-")
    try:
        report = _report(target, config)
        say(f"diagnose: attached to {config.pid} ({target.script}"
            + (f", torchrun with {len(target.ranks)} ranks" if target.torchrun else "")
            + f"), sampling for {config.duration_s:g} s at {config.rate_hz:g} Hz")
        code = _sample(report, target, config, exe, workdir)
        findings.judge(report)
        output.write_report(report, out_dir)
    except BaseException:
        output.discard(out_dir, created)
        raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return Result(report=report, output_dir=out_dir, exit_code=code)


def _report(target: process.Attachable, config: AttachConfig) -> Report:
    report = Report(target=TargetInfo(script=target.script, argv=list(target.script_args), mode="attach",
                                      pid=config.pid),
                    machine=machine.describe(target.environ))
    report.run.started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    report.run.diagnose_version = __version__
    return report


def _sample(report: Report, target: process.Attachable, config: AttachConfig, exe: str, workdir: str) -> ExitCode:
    """Run the three observers, stop them, fill the report; the exit code."""
    pid = config.pid
    trace = os.path.join(workdir, STACKS)
    threads_out = os.path.join(workdir, THREADS_RECORDING)
    with open(os.path.join(workdir, "py-spy.log"), "w+") as spy_log, \
            open(os.path.join(workdir, "sampler.log"), "w") as sampler_log:
        exited, interrupted, rss, elapsed = _observe(config, exe, trace, threads_out, spy_log, sampler_log)
        spy_log.seek(0)
        spy_text = spy_log.read()
    if not os.path.exists(trace) or os.path.getsize(trace) == 0:
        kind = pyspy.failure(spy_text)
        if kind == "permission":
            raise process.PtraceDenied(f"py-spy was not permitted to read process {pid}: {process.ptrace_fix()}")
        if kind == "not_python" and process.alive(pid):
            raise process.NotPython(f"py-spy found no Python interpreter in process {pid}: "
                                    f"{_last_line(spy_text)}")
        if process.alive(pid) and not interrupted:
            raise UsageError(f"py-spy recorded nothing from process {pid}: {_last_line(spy_text)}")
        exited = exited or not process.alive(pid)
    spans = pyspy.read_chrometrace(trace) if os.path.exists(trace) and os.path.getsize(trace) else []
    _fill(report, target, config, spans, spy_text, threads_out, rss, exited, elapsed)
    if interrupted:
        report.run.interrupted = True
        return ExitCode.INTERRUPTED
    if exited:
        report.run.error = (f"process {pid} exited after {elapsed:.1f} s of the {config.duration_s:g} s asked for: "
                            "the report covers what was sampled before")
        return ExitCode.TARGET_FAILED
    return ExitCode.OK


def _observe(config: AttachConfig, exe: str, trace: str, threads_out: str, spy_log, sampler_log,
             ) -> tuple[bool, bool, list[int], float]:
    """py-spy and the thread sampler started, the RSS read until --duration: (exited, interrupted, the RSS
    readings, seconds it took)."""
    pid = config.pid
    started = time.monotonic()
    spy = subprocess.Popen(pyspy.record_command(exe, pid, trace, config.rate_hz, config.duration_s),
                           stdin=subprocess.DEVNULL, stdout=spy_log, stderr=subprocess.STDOUT, start_new_session=True)
    sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid", str(pid),
                                "--out", threads_out, "--max-duration", str(config.duration_s),
                                "--observer", str(spy.pid), "--observer", str(os.getpid())],
                               stdin=subprocess.DEVNULL, stdout=sampler_log, stderr=subprocess.STDOUT,
                               start_new_session=True, env={**os.environ, "PYTHONPATH": _pythonpath()})
    rss: list[int] = []
    exited = interrupted = False
    next_read = started
    try:
        while time.monotonic() - started < config.duration_s:
            if not process.alive(pid):
                exited = True
                break
            if spy.poll() is not None:  # py-spy ended early: it failed, or the target is gone
                exited = not process.alive(pid)
                break
            value = process.rss_bytes(procfs.descendants(pid))
            if value is not None:
                rss.append(value)
            next_read += ATTACH_RSS_INTERVAL_S
            time.sleep(max(0.0, next_read - time.monotonic()))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        _stop(spy, sampler, early=exited or interrupted)
    return exited, interrupted, rss, time.monotonic() - started


def _pythonpath() -> str:
    """diagnose's own folder first, so the sampler runs this diagnose whatever the target's PYTHONPATH."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rest = os.environ.get("PYTHONPATH")
    return here + (os.pathsep + rest if rest else "")


def _stop(spy: subprocess.Popen, sampler: subprocess.Popen, early: bool) -> None:
    """py-spy stops at --duration by itself; earlier (the target gone, Ctrl-C), SIGINT makes it write what it
    has. The sampler stops at --max-duration or when the tree is gone; SIGTERM takes a last sample."""
    for proc, sig in ((spy, signal.SIGINT), (sampler, signal.SIGTERM)):
        if early and proc.poll() is None:
            proc.send_signal(sig)
    for proc in (spy, sampler):
        try:
            proc.wait(timeout=PYSPY_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("py-spy> Sampling")]
    return lines[-1] if lines else "no output"


def _role(pid: int, target: process.Attachable) -> tuple[str, int | None]:
    if pid in target.ranks:
        return f"rank {target.ranks[pid]}", target.ranks[pid]
    if pid == target.pid:
        return "target", None
    info = procfs.read_process(pid, with_cmdline=False)
    return ("dataloader_worker" if info and info.comm == "pt_data_worker" else "child"), None


def _fill(report: Report, target: process.Attachable, config: AttachConfig, spans: list[pyspy.Span],
          spy_text: str, threads_out: str, rss: list[int], exited: bool, elapsed: float) -> None:
    pid = config.pid
    where = stacks.Where(cwd=target.cwd)
    mains = {(p, p) for p in (target.ranks or {pid: 0})}
    result = stacks.analyse(spans, config.rate_hz, where, stacks.ops_names() if spans else {}, mains)
    errors = 0
    for word in spy_text.split("Errors:")[1:]:
        token = word.split()[0] if word.split() else ""
        errors += int(token) if token.isdigit() else 0
    exe = pyspy.executable()
    sampled = Sampled(sampler=f"{pyspy.version(exe) if exe else 'py-spy'} record --native --idle --subprocesses",
                      rate_hz=config.rate_hz, duration_s=round(result.duration_s, 3), samples=result.samples,
                      errors=errors, operator_samples=result.operator_samples,
                      imputed_samples=result.imputed_samples, exited=exited,
                      operators=result.operators, functions=result.functions, libraries=result.libraries,
                      steps=result.steps)
    for p in result.processes:
        p.role, p.rank = _role(p.pid, target)
        cmd = procfs.read_cmdline(p.pid) or (target.cmdline if p.pid == pid else [])
        p.command = " ".join(cmd)[:200]
    sampled.processes = result.processes
    if not target.has_torch:
        sampled.notes.append("torch is not loaded in the process (no libtorch mapped when diagnose attached): "
                             "no operator can be seen")
    if target.has_torch:
        sampled.notes += stacks.operator_notes(result)
    if result.unresolved:
        sampled.notes.append(f"{result.unresolved}; `{rerun_command(target)}` times any step")
    elif result.steps is None:
        sampled.notes.append("no step seen: no Optimizer.step or nn.Module call started at least "
                             f"{stacks.MIN_STEPS} times on the main thread while sampled (the step budget covers "
                             "the sampled time instead)")
    elif result.steps.min_samples_per_step < 4:
        sampled.notes.append(f"the shortest step had {result.steps.min_samples_per_step} samples: steps shorter than "
                             f"a few sample intervals ({1000 / config.rate_hz:.0f} ms) can be missed, which "
                             "lengthens the step times (a higher --rate sees them)")
    if errors:
        sampled.notes.append(f"py-spy could not take {errors} samples")
    report.sampled = sampled
    report.step_budget = stacks.budget(result, config.rate_hz, where)
    again = rerun_command(target)
    report.layers["sampled"] = LayerStatus(
        "ok" if result.samples else "failed",
        None if result.samples else f"py-spy recorded no busy stack: {_last_line(spy_text)}",
        elapsed_s=round(elapsed, 2),
        notes=[(f"{result.samples} busy thread samples at {config.rate_hz:g} Hz: a share is known to about "
                f"{100 / max(1, result.samples) ** 0.5:.0f} points")] if result.samples else [])
    report.layers["threads"] = _threads(report, threads_out, target.ranks)
    report.layers["memory"] = _memory(report, rss)
    for name, why in NOT_FROM_OUTSIDE.items():
        report.layers[name] = LayerStatus("skipped", f"not from outside: {why}; `{again}` runs it")


def _threads(report: Report, path: str, ranks: dict[int, int]) -> LayerStatus:
    if not os.path.exists(path):
        return LayerStatus("failed", "the thread sampler wrote no recording")
    usable = report.machine.usable_cpus or os.cpu_count() or 1
    threads = threads_analysis.analyse(recording.load(path), usable)
    threads.environment = environment.audit(report.machine, processes=threads.compute_processes or 1)
    for p in threads.processes:  # torchrun's ranks, by the RANK in their environment
        p.rank = ranks.get(p.pid)
    report.threads = threads
    if threads.mean_runnable is None:
        return LayerStatus("failed", threads.reason or "too few samples to measure anything")
    return LayerStatus("ok")


def _memory(report: Report, rss: list[int]) -> LayerStatus:
    if not rss:
        return LayerStatus("failed", "the RSS could not be read")
    mem = report.memory = Memory()
    mem.rss = growth("rss", rss, interval_s=ATTACH_RSS_INTERVAL_S)
    mem.projection = MemoryProjection(basis="attached to a running process: its length is not known from outside",
                                      rss_bytes=rss[-1])
    mem.notes.append(f"the RSS of the whole process tree every {ATTACH_RSS_INTERVAL_S:g} s while sampled "
                     "(not at step boundaries: the growth is per reading interval)")
    return LayerStatus("ok")
