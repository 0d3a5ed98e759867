"""report.md: the report for a pull request or an issue.

Short by design: verdict first, then the top operators, then the run's
details; tables are trimmed and say so.
"""

from __future__ import annotations

from diagnose.render import distributed, fmt
from diagnose.report import memory as memory_views
from diagnose.report import sampled as sampled_views
from diagnose.report.model import OperatorSummary, Report

TOP_OPERATORS = 15
TOP_FINDINGS = 10
TOP_FUNCTIONS = 12
TOP_MICROBENCH = 12


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: object) -> str:
    return f"`{_cell(text)}`" if text not in (None, "") else "-"


def render(report: Report) -> str:
    t = report.target
    m = report.machine
    label = f"{t.script}:{t.function}" if t.function else t.script
    out = [f"# diagnose: `{label}`", ""]
    budget = fmt.budget_line(report)
    if budget:  # where a step's time goes, first (diagnose/budget.py)
        out += [f"**Step budget:** {budget}", ""]
    verdict = fmt.verdict_line(report)
    if verdict:  # healthy or not, with its numbers (findings/verdict.py)
        out += [f"**Verdict:** {verdict}", ""]
    out.append(f"**{fmt.outcome_line(report)}**")
    if report.run.traceback:
        out += ["", "```", *report.run.traceback, report.run.error or "", "```"]
    out += [""] + [f"- {line}" for line in fmt.timing_lines(report) + fmt.steps_lines(report)]
    argv = " ".join(t.argv)
    out.append(f"- mode: {t.mode}" + (f", skip {t.warmup} calls, measure {t.iters}" if t.function else "")
               + (f", arguments: `{argv}`" if argv else ""))
    out.append("")

    out += ["## Findings", ""]
    if report.findings:
        out += fmt.findings_list(
            report.findings, TOP_FINDINGS, indent="   - ",
            head=lambda i, f: f"{i}. **[{fmt.severity_tag(f)}] {f.kind}**{f' at `{f.location}`' if f.location else ''}: "
                              f"{_cell(f.title)}",
            evidence=lambda f: ", ".join(f"{k}={_evidence(v)}" for k, v in fmt.evidence_items(f)),
            also=lambda a: f"{fmt.also_label(a, op=False)}: {_cell(a.title)}",
            more=lambda n: f"\n_{n} more findings in report.json._")
    else:
        out.append("No findings: nothing crossed a threshold.")
    out.append("")
    if report.not_confirmed:
        out += [f"### {fmt.NOT_CONFIRMED_HEAD}", ""]
        for n in report.not_confirmed:
            f = n.finding
            out += [f"- **{f.kind}**{f' at `{f.location}`' if f.location else ''}: {_cell(f.title)}",
                    f"  - doubted: {_cell('; '.join(f.doubts))}"]
            if n.reproduce:
                out.append(f"  - re-measure: {_code(n.reproduce)}{fmt.reproduce_where(n.reproduce)}")
        out.append("")

    out += ["## Operators", ""]
    layer = report.layers.get("operators")
    if layer and layer.status != "ok":
        out.append(f"_{layer.status}: {layer.reason}_")
        out.append("")
    if report.operators:
        summary = report.operator_summary or OperatorSummary()
        out.append(f"One row per (operator, input shapes), by self CPU time in the instrumented pass; "
                   f"total {fmt.us(summary.total_self_cpu_us)}, "
                   f"{(summary.attributed_share or 0) * 100:.0f}% of it attributed to a line of your code.")
        out.append("")
        out.append("| operator | input shapes | dtypes | calls | self | share | per call (min / mean / max) "
                   "| GFLOP/s | source | module | library line |")
        out.append("|---|---|---|---:|---:|---:|---:|---:|---|---|---|")
        for r in report.operators[:TOP_OPERATORS]:
            out.append("| " + " | ".join([
                _code(r.name), _code(fmt.shapes(r.shapes_shown(), 60)), _cell(",".join(d for d in r.dtypes if d) or "-"),
                str(r.calls), fmt.us(r.self_cpu_us), f"{r.self_pct:.1f}%", _cell(fmt.per_call(r)),
                f"{r.gflops_per_s:.1f}" if r.gflops_per_s else "-", _code(r.source),
                _cell(fmt.module_where(r) or "-"), _code(fmt.library_where(r)),
            ]) + " |")
        if len(report.operators) > TOP_OPERATORS:
            out.append(f"\n_{len(report.operators) - TOP_OPERATORS} more rows in report.json._")
        ran_in = fmt.places(report)
        if ran_in:  # processes the target forked, or threads other than the main one
            out += ["", f"Where they ran (each row's `processes` in report.json): {ran_in}."]
        mem = summary.memory
        if mem.allocations:
            out.append("")
            out.append(f"Memory: {mem.allocations} allocations, {fmt.size(mem.allocated_bytes)} allocated "
                       "during the operator pass.")
        out.append("")
    if layer and layer.notes:
        out += [f"- {n}" for n in layer.notes] + [""]

    for section in (_sampled, _modules, _python, _threads, _distributed, _microbench, _efficiency, _doctor, _what_if,
                    _counters, _memory):
        out += _guard(section, report)

    out += ["## Layers", "", "| layer | status | time | note |", "|---|---|---:|---|"]
    for name, s in report.layers.items():
        out.append(f"| {name} | {s.status} | {fmt.duration(s.elapsed_s)} | {_cell(s.reason or '')} |")
    out.append("")

    out += ["## Machine", ""]
    out.append(f"- CPU: {m.cpu_model}; {m.logical_cpus} logical CPUs, {m.usable_cpus} usable"
               + (f" (cgroup limit {m.cgroup_cpu_limit:g})" if m.cgroup_cpu_limit else ""))
    if m.torch_version:
        threads = f"{m.intra_op_threads} intra-op / {m.inter_op_threads} inter-op threads"
        if m.default_intra_op_threads is not None and m.default_intra_op_threads != m.intra_op_threads:
            threads += f" (default {m.default_intra_op_threads}; the target changed it)"
        out.append(f"- torch {m.torch_version}, {m.parallel_backend or 'unknown'} backend, {threads}")
    env = ", ".join(f"`{k}={v}`" for k, v in m.threading_env.items()) or "none set"
    out.append(f"- threading environment: {env}")
    out.append(f"- Python {m.python_version} on {m.platform}")
    out.append("")
    if report.artifacts:
        out += ["## Files", ""] + [f"- `{v}`" for v in report.artifacts.values()] + [""]
    out.append(f"_diagnose {report.run.diagnose_version}, schema {report.schema_version}, {report.run.started_at}_")
    return "\n".join(out) + "\n"


