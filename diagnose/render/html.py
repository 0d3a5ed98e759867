"""report.html: the whole report as one self-contained page that opens from disk.

Verdict first (ranked findings, each linking to the section holding its
evidence), then operators (a table sorted by clicking a header and filtered
by name, shape or source), Python hotspots with the call graph, threads with
the timeline and the sweep, efficiency with the roofline, micro-benchmarks,
counters, machine and run. Each measurement has its overhead or noise beside
it. No network: the PNGs written beside report.json are embedded as data
URIs, the style and the script are inline, and the script reads only the
page's own attributes (no data is embedded as JavaScript).

Every string that comes from the user's code, torch or the machine goes
through `_e` (html.escape with quotes), so it is inert in text and in
attribute values alike. The renderer reads the Report and the image files;
it runs nothing. A section that cannot be drawn from partial data says so
and the rest of the page is still written.
"""

from __future__ import annotations

import base64
import html
import json
import os
from typing import Any, Callable, Iterable

from diagnose.render import distributed, fmt, plots
from diagnose.report import memory as memory_views
from diagnose.report import sampled as sampled_views
from diagnose.report import io as report_io
from diagnose.report.model import Finding, OperatorSummary, Peaks, Report, Threads

MAX_OPERATOR_ROWS = 500
MAX_FUNCTION_ROWS = 15
SEVERITY_ORDER = ("high", "medium", "low")
# the section holding a finding's evidence, by the layer that raised it (else by kind)
SECTION_OF_LAYER = {"operators": "operators", "python": "python", "threads": "threads",
                    "microbench": "microbench", "efficiency": "efficiency", "counters": "counters"}
SECTION_OF_KIND = {"hot_operator": "operators", "copy_overhead": "operators", "memory_churn": "operators",
                   "python_overhead": "python", "oversubscription": "threads", "undersubscription": "threads",
                   "external_contention": "threads", "sequential_operator": "microbench",
                   "low_efficiency": "efficiency", "memory_growth": "memory"}
SECTIONS = (("verdict", "Verdict"), ("operators", "Operators"), ("modules", "Modules"), ("python", "Python"),
            ("threads", "Threads"),
            ("efficiency", "Efficiency"), ("microbench", "Micro-benchmarks"), ("doctor", "Environment"),
            ("what_if", "What-if"), ("counters", "Counters"),
            ("machine", "Machine and run"))
LAYER_SECTIONS = ("operators", "python", "threads", "efficiency", "microbench", "doctor", "counters")
IMAGES = {"callgraph_png": "callgraph.png", "threads_png": "threads.png", "roofline_png": "roofline.png",
          "flamegraph_png": "flamegraph.png", "memory_png": "memory.png"}
MODULE_TREE_OPEN_DEPTH = 2  # the tree opens this many levels; deeper ones on a click
MODULE_TREE_MIN_PCT = 0.5  # modules under this share of operator time are left out of the tree


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _code(value: Any) -> str:
    return f"<code>{_e(value)}</code>" if value not in (None, "") else "-"


def _num(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _e(value)
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def _value(value: Any, limit: int = 160) -> str:
    """An evidence value, short and escaped."""
    if isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, (list, dict)):
        text = json.dumps(value, default=str, separators=(", ", ": "))
    else:
        text = str(value)
    return _e(text if len(text) <= limit else text[: limit - 1] + "…")


def _status(report: Report, layer: str) -> str:
    s = report.layers.get(layer)
    if s is None:
        return '<p class="status skipped">not run (not among this run\'s layers)</p>'
    if s.status == "ok":
        took = f" in {fmt.duration(s.elapsed_s)}" if s.elapsed_s is not None else ""
        return f'<p class="status ok">layer ok{_e(took)}</p>'
    return f'<p class="status {_e(s.status)}"><b>{_e(s.status)}</b>: {_e(s.reason)}</p>'


def _notes(report: Report, layer: str, limit: int = 8) -> str:
    s = report.layers.get(layer)
    if s is None:
        return ""
    items = [f"<li>{_e(n)}</li>" for n in s.notes[:limit]]
    items += [f"<li>{_e(name)} was not made: {_e(why)}</li>" for name, why in s.missing.items()]
    return f'<ul class="notes">{"".join(items)}</ul>' if items else ""


def _noise(*lines: str | None) -> str:
    lines = [line for line in lines if line]
    if not lines:
        return ""
    return '<div class="noise"><span class="label">overhead / noise</span>' + \
        "".join(f"<div>{_e(line)}</div>" for line in lines) + "</div>"


def _image(report: Report, image_dir: str | None, key: str, alt: str) -> str:
    name = report.artifacts.get(key) or IMAGES[key]
    path = os.path.join(image_dir, name) if image_dir else None
    if not path or not os.path.isfile(path):
        return ""
    with open(path, "rb") as fh:
        data = base64.b64encode(fh.read()).decode("ascii")
    return (f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(alt)} ({_e(name)})</figcaption></figure>")


def _table(rows: list[tuple[str, ...]], numeric: Iterable[int] = (), escape: bool = True,
           cls: str = "") -> str:
    """A plain table from string rows (header first), e.g. the shared fmt.*_rows helpers."""
    if not rows:
        return ""
    numeric = set(numeric)
    cell = _e if escape else str
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{cell(h)}</th>' for i, h in enumerate(rows[0]))
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{cell(c)}</td>'
                                     for i, c in enumerate(r)) + "</tr>" for r in rows[1:])
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in pairs)
    return f'<table class="kv"><tbody>{rows}</tbody></table>' if rows else ""


# ---------------------------------------------------------------------------------------- verdict

def _anchor(report: Report, kind: str, layer: str, op: str | None, location: str | None) -> str:
    section = SECTION_OF_LAYER.get(layer) or SECTION_OF_KIND.get(kind, "verdict")
    if section == "operators" and op:
        for i, row in enumerate(report.operators[:MAX_OPERATOR_ROWS]):
            if row.name == op and (location is None or row.source == location):
                return f"op-{i}"
    return section


def _badge(severity: str) -> str:
    return f'<span class="badge sev-{_e(severity)}">{_e(severity)}</span>'


