"""The short summary printed after a run (and by `diagnose --load`)."""

from __future__ import annotations

import os

from diagnose.render import distributed, fmt
from diagnose.report import memory as memory_views
from diagnose.report import sampled as sampled_views
from diagnose.report.model import Report

TOP_OPERATORS = 8
TOP_FINDINGS = 5
TOP_FUNCTIONS = 5
TOP_MICROBENCH = 8


def render(report: Report, output_dir: str | None = None) -> str:
    t = report.target
    out = [f"diagnose {t.script}{':' + t.function if t.function else ''}  ({t.mode} mode)"]
    budget = fmt.budget_line(report)
    if budget:  # where a step's time goes, first (diagnose/budget.py)
        out.append(f"step budget: {budget}")
    verdict = fmt.verdict_line(report)
    if verdict:  # healthy or not, with its numbers (findings/verdict.py)
        out.append(f"verdict: {verdict}")
    out.append(fmt.outcome_line(report))
    if report.run.traceback:
        out.append(f"  at {report.run.traceback[-1]}")
    out += [f"  {line}" for line in fmt.timing_lines(report) + fmt.steps_lines(report)]
    ops = report.operators[:TOP_OPERATORS]
    if ops:
        out.append("")
        out.append("Top operators by self CPU time")
        rows = [("operator", "input shapes", "calls", "self", "share", "GFLOP/s", "source", "module")]
        for r in ops:
            where = fmt.module_where(r) or "-"
            rows.append((r.name, fmt.shapes(r.shapes_shown(), 40), str(r.calls), fmt.us(r.self_cpu_us),
                         f"{r.self_pct:.1f}%", f"{r.gflops_per_s:.1f}" if r.gflops_per_s else "-", r.source or "-",
                         where if len(where) <= 48 else "…" + where[-47:]))
        out += fmt.text_table(rows)
        ran_in = fmt.places(report)
        if ran_in:
            out.append(f"  where they ran: {ran_in}")
    out += _modules(report)
    if report.sampled is not None:
        out += ["", "Sampled from outside (py-spy: Python and native stacks)"]
        out += [f"  {line}" for line in sampled_views.lines(report.sampled) + sampled_views.beside_lines(report)]
    op_layer = report.layers.get("operators")
    if op_layer and op_layer.status != "ok":
        out.append("")
        out.append(f"Operators: {op_layer.status}: {op_layer.reason}")
    out += _python(report)
    out += _threads(report)
    out += _distributed(report)
    rows = fmt.microbench_rows(report, TOP_MICROBENCH)
    if rows:
        out += ["", "Micro-benchmarks (each operator alone at its recorded shapes; speedup vs 1 thread)"] + fmt.text_table(rows, right={2, 3, 4, 5, 6, 7})
    rows = fmt.efficiency_rows(report, TOP_OPERATORS)
    if rows:
        out += ["", "Efficiency (operator pass times against this machine's measured peaks)"]
        out += fmt.text_table(rows, right={2, 3, 4, 5, 7})
        timing = report.efficiency.timing if report.efficiency else None
        out += [f"  {line}" for line in (fmt.roofs_line(report), timing) if line]
    out += _doctor(report)
    out += _what_if(report)
    out += _memory(report)
    counters = fmt.counters_lines(report)
    if counters:
        out += ["", "Counters"] + [f"  {line}" for line in counters]
    out.append("")
    if report.findings:
        out.append("Findings")
        out += fmt.findings_list(report.findings, TOP_FINDINGS, indent="      ",
                                 head=lambda i, f: f"  [{fmt.severity_tag(f)}] {f.kind}: {f.title}",
                                 more=lambda n: f"  ... {n} more in the report")
    else:
        out.append("Findings: none")
    if report.not_confirmed:
        lines = fmt.not_confirmed_lines(report, indent="      ")
        out += ["", fmt.NOT_CONFIRMED_HEAD] + [line if line.startswith(" ") else f"  {line}" for line in lines]
    statuses = ", ".join(f"{name} {s.status}" + (f" ({fmt.short_reason(s.reason)})" if s.reason and s.status != "ok" else "")
                         for name, s in report.layers.items())
    if statuses:
        out.append(f"Layers: {statuses}")
    if output_dir:
        files = ", ".join(sorted(report.artifacts.values()))
        out.append(f"Report: {os.path.join(output_dir, 'report.md')}  ({files})")
    return "\n".join(out) + "\n"