def _guard(section, report: Report) -> list[str]:
    """A section drawn from partial or unexpected data says so instead of losing the report."""
    try:
        return section(report)
    except Exception as exc:  # noqa: BLE001 - one section must not take the report down
        return [f"_could not write the {section.__name__.strip('_')} section: {type(exc).__name__}: {exc}_", ""]


def _sampled(report: Report) -> list[str]:
    """report.sampled (diagnose attach): report/sampled.py words it."""
    if report.sampled is None:
        return []
    return (["## Sampled from outside", "", f"_{_cell(report.sampled.sampler)}: Python and native stacks of the running "
             "process; shares are of samples._", ""]
            + [f"- {_cell(line)}" if not line.startswith("  ") else f"  - {_cell(line.strip())}"
               for line in sampled_views.lines(report.sampled) + sampled_views.beside_lines(report)] + [""])


def _modules(report: Report) -> list[str]:
    lines = fmt.module_class_lines(report, 10)
    if not lines:
        return []
    out = ["## Modules", "", "Operator time (forward and backward) by nn.Module class, all instances summed:", ""]
    out += [f"- {_cell(l)}" for l in lines]
    hot = fmt.hot_modules(report, 8)
    if hot:
        out += ["", "Hottest modules by their own operators (instances at one place in the model summed):", "",
                "| module | class | instances | its own operators |", "|---|---|---:|---:|"]
        out += [f"| {_code(path)} | {_cell(cls)} | {n} | {pct:.1f}% |" for path, cls, n, pct in hot]
    out += [f"- {_cell(n)}" for n in report.modules.notes]
    if report.artifacts.get("stacks"):
        out += ["", "Folded stacks in `stacks.folded` (speedscope, flamegraph.pl); `flamegraph.png` draws them."]
    return out + [""]