def _stake(f: Finding) -> str:
    pct = f.stake.pct if f.stake else None
    if not isinstance(pct, (int, float)):
        return ""
    width = max(1.0, min(100.0, float(pct)))
    return (f'<div class="stake" title="{_e(f.stake.basis)}">'
            f'<div class="bar"><div style="width:{width:.1f}%"></div></div>'
            f"<span>≈ {pct:.3g}% of wall time at stake</span></div>")


def _evidence_table(f: Finding) -> str:
    """The finding's evidence (fmt.evidence_items) but its time at stake, shown as a bar, then where that came from."""
    pairs = [(k, _value(v)) for k, v in fmt.evidence_items(f) if k != "time_at_stake_pct"]
    if f.stake and f.stake.basis:
        pairs.append(("time at stake from", _e(f.stake.basis)))
    return _kv(pairs)


def _borderline(f: Finding) -> str:
    """Beside the badge when the finding's number straddles a severity line (report/borderline.py)."""
    if f.borderline is None:
        return ""
    return (f'<span class="borderline" title="{_e(fmt.borderline_text(f.borderline))}">borderline '
            f'{_e(f.borderline.would_be)}</span>')


def _finding(report: Report, i: int, f: Finding) -> str:
    target = _anchor(report, f.kind, f.layer, f.op, f.location)
    where = f'<div class="where">at {_code(f.location)}</div>' if f.location else ""
    op = f" · {_code(f.op)}" if f.op else ""
    also = ""
    if f.also:  # the other findings at the same line (findings/stake.py)
        items = []
        for a in f.also:
            link = _anchor(report, a.kind, a.layer, a.op, f.location)
            items.append(f'<li>{_badge(a.severity)} <b>{_e(a.kind)}</b> '
                         f'<span class="layer">({_e(a.layer)})</span>: {_e(a.title)} '
                         f'<a href="#{_e(link)}">evidence</a>'
                         f'<details><summary>its evidence and suggestion</summary>'
                         f'<p class="try">{_e(a.suggestion)}</p>{_evidence_table(a)}'
                         f"</details></li>")
        also = (f'<div class="also"><div class="label">{_e(fmt.also_heading(f))}</div>'
                f'<ul>{"".join(items)}</ul></div>')
    return (f'<article class="finding sev-{_e(f.severity)}" id="finding-{i}">'
            f'<header><span class="rank">{i}</span>{_badge(f.severity)}{_borderline(f)}'
            f'<span class="kind">{_e(f.kind)}</span>'
            f'<span class="layer">{_e(f.layer)}{op}</span></header>'
            f'<h3>{_e(f.title)}</h3>{where}{_stake(f)}'
            f'<p class="try"><b>Try:</b> {_e(f.suggestion)}</p>'
            f'<details><summary>evidence</summary>{_evidence_table(f)}</details>'
            f'{also}<a class="goto" href="#{_e(target)}">see the evidence in '
            f'{_e("operators" if target.startswith("op-") else target)} →</a>'
            f"</article>")


def _verdict(report: Report) -> str:
    fs = report.findings
    counts = {s: sum(1 for f in fs if f.severity == s) for s in SEVERITY_ORDER}
    if not fs:
        head = '<p class="summary good">No findings: nothing crossed a threshold.</p>'
    else:
        parts = ", ".join(f'<span class="count sev-{s}">{n} {s}</span>' for s, n in counts.items() if n)
        head = (f'<p class="summary">{len(fs)} finding{"s" if len(fs) != 1 else ""}: {parts}. '
                f"Ranked by the share of wall time a fix could win; the findings at one line are one "
                f"finding.</p>")
    budget = fmt.budget_line(report)
    verdict = fmt.verdict_line(report)
    lead = ""
    if budget:  # where a step's time goes, before the findings (diagnose/budget.py)
        memory = ' <a href="#memory">memory →</a>' if report.memory else ""  # the allocator slice's bytes
        lead += f'<p class="budget"><b>Step budget:</b> {_e(budget)}{memory}</p>' + _budget_bar(report)
    if verdict:  # healthy or not, with its numbers (findings/verdict.py)
        healthy = "healthy" if report.verdict.healthy else "unhealthy"
        lead += f'<p class="verdict {healthy}" id="verdict-line"><b>Verdict:</b> {_e(verdict)}</p>'
    head = lead + (_module_bars(report) if budget else "") + head
    ranks = ""
    observations = report.distributed.observations if report.distributed else []
    if observations:  # a torchrun job's straggler and collectives (distributed/view.py), beside the findings
        ranks = ('<div class="also"><div class="label">across the ranks</div><ul>' + "".join(
            f'<li>{_badge(o.severity)} <b>{_e(o.kind)}</b>: {_e(o.title)} '
            f'<a href="#ranks">ranks</a></li>' for o in observations) + "</ul></div>")
    return head + ranks + "".join(_finding(report, i, f) for i, f in enumerate(fs, 1)) + _not_confirmed(report)


def _budget_bar(report: Report) -> str:
    """The step budget as one stacked bar (each slice's width its share of the step, its basis on hover; when the
    slices over-count, unexplained is negative and the bar is their sum); budget.png draws the same."""
    b = report.step_budget
    scale = 1 / max(1.0, sum(s.share for s in b.slices if s.share > 0))
    segments = "".join(
        f'<div class="seg" data-slice="{_e(s.name)}" data-share="{s.share:.4f}" style="width:{100 * s.share * scale:.2f}%;'
        f'background:{plots.SLICE_COLOURS.get(s.name, "#8c959f")}" title="{_e(s.name)} {100 * s.share:.1f}%: '
        f'{_e(s.basis)}">{_e(s.name) if s.share >= 0.08 else ""}</div>'
        for s in b.slices if s.share > 0)
    return f'<div class="budgetbar" id="budget-bar" aria-label="step budget">{segments}</div>'


def _module_bars(report: Report) -> str:
    """A bar per module (fmt.budget_modules: each module's own operators as a share of the step) when the model
    has several, as below budget.png's stacked bar."""
    modules = fmt.budget_modules(report)
    if not modules:
        return ""
    top = max(share for _, share in modules) or 1.0
    rows = "".join(f'<div class="modbar"><span class="name" title="{_e(label)}">{_e(label)}</span>'
                   f'<span class="bar"><span style="width:{100 * share / top:.1f}%"></span></span>'
                   f'<span class="num">{100 * share:.1f}%</span></div>' for label, share in modules)
    return (f'<details class="modbars" id="budget-modules" open><summary>the {_e(report.step_budget.unit)} by '
            f"module (each module's own operators)</summary>{rows}</details>")