def _modules(report: Report) -> list[str]:
    lines = fmt.module_class_lines(report, TOP_FUNCTIONS + 1)
    if not lines:
        return []
    out = ["", "Modules (operator time by nn.Module class, forward and backward)"] + [f"  {l}" for l in lines]
    hot = fmt.hot_modules(report, TOP_FUNCTIONS)
    if hot:
        out.append("  hottest modules by their own operators:")
        out += [f"    {path} ({cls}{f', {n} instances' if n > 1 else ''}): {pct:.1f}%" for path, cls, n, pct in hot]
    return out


def _python(report: Report) -> list[str]:
    split = fmt.python_split_line(report)
    if split is None:
        return []
    out = ["", "Python (call-graph pass)", f"  {split}"]
    rows = [("your function", "where", "cumulative", "self+tiny calls", "tiny calls")]
    for r in fmt.user_functions(report, TOP_FUNCTIONS):
        rows.append((r.function, r.location, f"{r.cumulative_pct:.1f}%", fmt.duration(r.loop_overhead_s),
                     str(r.tiny_calls or 0)))
    if len(rows) > 1:
        out += fmt.text_table(rows)
    layer = report.layers.get("python")
    for name, why in (layer.missing.items() if layer else ()):
        out.append(f"  {name} not made: {why}")
    return out


def _threads(report: Report) -> list[str]:
    lines = fmt.threads_lines(report)
    rows, recommendation = fmt.sweep_rows(report)
    layer = report.layers.get("threads")
    if not lines and not rows and not recommendation and not (layer and layer.notes):
        return []
    out = ["", "Threads"] + [f"  {line}" for line in lines] + [f"  note: {n}" for n in (layer.notes if layer else [])]
    if rows:
        out += ["", "  Thread sweep (uninstrumented, interleaved runs)"] + fmt.text_table(rows)
    if recommendation:
        out.append(f"  {recommendation}")
    return out


def _doctor(report: Report) -> list[str]:
    lines = fmt.doctor_lines(report)
    rows = fmt.doctor_trial_rows(report)
    if not lines and not rows:
        return []
    out = ["", "Environment doctor"] + [f"  {line}" for line in lines]
    if rows:
        out += ["  trials (your steps, with and without each change, interleaved rounds):"]
        out += ["  " + line for line in fmt.text_table(rows, right={2, 3, 4, 5, 6, 7})]
    return out


def _what_if(report: Report) -> list[str]:
    if report.what_if is None:
        return []
    rows = fmt.what_if_rows(report)
    out = ["", "What-if (your steps with each change applied from outside, interleaved rounds against the unchanged run)"]
    if rows:
        out += ["  " + line for line in fmt.text_table(rows, right={1, 2, 3, 4, 5, 6})]
    return out + [f"  {line}" for line in fmt.what_if_lines(report)]


def _memory(report: Report) -> list[str]:
    """report.memory: growth per step, projection, what is kept, the peak (report/memory.py words them)."""
    if report.memory is None:
        return []
    head = "Memory (while attached)" if report.target.mode == "attach" else "Memory (per step of the window)"
    return ["", head] + [f"  {line}" for line in memory_views.lines(report.memory)]


def _distributed(report: Report) -> list[str]:
    """A torchrun job (diagnose --nproc-per-node): one row per rank, the straggler, collectives."""
    if not report.distributed:
        return []

    return (["", distributed.heading(report)] + fmt.text_table(distributed.rank_rows(report), right={3, 4, 5, 6, 7})
            + [f"  {line}" for line in distributed.summary_lines(report)])
