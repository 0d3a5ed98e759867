"""Operators layer: torch.profiler with shapes, FLOPs, memory and source lines.

- recorder.py (child side): profiles the measured part of the workload and
  reduces the events to raw rows keyed by (operator, shapes, dtypes, source,
  parent operator), plus a Chrome trace capped in size (kineto.py);
- rows.py and `OperatorsLayer.analyse` (parent side): one row per (operator,
  input shapes) for the report (report/rows.py sums them);
- processes.py (parent side): under torchrun every rank's raw rows and
  trace.json, else those of the processes the target forked (each recorded
  by itself, children.ChildPass), merged first, so the report's table sums
  the processes, each row saying in which role of process and which Python
  thread its calls ran.
"""

from __future__ import annotations

import os
from typing import Any

from diagnose import trends
from diagnose.config import OperatorsOptions
from diagnose.layers.base import Layer
from diagnose.layers import memory
from diagnose.layers.operators import modules, processes
from diagnose.layers.operators.rows import MAX_ROWS, attach_functions, merge_rows
from diagnose.protocol import PassSpec, iteration_stats
from diagnose.report import io as report_io
from diagnose.report.model import AutocastEntry, Autograd, ChildProcess, Doctor, Float64Origin, LayerStatus, OperatorMemory, OperatorSummary, \
    ProcessFacts, RecordingLine, Report, SubnormalScan, TraceSummary


COMPILE_EVENT = "(dynamo_timed)"  # torch.compile's own phases as the profiler names them


class OperatorsLayer(Layer):
    name = "operators"
    description = "torch.profiler with shapes, FLOPs, memory and source lines"
    options = ("operators", OperatorsOptions)

    def recorder(self, spec: PassSpec):
        from diagnose.layers.operators.recorder import OperatorsRecorder  # child side only: torch hooks

        return OperatorsRecorder(spec)

    def analyse(self, outcome, report: Report, workdir: str) -> LayerStatus:
        _instrumented_run(report, outcome)
        # under torchrun: every rank's rows and trace.json as one; else the target's process's with its children's
        if outcome.ranks is not None:
            raw = processes.merged_raw(outcome.ranks, workdir)
        else:
            raw = None if outcome.raw is None else processes.with_children(outcome.raw, outcome.children, workdir)
        if raw is None:
            return LayerStatus("failed", outcome.failure_reason("the operator pass"))
        seen = raw.get("modules") or {}
        notes = []
        if raw.get("all_threads"):
            notes.append("the model ran in threads other than the main one, so every thread was recorded "
                         "(torch.profiler's profile_all_threads); per-operator memory is not recorded in that mode")
        compiling = [r for r in raw["rows"] if r["name"].endswith(COMPILE_EVENT)]
        if compiling:  # torch.compile at work inside the window: a phase (report.compile), never an operator
            raw["rows"] = [r for r in raw["rows"] if not r["name"].endswith(COMPILE_EVENT)]
            notes.append(f"torch.compile compiled inside the window ({sum(r['self_cpu_us'] for r in compiling) / 1e3:.1f}"
                         " ms of its own events, left out of the operator rows): a recompile; see torch.compile "
                         "in the report's header for why")
        rows = merge_rows(raw["rows"], {path: m["class"] for path, m in seen.items()})
        if len(rows) > MAX_ROWS:
            notes.append(f"kept the {MAX_ROWS} rows with most self CPU time of {len(rows)}")
            rows = rows[:MAX_ROWS]
        attach_functions(rows)
        report.operators = rows
        total_self_us = sum(r["self_cpu_us"] for r in raw["rows"])
        attributed_us = sum(r["self_cpu_us"] for r in raw["rows"] if r["source"])
        trace = report_io.typed(TraceSummary, raw.get("trace"))
        report.operator_summary = OperatorSummary(
            total_self_cpu_us=round(total_self_us, 3),
            attributed_share=round(attributed_us / total_self_us, 4) if total_self_us else None,
            attribution_overhead_us=round(raw.get("attribution_overhead_us", 0.0), 3),
            below_python_us=round(raw.get("below_python_us") or 0.0, 3),
            events=raw.get("events") or 0,
            memory=report_io.typed(OperatorMemory, raw.get("memory") or {}),
            window=raw.get("window"),
            trace=trace,
            float64_origins=[report_io.typed(Float64Origin, o) for o in raw.get("float64_origins") or []],
            autocast_entries=[report_io.typed(AutocastEntry, o) for o in raw.get("autocast_entries") or []],
            children=[ChildProcess(pid=c.pid, role=c.role, name=c.name, ended=c.ended, error=c.raw_error,
                                   self_cpu_us=round(sum(r["self_cpu_us"] for r in (c.raw or {}).get("rows") or []), 3))
                      for c in outcome.children],
            not_recorded=list(outcome.result.not_recorded) if outcome.result else [],
        )
        report.modules = modules.build(raw["rows"], seen, raw.get("module_roots") or [])
        report.stacks = modules.stacks(raw["rows"], seen, raw.get("module_roots") or [])
        report.autograd = autograd_summary(raw)
        if outcome.ranks is None:  # one process's allocations (a torchrun pass's ranks are not merged here)
            memory.from_operators(report, raw)
            report.operator_summary.trends = trends.site_trends(raw.get("sites") or [])
        if raw.get("window"):
            notes.append(raw["window"])
        if raw.get("budget"):
            notes.append(raw["budget"])
        if os.path.exists(os.path.join(workdir, "trace.json")):
            report.artifacts["trace"] = "trace.json"
            if trace and trace.truncated:
                notes.append(
                    f"trace.json holds the first {trace.events_written} of {trace.events_total} events "
                    f"({trace.span_s:.2f} s); fewer --steps (or --trace-max-events) keep the whole window"
                )
        if outcome.status != "ok":
            notes.append(f"the target did not finish this pass ({outcome.status}): rows cover what ran before")
        notes += _process_notes(outcome)
        if not rows and raw.get("recorded_calls"):
            # the source mode saw torch calls while the profiler recorded, and the profiler kept none of them
            return LayerStatus("skipped", (
                f"the profiler kept none of the {raw['recorded_calls']} torch calls made while it recorded: another "
                "torch.profiler in the process took the events (one runs at a time), most likely the script's own; "
                "run it without its profiler, or read that profiler's output"), notes=notes)
        if not rows:
            unseen = outcome.result is not None and (outcome.result.not_recorded or outcome.result.forked >
                                                     len([c for c in outcome.children if c.raw]))
            if unseen:  # never "no torch operators": they may have run where nothing recorded
                return LayerStatus("skipped", "nothing recorded: the target's own process ran no torch operators, "
                                   "and processes it started are not recorded (see the notes)", notes=notes)
            return LayerStatus("skipped", "the target's main process ran no torch operators" + (
                ", nor did the processes it forked" if outcome.children else ""), notes=notes)
        return LayerStatus("ok", notes=notes)