def _not_confirmed(report: Report) -> str:
    """Results the tool doubts itself (report.not_confirmed): below the findings, each with why and the command
    that re-measures it."""
    if not report.not_confirmed:
        return ""
    items = []
    for n in report.not_confirmed:
        f = n.finding
        where = f" at {_code(f.location)}" if f.location else ""
        again = (f'<div>re-measure: {_code(n.reproduce)}{_e(fmt.reproduce_where(n.reproduce))}</div>'
                 if n.reproduce else "")
        items.append(f'<li><b>{_e(f.kind)}</b>{where}: {_e(f.title)}'
                     f'<div class="muted">doubted: {_e("; ".join(f.doubts))}</div>{again}</li>')
    return (f'<div class="unconfirmed" id="not-confirmed"><h3>Not confirmed</h3><p>Results the tool doubts '
            f"itself: not findings, never ranked among them. Re-measure before acting.</p>"
            f'<ul>{"".join(items)}</ul></div>')


# ------------------------------------------------------------------------------------------ ranks

def _ranks(report: Report) -> str:
    """A torchrun job's ranks: time per rank, the straggler, collectives vs compute (render/distributed.py)."""
    return (f"<p>{_e(distributed.heading(report))}</p>"
            + _table(distributed.rank_rows(report), numeric=(0, 1, 3, 4, 5, 6, 7))
            + "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in distributed.summary_lines(report)) + "</ul>")


# -------------------------------------------------------------------------------------- operators

def _operators(report: Report) -> str:
    out = []
    ops = report.operators
    s = report.operator_summary or OperatorSummary()
    ratio = report.run.overhead_ratio
    out.append(_noise(f"instrumentation overhead {ratio:.2f}x: the operator pass ran that much slower than the "
                      f"uninstrumented one; times below come from it" if ratio else None,
                      fmt.spread(report.run.instrumented_iterations) and
                      f"operator pass per iteration: {fmt.spread(report.run.instrumented_iterations)}"))
    if not ops:
        return "".join(out) + _notes(report, "operators")
    out.append(f"<p>One row per (operator, input shapes), by self CPU time in the instrumented pass; total "
               f"{_e(fmt.us(s.total_self_cpu_us or 0))}, {100 * (s.attributed_share or 0):.0f}% "
               f"of it attributed to a line of your code. Click a header to sort.</p>")
    shown = ops[:MAX_OPERATOR_ROWS]
    out.append(f'<div class="filter"><input id="op-filter" type="search" placeholder="filter by operator, '
               f'shape or source" aria-label="filter operators"> <span id="op-count">{len(shown)} of '
               f"{len(shown)} rows</span></div>")
    cols = [("operator", False), ("input shapes", False), ("dtypes", False), ("calls", True), ("self", True),
            ("share", True), ("total", True), ("per call: min / mean / max", True), ("self memory", True),
            ("GFLOP/s", True), ("source", False), ("module", False), ("library line", False)]
    head = "".join(f'<th data-type="{"num" if n else "text"}"{" class=num" if n else ""} tabindex="0">{_e(c)}</th>'
                   for c, n in cols)
    body = []
    for i, r in enumerate(shown):
        dtypes = ",".join(d for d in r.dtypes if d and not d.startswith("Scalar")) or "-"
        shape = fmt.shapes(r.shapes_shown(), 80)
        where, library = fmt.module_where(r) or "", fmt.library_where(r) or ""
        search = f"{r.name} {shape} {r.source or ''} {where} {library}".lower()
        per_call = r.self_cpu_us / r.calls if r.calls else 0.0
        cells = [
            (r.name, f"<code>{_e(r.name)}</code>"), (shape, f"<code>{_e(shape)}</code>"),
            (dtypes, _e(dtypes)),
            (r.calls, str(r.calls)), (r.self_cpu_us, _e(fmt.us(r.self_cpu_us))),
            (r.self_pct, f'{r.self_pct:.1f}%<div class="mini"><div style="width:{min(100.0, r.self_pct):.1f}%"></div></div>'),
            (r.total_cpu_us, _e(fmt.us(r.total_cpu_us))), (per_call, _e(fmt.per_call(r))),
            (r.cpu_memory_bytes, _e(fmt.size(r.cpu_memory_bytes)) if r.cpu_memory_bytes else "-"),
            (r.gflops_per_s or 0, f"{r.gflops_per_s:.1f}" if r.gflops_per_s else "-"),
            (r.source or "", _code(r.source)), (where, _e(where) if where else "-"), (library, _code(library or None)),
        ]
        tds = "".join(f'<td data-v="{_e(v)}"{" class=num" if cols[j][1] else " class=loc" if j >= 10 else ""}>{h}</td>'
                      for j, (v, h) in enumerate(cells))
        body.append(f'<tr id="op-{i}" data-search="{_e(search)}">{tds}</tr>')
    out.append(f'<div class="scroll"><table id="operators-table" class="sortable"><thead><tr>{head}</tr></thead>'
               f'<tbody>{"".join(body)}</tbody></table></div>')
    if len(ops) > MAX_OPERATOR_ROWS:
        out.append(f"<p class=more>{len(ops) - MAX_OPERATOR_ROWS} more rows in report.json.</p>")
    mem = s.memory
    if mem.allocations:
        out.append(f"<p>Memory: {_e(mem.allocations)} allocations, {_e(fmt.size(mem.allocated_bytes or 0))} "
                   f"allocated during the operator pass"
                   + (f", at most {_e(fmt.size(mem.peak_live_bytes))} alive at once" if mem.peak_live_bytes else "")
                   + ".</p>")
    out.append(_notes(report, "operators"))
    return "".join(out)


# ---------------------------------------------------------------------------------------- modules

def _modules(report: Report, image_dir: str | None) -> str:
    m = report.modules
    if m is None:
        why = ("no nn.Module ran in the recorded window: operator time by module needs a model made of modules"
               if report.operators else "no operators were recorded")
        return f"<p>{_e(why)}.</p>"
    out = ["<p>Operator self CPU time (forward, and backward mapped to the module whose forward produced it) by "
           "nn.Module. By class, all instances summed:</p>",
           "<ul>" + "".join(f"<li>{_e(l)}</li>" for l in fmt.module_class_lines(report, 12)) + "</ul>",
           "<h3>Module tree</h3><p>Each module: its share with its submodules, and of its own operators; click to "
           f"open. Modules under {MODULE_TREE_MIN_PCT:g}% are left out.</p>", _module_tree(report)]
    out += [f"<p class=note>{_e(n)}</p>" for n in m.notes]
    out.append(_image(report, image_dir, "flamegraph_png", "operator time by your line, module and operator"))
    if report.artifacts.get("stacks"):
        out.append("<p><code>stacks.folded</code> holds the same stacks for speedscope (speedscope.app, drag the "
                   "file in) or flamegraph.pl.</p>")
    return "".join(out)


def _module_tree(report: Report) -> str:
    rows = [r for r in report.modules.rows if r.total_pct >= MODULE_TREE_MIN_PCT]
    total = report.modules.total_cpu_us or 1.0
    html, depth = [], -1
    for i, r in enumerate(rows):
        while depth >= r.depth:
            html.append("</details>" if depth >= 0 else "")
            depth -= 1
        has_children = i + 1 < len(rows) and rows[i + 1].depth > r.depth
        label = (f'<code>{_e(r.path.rsplit(".", 1)[-1] if r.path else "(outermost)")}</code> {_e(r.module_class)} '
                 f'<span class=num>{r.total_pct:.1f}%</span> <span class=muted>own {100 * r.self_cpu_us / total:.1f}%, '
                 f'{r.calls} calls, {_e(r.path)}</span>')
        if has_children:
            html.append(f'<details class="mod"{" open" if r.depth < MODULE_TREE_OPEN_DEPTH else ""}><summary>{label}'
                        f"</summary>")
            depth = r.depth
        else:
            html.append(f'<div class="mod leaf">{label}</div>')
    while depth >= 0:
        html.append("</details>")
        depth -= 1
    return f'<div class="tree">{"".join(html)}</div>'


# ----------------------------------------------------------------------------------------- python

def _python(report: Report, image_dir: str | None) -> str:
    out = []
    split = fmt.python_split_line(report)
    if split:
        summary = report.python_summary  # a split line means there is one
        ratio = summary.overhead_ratio
        out.append(f"<p>{_e(split.split('; ')[0])}.</p>")
        out.append(_noise(f"cProfile pass {fmt.duration(summary.wall_s)} vs "
                          f"{fmt.duration(report.run.wall_s)} uninstrumented ({ratio:.2f}x); cProfile inflates "
                          "Python most, so Python shares are upper bounds" if ratio else
                          "from the cProfile pass, which inflates Python most"))
    out.append(_image(report, image_dir, "callgraph_png", "call graph (cProfile, gprof2dot): red is hot"))
    # the user's functions and anything with >= 1% of the pass; the rest is in report.json
    rows = [r for r in report.python_hotspots if r.kind == "user" or r.cumulative_pct >= 1.0][:MAX_FUNCTION_ROWS]
    if rows:
        table = [("function", "where", "kind", "calls", "self", "cumulative", "self + tiny calls", "operators it calls")]
        for i, r in enumerate(rows):
            ops = ", ".join(f"{o.op} ({o.location}, {o.calls}x)" for o in r.operators[:3])
            where = r.location.split("site-packages/")[-1] if r.location else r.location
            table.append((f"<code id=\"py-{i}\">{_e(r.function)}</code>",
                          f'<span class="loc" title="{_e(r.location)}">{_code(where)}</span>', _e(r.kind),
                          str(r.calls), _e(fmt.duration(r.self_s)), f"{r.cumulative_pct:.1f}%",
                          _e(fmt.duration(r.loop_overhead_s)) if r.loop_overhead_s is not None else "-",
                          _e(ops or "-")))
        out.append(_table(table, numeric=(3, 4, 5, 6), escape=False))
        if len(report.python_hotspots) > len(rows):
            out.append(f"<p class=more>{len(report.python_hotspots) - len(rows)} more functions (under 1% of the "
                       "pass) in report.json.</p>")
    out.append(_notes(report, "python"))
    return "".join(out)


# ---------------------------------------------------------------------------------------- threads

def _threads(report: Report, image_dir: str | None) -> str:
    out = []
    t = report.threads or Threads()
    lines = fmt.threads_lines(report)
    if lines:
        health = [line for line in lines if line.startswith("sampler cost")]
        out.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines[:2]) + "</ul>")
        out.append(_noise(*health, f"method: {t.method}" if t.method else None))
    elif t.reason:
        out.append(f"<p>{_e(t.reason)}</p>")
    procs = t.processes
    if procs:
        rows = [("pid", "role", "name", "threads by pool", "active", "runnable", "CPUs used", "run-queue wait")]
        for p in procs[:20]:
            pools = ", ".join(f"{k} {v}" for k, v in p.threads.items())
            rows.append((str(p.pid), str(p.role), str(p.name or ""), pools or "-",
                         str(sum(p.active_threads.values())), f"{p.mean_runnable or 0:.2f}",
                         f"{p.cpu_used or 0:.2f}", f"{100 * (p.wait_share or 0):.0f}%"))
        out.append("<h3>Processes</h3>" + _table(rows, numeric=(0, 4, 5, 6, 7)))
    out.append(_image(report, image_dir, "threads_png", "runnable threads and CPUs used over time"))
    rows, recommendation = fmt.sweep_rows(report)
    if rows:
        out.append("<h3>Thread sweep</h3><p>The uninstrumented workload at each setting, runs interleaved; "
                   "spread is the half-range of its runs.</p>" + _table(rows, numeric=(0, 1, 2, 3, 4, 5)))
    if recommendation:
        out.append(f'<p class="recommend">{_e(recommendation)}</p>')
    env = [x for x in t.environment if x.level == "warning"]
    if env:
        out.append("<h3>Threading environment</h3><ul>" + "".join(
            f"<li><code>{_e(x.name)}={_e(x.value)}</code>: {_e(x.implication)}</li>"
            for x in env) + "</ul>")
    out.append(_notes(report, "threads"))
    return "".join(out)