def _python(report: Report) -> list[str]:
    layer = report.layers.get("python")
    split = fmt.python_split_line(report)
    if layer is None:
        return []
    out = ["## Python", ""]
    if layer.status != "ok":
        return out + [f"_{layer.status}: {layer.reason}_", ""]
    if split:
        out += [split, ""]
    if "callgraph_png" in report.artifacts:
        out += [f"![call graph]({report.artifacts['callgraph_png']})", ""]
    for name, why in layer.missing.items():
        out += [f"_{name} was not made: {_cell(why)}_", ""]
    rows = report.python_hotspots[:TOP_FUNCTIONS]
    if rows:
        out += ["| function | where | kind | calls | self | cumulative | operators it calls |",
                "|---|---|---|---:|---:|---:|---|"]
        for r in rows:
            ops = ", ".join(f"{o.op} ({o.location}, {o.calls}x)" for o in r.operators[:3])
            out.append("| " + " | ".join([
                _code(r.function), _code(r.location), r.kind, str(r.calls), fmt.duration(r.self_s),
                f"{r.cumulative_pct:.1f}%", _cell(ops or "-"),
            ]) + " |")
        if len(report.python_hotspots) > TOP_FUNCTIONS:
            out.append(f"\n_{len(report.python_hotspots) - TOP_FUNCTIONS} more functions in report.json._")
        out.append("")
    out += [f"- {n}" for n in layer.notes if not n.startswith(tuple(layer.missing))]
    return out + [""]


def _threads(report: Report) -> list[str]:
    layer = report.layers.get("threads")
    if layer is None:
        return []
    out = ["## Threads", ""]
    if layer.status != "ok":
        out += [f"_{layer.status}: {layer.reason}_", ""]
    out += [f"- {line}" for line in fmt.threads_lines(report)] + [f"- {n}" for n in layer.notes]
    out.append("")
    if "threads_png" in report.artifacts:
        out += [f"![threads over time]({report.artifacts['threads_png']})", ""]
    for name, why in layer.missing.items():
        out += [f"_{name} was not made: {_cell(why)}_", ""]
    rows, recommendation = fmt.sweep_rows(report)
    if rows:
        out += ["### Thread sweep", "", "| " + " | ".join(rows[0]) + " |", "|" + "---:|" * len(rows[0])]
        out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[1:]]
        out.append("")
    if recommendation:
        out += [f"**{_cell(recommendation)}**", ""]
    env = [e for e in (report.threads.environment if report.threads else []) if e.level == "warning"]
    if env:
        out += ["Threading environment:", ""] + [f"- `{e.name}={e.value}`: {_cell(e.implication)}" for e in env]
        out.append("")
    return out


def _rows_table(rows: list[tuple[str, ...]], numeric: set[int]) -> list[str]:
    return (["| " + " | ".join(rows[0]) + " |", "|" + "".join("---:|" if i in numeric else "---|"
                                                             for i in range(len(rows[0])))]
            + ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[1:]] + [""])


def _doctor(report: Report) -> list[str]:
    layer = report.layers.get("doctor")
    if layer is None or report.doctor is None:
        return []
    out = ["## Environment doctor", ""]
    if layer.status != "ok":
        out += [f"_{layer.status}: {layer.reason}_", ""]
    if report.doctor.launch:
        out += ["Measured on your steps, launch with:", "", "```", report.doctor.launch, "```", ""]
    rows = fmt.doctor_trial_rows(report)
    if rows:
        out += [f"Trials: your steps with and without each change, in interleaved rounds ({fmt.trial_rule()}):",
                ""] + _rows_table(rows, {2, 3, 4, 5, 6, 7})
    out += _rows_table(fmt.doctor_check_rows(report), set())
    out += [f"- {n}" for n in layer.notes] + ([""] if layer.notes else [])
    return out