def _process_notes(outcome) -> list[str]:
    """What the operator pass recorded of the processes the target started, and what it could not."""
    notes = []
    recorded = [c for c in outcome.children if c.raw]
    forked = outcome.result.forked if outcome.result else 0
    if forked and (outcome.result.raw or {}).get("all_threads"):
        notes.append(f"the target forked {forked} process(es), not recorded: with every thread recorded, the "
                     "profile a forked process inherits is global, and starting its own would first reduce all the "
                     "parent's events in it; their torch work is not in this table")
    elif forked or recorded:
        roles: dict[str, int] = {}
        for child in recorded:
            roles[child.role] = roles.get(child.role, 0) + 1
        said = ", ".join(f"{n} {role}(s)" for role, n in roles.items()) or "none of them"
        missing = max(0, forked - len(recorded))
        notes.append(f"the target forked {max(forked, len(recorded))} process(es); recorded {said}, each from its "
                     "start to its end, their rows summed with the main process's (each row's processes say where "
                     "its calls ran)" + (
                         f"; {missing} left no recording (killed before they could write it, or still running when "
                         "the pass ended): their torch work is not here" if missing else ""))
    failed = [c for c in outcome.children if c.raw_error]
    if failed:
        notes.append(f"{len(failed)} forked process(es) could not collect their recording: {failed[0].raw_error}")
    started = outcome.result.not_recorded if outcome.result else []
    if started:
        kinds: dict[str, int] = {}
        for process in started:
            kinds[process.how] = kinds.get(process.how, 0) + 1
        said = ", ".join({"spawn": f"{kinds.get('spawn')} started by multiprocessing's spawn method",
                          "forkserver": "multiprocessing's fork server and the workers it forks",
                          "subprocess": f"{kinds.get('subprocess')} subprocess(es) running Python"}[how] for how in kinds)
        notes.append(f"not recorded: {said}. Each runs a fresh interpreter, and diagnose records the processes the "
                     "target forks, not new interpreters: their torch work is not in this table. To see it, start "
                     "them with the fork method (multiprocessing.get_context('fork')), or run diagnose on the "
                     "script they run")
    return notes


def is_backward(name: str) -> bool:
    """A profiler row of backward work: an autograd node (`AddmmBackward0`) or the engine running one."""
    return "Backward" in name or name.startswith("autograd::engine")


def autograd_summary(raw: dict[str, Any]) -> Autograd | None:
    """Graph recording in the window (recorder.py counts it per user line) and the backward work seen."""
    data = raw.get("autograd")
    if data is None:  # a result from before the recorder counted it
        return None
    lines = sorted((RecordingLine(source, n) for source, n in data.get("recording") or []), key=lambda l: -l.calls)
    return Autograd(calls=int(raw.get("recorded_calls") or 0), recording_calls=sum(l.calls for l in lines),
                    backward_ops=sum(int(r.get("calls") or 1) for r in raw.get("rows") or [] if is_backward(r["name"])),
                    grad_mode_off_calls=int(data.get("grad_mode_off_calls") or 0),
                    slot_calls=int(data.get("slot_calls") or 0), lines=lines)


def _instrumented_run(report: Report, outcome) -> None:
    """The operator pass's own timings (the contract's instrumented_wall_s) and the doctor's scan of operator
    inputs (recorder.py), into report.run and report.doctor."""
    res = outcome.result
    if res is None:
        return
    if res.wall_s is not None:
        report.run.instrumented_wall_s = res.wall_s
        report.run.instrumented_minor_faults = res.minor_faults
        times = list(res.iteration_s)
        recorded = (res.raw or {}).get("recorded_iters")
        if recorded:  # with a profiler schedule only the last iterations are instrumented
            times = times[-recorded:]
        report.run.instrumented_iterations = iteration_stats(times)
        if report.steps is not None and report.steps.window_s and not recorded:
            report.steps.instrumented_drift = trends.drift(times)
            if outcome.ranks is None:  # one process's call sites (a torchrun pass's ranks are not merged here)
                report.steps.instrumented_work = trends.step_work((res.raw or {}).get("sites") or [], times)
    raw = res.raw or {}
    if "input_scan" in raw:
        report.doctor = report.doctor or Doctor()
        process = report.doctor.process = report.doctor.process or ProcessFacts()
        process.operator_inputs = [report_io.typed(SubnormalScan, row) for row in raw["input_scan"]]
        process.operator_inputs_scope = raw.get("input_scan_scope") or (
            "nothing: no step ran before the window (--skip-steps 0, --full-run, or no steps found)")