# ------------------------------------------------------------------------------------- efficiency

def _peaks(peaks: Peaks) -> str:
    measured = [("fp32 GEMM", p, p.gflops_per_s, "GFLOP/s") for p in peaks.gemm_fp32]
    measured += [("memory (STREAM)", p, p.gb_per_s, "GB/s") for p in peaks.memory]
    rows = [(label, str(p.threads), _num(rate), unit, f"IQR {p.iqr_pct}%" if p.iqr_pct is not None else "-",
             "yes" if p.contended else "no") for label, p, rate, unit in measured]
    if not rows:
        return ""
    when = f" (measured {peaks.measured_at})" if peaks.measured_at else ""
    out = f"<h3>Machine peaks{_e(when)}</h3>" + _table(
        [("probe", "threads", "peak", "unit", "noise", "contended"), *rows], numeric=(1, 2, 4))
    spread = peaks.spread_history or peaks.process_spread
    if spread is not None:
        if peaks.spread_history is not None:
            out += (f"<p>Process to process: the same step timed in this machine's last {spread.processes} "
                    f"diagnoses (one process each, the probe's own first) over {spread.span_h:g} h at "
                    f"{spread.threads} threads; the largest spread is the floor of the interval a finding's share "
                    "or call time is judged on.</p>")
        else:
            out += (f"<p>Process to process: the same step in {spread.processes} forked processes at "
                    f"{spread.threads} threads{' (contended: not used)' if spread.contended else ''}; the largest "
                    "spread is the floor of the interval a finding's share or call time is judged on.</p>")
        out += _table([("number", "of", "least", "most", "spread (95% of one process's value)"),
                       *[(g.name, g.what, _num(g.low), _num(g.high), f"{g.spread_pct:g}%") for g in spread.groups]],
                      numeric=(2, 3, 4))
    return out