def _what_if(report: Report) -> list[str]:
    layer = report.layers.get("what_if")
    if layer is None or report.what_if is None:
        return []
    out = ["## What-if", ""]
    if layer.status != "ok":
        out += [f"_{layer.status}: {layer.reason}_", ""]
    rows = fmt.what_if_rows(report)
    if rows:
        out += [(f"Your steps with each change applied from outside, in interleaved rounds against the unchanged "
                 f"run; {fmt.trial_rule()}, and its outputs match:"), ""] + _rows_table(rows, {1, 2, 3, 4, 5, 6})
    out += [f"- {line}" for line in fmt.what_if_lines(report) + layer.notes]
    return out + [""]


def _distributed(report: Report) -> list[str]:
    """A torchrun job (diagnose --nproc-per-node): one row per rank, the straggler, collectives."""
    if not report.distributed:
        return []

    rows = distributed.rank_rows(report)
    out = [f"## {distributed.heading(report)}", "",
           "The operator table above merges every rank (calls and times summed over ranks); per rank:", "",
           "| " + " | ".join(rows[0]) + " |", "|---|---|---|" + "---:|" * 5 + "---|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[1:]]
    out.append("")
    out += [f"- {_cell(line.strip())}" for line in distributed.summary_lines(report)]
    return out + [""]


def _microbench(report: Report) -> list[str]:
    layer = report.layers.get("microbench")
    if layer is None:
        return []
    out = ["## Micro-benchmarks", ""]
    if layer.status != "ok":
        return out + [f"_{layer.status}: {_cell(layer.reason)}_", ""]
    rows = fmt.microbench_rows(report, TOP_MICROBENCH)
    out.append("Each operator alone at its recorded shapes and dtypes (torch.utils.benchmark), "
               "its thread counts timed interleaved beside a perfectly parallel reference (ref: its speedup, what the CPUs gave "
               "parallel work meanwhile); noise is the IQR over the median.")
    out.append("")
    out += ["| " + " | ".join(rows[0]) + " |", "|---|---|" + "---:|" * 6 + "---|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[1:]]
    if len(report.microbenchmarks) > TOP_MICROBENCH:
        out.append(f"\n_{len(report.microbenchmarks) - TOP_MICROBENCH} more rows in report.json._")
    out.append("")
    if "reproducers" in report.artifacts:
        out += [f"Standalone reproducers (plain torch, for VTune or a colleague): `{report.artifacts['reproducers']}/`", ""]
    out += [f"- {_cell(n)}" for n in layer.notes[:6]]
    return out + [""]


def _efficiency(report: Report) -> list[str]:
    layer = report.layers.get("efficiency")
    if layer is None:
        return []
    out = ["## Efficiency", ""]
    if layer.status != "ok":
        return out + [f"_{layer.status}: {_cell(layer.reason)}_", ""]
    for line in (fmt.roofs_line(report), report.efficiency.timing if report.efficiency else None):
        if line:
            out.append(f"- {_cell(line)}")
    out.append("")
    if "roofline_png" in report.artifacts:
        out += [f"![roofline]({report.artifacts['roofline_png']})", ""]
    rows = fmt.efficiency_rows(report, TOP_OPERATORS)
    if rows:
        out += ["| " + " | ".join(rows[0]) + " |", "|---|---|" + "---:|" * 4 + "---|---:|---|"]
        out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[1:]]
        out.append("")
    out += [f"- {_cell(n)}" for n in layer.notes[:4]]
    return out + [""]


def _memory(report: Report) -> list[str]:
    """report.memory (report/memory.py words it), and memory.png when it was drawn."""
    if report.memory is None:
        return []
    out = ["## Memory", ""] + [f"- {_cell(line)}" for line in memory_views.lines(report.memory)]
    if report.artifacts.get("memory_png"):
        out += ["", f"![memory over the window's steps]({report.artifacts['memory_png']})"]
    return out + [""]


def _counters(report: Report) -> list[str]:
    layer = report.layers.get("counters")
    if layer is None:
        return []
    out = ["## Counters", ""]
    if layer.status != "ok":
        return out + [f"_{layer.status}: {_cell(layer.reason)}_", ""]
    return out + [f"- {line}" for line in fmt.counters_lines(report)] + [""]


def _evidence(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        text = str(value)
        return text if len(text) <= 120 else text[:119] + "…"
    return str(value)