def _efficiency(report: Report, image_dir: str | None) -> str:
    out = []
    e = report.efficiency
    if fmt.roofs_line(report):
        out.append(f"<p>{_e(fmt.roofs_line(report))}</p>")
    out.append(_noise(e.timing if e else None))
    out.append(_image(report, image_dir, "roofline_png", "roofline: each hot operator against this machine's roofs"))
    rows = fmt.efficiency_rows(report, 50)
    if rows:
        out.append(_table(rows, numeric=(2, 3, 4, 5, 7)))
    missing = [o for o in (e.operators if e else []) if o.efficiency_pct is None]
    if missing:
        items = "".join(f"<li><code>{_e(o.name)}</code> {_e(fmt.shapes(o.input_shapes or [], 60))}: "
                        f"{_e(o.reason or 'no efficiency')}</li>" for o in missing[:30])
        out.append(f"<details><summary>{len(missing)} operator(s) without an efficiency</summary><ul>{items}</ul></details>")
    if e:
        out.append(_peaks(e.peaks))
    out.append(_notes(report, "efficiency"))
    return "".join(out)


# ------------------------------------------------------------------------- micro-benchmarks, counters

def _microbench(report: Report) -> str:
    out = []
    rows = fmt.microbench_rows(report, len(report.microbenchmarks))
    if rows:
        out.append("<p>Each operator alone at its recorded shapes and dtypes (torch.utils.benchmark), its thread "
                   "counts timed interleaved beside a perfectly parallel reference (ref: its speedup, what the "
                   "CPUs gave parallel work meanwhile). Noise is the IQR over the median; ! marks a noisy "
                   "measurement, contended one taken while other processes held the CPUs.</p>")
        out.append(_table(rows, numeric=(2, 3, 4, 5, 6, 7)))
    if "reproducers" in report.artifacts:
        out.append(f"<p>Standalone reproducers (plain torch): {_code(report.artifacts['reproducers'] + '/')}</p>")
    out.append(_notes(report, "microbench"))
    return "".join(out)


def _counters(report: Report) -> str:
    out = []
    lines = fmt.counters_lines(report)
    if lines:
        out.append(f"<p>{_e(lines[0])}</p>")
    # every field as report.json writes it (perf's events and VTune's summary nested as JSON)
    c = report_io.to_dict(report.counters) if report.counters else {}
    pairs = [(k, _value(v)) for k, v in c.items() if v not in (None, [], {})]
    out.append(_kv(pairs))
    out.append(_notes(report, "counters"))
    return "".join(out)


# -------------------------------------------------------------------------------- machine and run

def _machine(report: Report) -> str:
    m, run, t = report.machine, report.run, report.target
    threads = None
    if m.intra_op_threads is not None:
        threads = f"{m.intra_op_threads} intra-op / {m.inter_op_threads} inter-op"
        if m.default_intra_op_threads is not None and m.default_intra_op_threads != m.intra_op_threads:
            threads += f" (default {m.default_intra_op_threads}; the target changed it)"
    machine = _kv([
        ("CPU", _e(m.cpu_model)),
        ("CPUs", _e(f"{m.logical_cpus} logical, {m.usable_cpus} usable"
                    + (f" (cgroup limit {m.cgroup_cpu_limit:g})" if m.cgroup_cpu_limit else ""))),
        ("torch", _e(f"{m.torch_version or '?'}, {m.parallel_backend or 'unknown'} backend")),
        ("threads", _e(threads or "-")),
        ("threading environment", _e(", ".join(f"{k}={v}" for k, v in m.threading_env.items()) or "none set")),
        ("Python", _e(f"{m.python_version} on {m.platform}")),
    ])
    timing = "".join(f"<div>{_e(line)}</div>" for line in fmt.timing_lines(report))
    runinfo = _kv([
        ("target", _code(f"{t.script}:{t.function}" if t.function else t.script)),
        ("mode", _e(t.mode + (f", warmup {t.warmup}, iters {t.iters}" if t.function else ""))),
        ("arguments", _code(" ".join(t.argv)) if t.argv else "-"),
        ("outcome", _e(fmt.outcome_line(report))),
        ("wall time and noise", timing or "-"),
        ("started", _e(run.started_at)), ("diagnose", _e(f"{run.diagnose_version}, schema {report.schema_version}")),
    ])
    layers = [("layer", "status", "time", "reason")] + [
        (name, s.status, fmt.duration(s.elapsed_s), s.reason or "") for name, s in report.layers.items()]
    files = ", ".join(_code(v) for v in report.artifacts.values())
    return (f'<div class="cols"><div><h3>Run</h3>{runinfo}</div><div><h3>Machine</h3>{machine}</div></div>'
            f'<h3 id="layers">Layers</h3>{_table(layers, numeric=(2,), cls="layers")}'
            + (f"<h3>Files beside report.json</h3><p>{files}</p>" if files else ""))


# ------------------------------------------------------------------------------------------- doctor

def _doctor(report: Report) -> str:
    doctor = report.doctor
    if doctor is None:
        return "<p>No environment readings in this report.</p>"
    out = []
    if doctor.launch:
        out.append(f'<p class="recommend">Measured on your steps, launch with: {_code(doctor.launch)}</p>')
    rows = fmt.doctor_trial_rows(report)
    if rows:
        out.append(f"<h3>Trials</h3><p>Your steps with and without each change, in interleaved rounds; "
                   f"{_e(fmt.trial_rule())}.</p>" + _table(rows, numeric=(2, 3, 4, 5, 6, 7)))
    checks = fmt.doctor_check_rows(report)
    if checks:
        out.append("<h3>Checks</h3>" + _table(checks))
    for c in doctor.checks:
        if c.status == "warn" and c.facts:
            out.append(f"<details><summary>{_e(c.name)}: the readings</summary><ul>" + "".join(
                f"<li>{_e(f.name)}: <b>{_e(f.value)}</b> {_e(f.unit)} <small>({_e(f.source)})</small></li>"
                for f in c.facts) + "</ul></details>")
    out.append(_notes(report, "doctor"))
    return "".join(out)


def _what_if(report: Report) -> str:
    if report.what_if is None:
        return ("<p>Not asked for: <code>diagnose --what-if auto script.py</code> measures the code changes that "
                "apply (inference_mode, channels_last, bf16, torch.compile, flush_denormal) on your steps.</p>")
    out = [_status(report, "what_if")]
    rows = fmt.what_if_rows(report)
    if rows:
        out.append(f"<p>Your steps with each change applied from outside, in interleaved rounds against the "
                   f"unchanged run; {_e(fmt.trial_rule())}, and its outputs match.</p>"
                   + _table(rows, numeric=(1, 2, 3, 4, 5, 6)))
    lines = fmt.what_if_lines(report)
    if lines:
        out.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in lines) + "</ul>")
    out.append(_notes(report, "what_if"))
    return "".join(out)


# ------------------------------------------------------------------------------------------- page

def _memory(report: Report, image_dir: str | None) -> str:
    """report.memory: its lines (report/memory.py), the kept sites as a table, memory.png."""
    mem = report.memory
    about = ("<p>The RSS of the attached process tree, read at a fixed interval while it was sampled.</p>"
             if mem.rss is not None and mem.rss.interval_s else
             "<p>Memory read at every step boundary of the window: the process's RSS in the uninstrumented pass, "
             "torch's live bytes (allocations made in the window) in the operator pass.</p>")
    out = [about,
           "<ul>" + "".join(f"<li>{_e(line)}</li>" for line in memory_views.lines(mem)) + "</ul>"]
    groups = mem.retained.groups if mem.retained else []
    if groups:
        rows = [("kept per step", "alive at the end", "operator", "module", "made at", "held by", "put there at")]
        for g in groups[:10]:
            held = ("buffer re-made bigger" if g.grown_buffer else g.held_by) + (f" ({g.holder})" if g.holder else "")
            rows.append((fmt.size(g.bytes_per_step) if g.bytes_per_step else "-", fmt.size(g.bytes), g.op or "-",
                         g.module if g.module is not None else "-", g.source or "-", held, g.holder_line or "-"))
        out += ["<h3>Alive at the window's end, by site</h3>", _table(rows, numeric=(0, 1))]
        if mem.retained.scope:
            out.append(f"<p class=note>{_e(mem.retained.scope)}</p>")
    out.append(_image(report, image_dir, "memory_png", "memory over the window's steps"))
    return "".join(out)


def _sampled(report: Report) -> str:
    """report.sampled (diagnose attach): operators, libraries and Python lines by sampling (report/sampled.py)."""
    s = report.sampled
    out = [f"<p>{_e(s.sampler)}: the Python and native stacks of the running process, {s.samples} busy thread "
           f"samples at {s.rate_hz:g} Hz; every share is of samples.</p>"]
    pairs = sampled_views.beside(report)
    if pairs:
        rows = [("operator", "operator pass", "sampled", "")]
        rows += [(p.op, f"{p.traced_pct:.1f}%", f"{p.sampled_pct:.1f}%",
                  "distorted by instrumentation" if p.distorted else "") for p in pairs]
        out += ["<h3>Operator shares: the operator pass against sampling the uninstrumented pass</h3>",
                _table(rows, numeric=(1, 2))]
    if s.operators:
        rows = [("operator", "share of operator samples", "share of busy samples", "your line", "modules",
                 "library line", "native frame")]
        for o in s.operators[:15]:
            rows.append((o.name, f"{o.share_pct:.1f}%", f"{o.time_pct:.1f}%", o.source or "-", o.modules or "-",
                         f"{o.function} at {o.library_line}" if o.library_line else "-", o.native or "-"))
        out += ["<h3>Operators by sampling</h3>", _table(rows, numeric=(1, 2))]
    if s.libraries:
        rows = [("library", "share of busy samples", "from your line")]
        rows += [(lib.library, f"{lib.share_pct:.1f}%", lib.source or "-") for lib in s.libraries[:10]]
        out += ["<h3>Time outside torch</h3>", _table(rows, numeric=(1,))]
    if s.functions:
        rows = [("function", "line", "kind", "self", "total", "in operators")]
        rows += [(f.function, f.location, f.kind, f"{f.self_pct:.1f}%", f"{f.total_pct:.1f}%",
                  f"{f.in_operators_pct:.0f}%") for f in s.functions[:15]]
        out += ["<h3>Python hotspots</h3>", _table(rows, numeric=(3, 4, 5))]
    rest = [line for line in sampled_views.lines(s) if line.startswith(("steps:", "processes:", "note:"))]
    if rest:
        out.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in rest) + "</ul>")
    return "".join(out)


def _guard(title: str, build: Callable[[], str]) -> str:
    """A section drawn from partial or unexpected data says so instead of losing the page."""
    try:
        return build()
    except Exception as exc:  # noqa: BLE001 - one section must not take the report down
        return f'<p class="status failed">could not draw the {_e(title)} section: {_e(type(exc).__name__)}: {_e(exc)}</p>'


def render(report: Report, image_dir: str | None = None) -> str:
    """The page for `report`; images are read from `image_dir` (the report's directory) when given."""
    t = report.target
    label = f"{t.script}:{t.function}" if t.function else t.script
    failed = bool(report.run.error or report.run.exit_code or report.run.interrupted or report.run.timed_out)
    builders: dict[str, Callable[[], str]] = {
        "verdict": lambda: _verdict(report),
        "operators": lambda: _operators(report),
        "modules": lambda: _modules(report, image_dir),
        "python": lambda: _python(report, image_dir),
        "threads": lambda: _threads(report, image_dir),
        "efficiency": lambda: _efficiency(report, image_dir),
        "microbench": lambda: _microbench(report),
        "doctor": lambda: _doctor(report),
        "what_if": lambda: _what_if(report),
        "counters": lambda: _counters(report),
        "machine": lambda: _machine(report),
        "memory": lambda: _memory(report, image_dir),
        "sampled": lambda: _sampled(report),
    }
    shown = list(SECTIONS)
    if report.memory is not None:  # a window of steps was measured: memory before the machine
        shown.insert(len(shown) - 1, ("memory", "Memory"))
    if report.sampled is not None:  # diagnose attach: the sampled stacks right after the verdict
        shown.insert(1, ("sampled", "Sampled from outside"))
    if report.distributed:  # a torchrun job: its ranks right after the verdict
        builders["ranks"] = lambda: _ranks(report)
        shown.insert(1, ("ranks", "Ranks"))
    nav = "".join(f'<a href="#{sid}">{_e(title)}{_nav_status(report, sid)}</a>' for sid, title in shown)
    sections = "".join(f'<section id="{sid}"><h2>{_e(title)}</h2>'
                       f'{_status(report, sid) if sid in LAYER_SECTIONS else ""}{_guard(title, builders[sid])}</section>'
                       for sid, title in shown)
    trace = ""
    if report.run.traceback:
        trace = f'<pre class="trace">{_e(chr(10).join([*report.run.traceback, report.run.error or ""]))}</pre>'
    timing = "".join(f"<div>{_e(line)}</div>" for line in fmt.timing_lines(report) + fmt.steps_lines(report))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>diagnose: {_e(label)}</title>
<style>{CSS}</style></head>
<body>
<header class="top"><div class="wrap">
<div class="brand">diagnose</div><h1><code>{_e(label)}</code></h1>
<p class="outcome{' bad' if failed else ''}">{_e(fmt.outcome_line(report))} · {_e(t.mode)} mode · {_e(report.run.started_at)}</p>
<div class="timing">{timing}</div>{trace}
</div></header>
<nav><div class="wrap">{nav}</div></nav>
<main class="wrap">{sections}</main>
<footer class="wrap">diagnose {_e(report.run.diagnose_version)}, report schema {_e(report.schema_version)}.
This page is self-contained: it loads nothing from the network.</footer>
<script>{SCRIPT}</script>
</body></html>
"""


def _nav_status(report: Report, section: str) -> str:
    if section == "verdict":  # every finding, coloured by the worst
        worst = next((s for s in SEVERITY_ORDER if any(f.severity == s for f in report.findings)), None)
        return f' <span class="pill sev-{worst}">{len(report.findings)}</span>' if worst else ""
    s = report.layers.get(section)
    if s is not None and s.status != "ok":
        return f' <span class="pill muted">{_e(s.status)}</span>'
    return ""


CSS = """
.tree details.mod,.tree div.mod{margin-left:18px}.tree>details.mod{margin-left:0}
.tree summary{cursor:pointer}.tree .leaf{padding-left:14px}.muted{color:var(--muted);font-size:12px}
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--bg:#f6f8fa;--accent:#0969da;
--high:#cf222e;--high-bg:#ffebe9;--medium:#bc4c00;--medium-bg:#fff1e5;--low:#57606a;--low-bg:#eef1f4;--ok:#1a7f37}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;color:var(--fg);background:#fff}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.wrap{max-width:1180px;margin:0 auto;padding:0 24px}
header.top{background:#24292f;color:#fff;padding:18px 0 14px}
header.top .brand{font-size:12px;letter-spacing:.12em;text-transform:uppercase;color:#9da7b3}
header.top h1{margin:2px 0 6px;font-size:22px;font-weight:600}
header.top h1 code{font-size:20px;background:none;color:#fff}
.outcome{margin:0 0 6px;color:#c9d1d9}.outcome.bad{color:#ff8182;font-weight:600}
.timing{color:#adbac7;font-size:13px}
pre.trace{background:#161b22;color:#ffa198;padding:10px;border-radius:6px;overflow:auto}
nav{position:sticky;top:0;z-index:5;background:#fff;border-bottom:1px solid var(--line)}
nav .wrap{display:flex;gap:4px;flex-wrap:wrap;padding-top:6px;padding-bottom:6px}
nav a{color:var(--fg);text-decoration:none;padding:4px 10px;border-radius:6px;font-weight:500}
nav a:hover{background:var(--bg)}
section{padding:10px 0 18px;border-bottom:1px solid var(--line);scroll-margin-top:48px}
h2{font-size:20px;margin:18px 0 8px}h3{font-size:15px;margin:16px 0 6px}
a{color:var(--accent)}
.summary{font-size:15px}.summary.good{color:var(--ok);font-weight:600}
.headline{font-size:15px;margin-top:-4px}
.count{font-weight:600}.count.sev-high{color:var(--high)}.count.sev-medium{color:var(--medium)}.count.sev-low{color:var(--low)}
.badge{display:inline-block;font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;
padding:1px 8px;border-radius:10px;color:#fff;vertical-align:1px}
.borderline{font-size:11px;color:var(--medium);margin-left:6px;border-bottom:1px dotted}
.badge.sev-high{background:var(--high)}.badge.sev-medium{background:var(--medium)}.badge.sev-low{background:var(--low)}
.pill{font-size:11px;padding:0 6px;border-radius:8px;background:var(--low-bg);color:var(--low)}
.pill.sev-high{background:var(--high);color:#fff}.pill.sev-medium{background:var(--medium);color:#fff}
article.finding{border:1px solid var(--line);border-left:5px solid var(--low);border-radius:8px;padding:12px 16px;margin:12px 0;background:#fff}
article.finding.sev-high{border-left-color:var(--high);background:linear-gradient(90deg,var(--high-bg),#fff 35%)}
article.finding.sev-medium{border-left-color:var(--medium);background:linear-gradient(90deg,var(--medium-bg),#fff 35%)}
article.finding header{display:flex;gap:10px;align-items:center;color:var(--muted);font-size:13px}
article.finding .rank{font-weight:700;color:var(--fg)}
article.finding .kind{font-weight:600;color:var(--fg)}
article.finding h3{margin:6px 0 4px;font-size:15.5px}
.where{color:var(--muted)}
.try{margin:6px 0}
.stake{display:flex;align-items:center;gap:8px;font-size:12.5px;color:var(--muted);margin:4px 0}
.stake .bar{width:160px;height:8px;background:var(--bg);border:1px solid var(--line);border-radius:4px;overflow:hidden}
.stake .bar div{height:100%;background:var(--accent)}
.budgetbar{display:flex;height:26px;border:1px solid var(--line);border-radius:6px;overflow:hidden;margin:6px 0 8px}
.budgetbar .seg{height:100%;color:#fff;font-size:12px;line-height:26px;text-align:center;overflow:hidden;white-space:nowrap}
.modbars{margin:4px 0 10px}.modbar{display:flex;align-items:center;gap:8px;font-size:12.5px;margin:2px 0}
.modbar .name{width:380px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.modbar .bar{flex:0 0 240px;height:9px;background:var(--bg);border:1px solid var(--line);border-radius:4px;overflow:hidden}
.modbar .bar span{display:block;height:100%;background:#4c78a8}
.verdict{font-size:15px}.verdict.healthy{color:var(--ok);font-weight:600}
.unconfirmed{margin-top:18px;padding:8px 14px;border:1px dashed var(--line);border-radius:8px;color:#424a53}
.unconfirmed h3{margin-top:4px}.unconfirmed li{margin:6px 0}
.also{margin-top:8px;padding:6px 10px;background:var(--bg);border-radius:6px}
.also ul{margin:4px 0;padding-left:18px}.also li{margin:4px 0}
.label{font-size:11px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);font-weight:600}
.layer{color:var(--muted)}
span.loc{white-space:nowrap}
.goto{display:inline-block;margin-top:6px;font-size:13px}
details summary{cursor:pointer;color:var(--accent);font-size:13px}
.status{margin:4px 0 8px;font-size:13px}.status.ok{color:var(--ok)}
.status.skipped{color:var(--medium)}.status.failed{color:var(--high)}
.noise{border-left:3px solid #8c959f;background:var(--bg);padding:6px 10px;margin:8px 0;font-size:13px;color:#424a53}
.noise .label{display:block}
.recommend{font-weight:600;color:var(--ok)}
.scroll{overflow-x:auto}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px;width:100%}
th,td{padding:4px 8px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top}
thead th{background:var(--bg);border-bottom:1px solid var(--line);font-weight:600;white-space:nowrap}
tbody tr:nth-child(even){background:#fafbfc}
tbody tr:target{background:#fff8c5}
td.num,th.num{text-align:right;white-space:nowrap}
td.loc{white-space:nowrap}
table.kv{width:auto}table.kv th{background:none;border:none;color:var(--muted);font-weight:500;padding-right:16px;white-space:nowrap}
table.kv td{border:none}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th:hover{color:var(--accent)}
table.sortable th[aria-sort=ascending]::after{content:" ▲";font-size:10px}
table.sortable th[aria-sort=descending]::after{content:" ▼";font-size:10px}
.mini{height:3px;background:#eaeef2;margin-top:2px}.mini div{height:100%;background:var(--accent)}
.filter{margin:6px 0}.filter input{width:340px;max-width:100%;padding:5px 8px;border:1px solid var(--line);border-radius:6px;font-size:13px}
#op-count{color:var(--muted);font-size:12.5px;margin-left:8px}
figure{margin:10px 0;text-align:center}figure img{max-width:min(100%,1000px);border:1px solid var(--line);border-radius:6px}
figcaption{font-size:12px;color:var(--muted)}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:24px}
@media (max-width:800px){.cols{grid-template-columns:1fr}}
ul.notes{color:var(--muted);font-size:13px}
.more{color:var(--muted);font-size:13px}
footer{color:var(--muted);font-size:12px;padding:16px 24px 40px}
"""

# Sorting and filtering read only the page's own attributes: data-v on a cell, data-search on a row.
SCRIPT = """
(function(){
  document.querySelectorAll('table.sortable').forEach(function(table){
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function(th, col){
      function sort(){
        var desc = th.getAttribute('aria-sort') !== 'descending';
        if (th.getAttribute('aria-sort') === null && th.dataset.type === 'text') desc = false;
        Array.prototype.forEach.call(heads, function(h){ h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', desc ? 'descending' : 'ascending');
        var num = th.dataset.type === 'num';
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function(a, b){
          var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
          var c = num ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : x.localeCompare(y);
          return desc ? -c : c;
        });
        rows.forEach(function(r){ body.appendChild(r); });
      }
      th.addEventListener('click', sort);
      th.addEventListener('keydown', function(ev){ if (ev.key === 'Enter') sort(); });
    });
  });
  var filter = document.getElementById('op-filter');
  if (filter) {
    var table = document.getElementById('operators-table');
    var count = document.getElementById('op-count');
    filter.addEventListener('input', function(){
      var q = filter.value.trim().toLowerCase(), shown = 0, rows = table.tBodies[0].rows;
      Array.prototype.forEach.call(rows, function(r){
        var hit = !q || r.dataset.search.indexOf(q) !== -1;
        r.hidden = !hit; if (hit) shown++;
      });
      count.textContent = shown + ' of ' + rows.length + ' rows';
    });
  }
})();
"""
