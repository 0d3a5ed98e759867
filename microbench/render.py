"""Text tables in the style of torch.utils.benchmark.Compare. Renderers only: no timing here."""

from __future__ import annotations

from typing import Callable, Sequence

from microbench.cases import torch_dtype_name
from microbench.results import FUZZ_RULE, Results, Row


def table(title: str, header: Sequence[str], groups: Sequence[tuple[str | None, Sequence[Sequence[str]]]],
          footer: Sequence[str] = (), paint: Callable[[int, int, str], str] | None = None) -> str:
    """Compare-style: '[--- title ---]', columns joined by '  |  ', a '<group>: ----' line per group.

    `paint(row, column, text)`, if given, decorates each value cell once it is padded to its column's width
    (terminal colours, which must not count in the width): row counts the data rows from 0 over all groups,
    column the value columns from 0."""
    all_rows = [list(header)] + [list(r) for _, rows in groups for r in rows]
    ncols = max(len(r) for r in all_rows)
    for r in all_rows:
        r.extend([""] * (ncols - len(r)))
    widths = [max(len(r[i]) for r in all_rows) for i in range(ncols)]
    head = "  |  ".join(h.center(w) for h, w in zip(all_rows[0], widths))
    overall = len(head)
    lines = [f"[{(' ' + title + ' ').center(max(overall - 2, len(title) + 4), '-')}]", head]
    k = 1
    for name, rows in groups:
        if name is not None:
            lines.append(f"{name}: ".ljust(overall, "-"))
        for _ in rows:
            r, i = all_rows[k], k - 1  # i: the data row, from 0
            k += 1
            cells = [r[0].ljust(widths[0])] + [paint(i, j, c.center(w)) if paint else c.center(w)
                                               for j, (c, w) in enumerate(zip(r[1:], widths[1:]))]
            lines.append("  |  ".join(cells).rstrip())
    if footer:
        lines.append("")
        lines.extend(footer)
    return "\n".join(lines)


def fmt_us(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:.0f}"
    if x >= 100:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def case_title(row: Row) -> str:
    shapes = ", ".join(str(s) for s, d in zip(row.input_shapes, row.dtypes or [""] * len(row.input_shapes))
                       if d not in ("Scalar", "ScalarList", ""))
    dts = sorted({torch_dtype_name(d) or d for d in row.dtypes if d not in ("Scalar", "ScalarList", "")})
    return f"{row.op} {shapes} {'/'.join(dts)}".strip()


def results_table(res: Results) -> str:
    groups: list[tuple[str | None, list[list[str]]]] = []
    current_key = None
    callgrind = any(r.instructions_per_call is not None for r in res.rows)
    for r in res.rows:
        key = (r.op, str(r.input_shapes), str(r.dtypes), r.layout, r.source)
        if key != current_key:
            where = []
            if r.source:
                where.append(r.source)
            if r.self_pct is not None:
                where.append(f"{r.self_pct:.1f}% of self CPU")
            groups.append((case_title(r) + (f"  ({', '.join(where)})" if where else ""), []))
            current_key = key
        cells = [f"  {r.threads} thread{'s' if r.threads != 1 else ''}", fmt_us(r.median_us),
                 f"{r.noise_pct:.1f}" + (" !" if r.noisy else ""), str(r.runs),
                 fmt(r.speedup_vs_1_thread), fmt(r.parallel_efficiency),
                 fmt(r.gflops_per_s, ".1f"), fmt(r.gbytes_per_s, ".2f"),
                 fmt(r.others_cpus, ".1f") + (" !" if r.contended else "")]
        if callgrind:
            cells.append("-" if r.instructions_per_call is None else f"{r.instructions_per_call:,}")
        groups[-1][1].append(cells)
    header = ["", "median (us)", "IQR %", "runs", "speedup", "efficiency", "GFLOP/s", "GB/s", "others"]
    if callgrind:
        header.append("instr/call")
    footer = [
        "Times are in microseconds (us): median of the measured blocks. IQR % = IQR / median;",
        "! marks >= 10% (noisy: the machine was busy or the op is unstable). speedup = median at",
        "1 thread / median here; efficiency = speedup / threads. GB/s counts each input and output",
        "once (a lower bound on memory traffic). GFLOP/s only where torch's FlopCounterMode knows the op.",
        "others = CPUs other processes used meanwhile (/proc/stat); ! = they took CPUs these threads",
        "needed, so the time describes the busy machine, not the operator.",
    ]
    if callgrind:
        footer.append("instr/call: callgrind instruction count per call at 1 thread (baseline loop subtracted).")
    title = f"microbench: {len({g for g, _ in groups})} case(s), {len(res.rows)} measurement(s)"
    parts = [table(title, header, groups, footer)] if res.rows else ["microbench: nothing was measured."]
    layouts = sorted({r.layout for r in res.rows if r.layout})
    if layouts:
        parts.append("Layout: " + "; ".join(layouts) + ".")
    assumed = [(case_title(r), r.assumed_args) for r in res.rows if r.assumed_args and r.threads == min(
        x.threads for x in res.rows if x.op == r.op and x.input_shapes == r.input_shapes)]
    if assumed:
        parts.append("Argument values not recorded (schema defaults or conventional guesses; "
                     "`run --arg NAME=VALUE` sets them):")
        parts.extend(f"  {t}: " + ", ".join(f"{k}={v}" for k, v in a.items()) for t, a in assumed)
    if res.skipped:
        parts.append(f"Skipped ({len(res.skipped)}):")
        for s in res.skipped:
            pct = f" ({s['self_pct']:.1f}%)" if isinstance(s.get("self_pct"), (int, float)) else ""
            thr = f" at {s['threads']} thread(s)" if s.get("threads") else ""
            parts.append(f"  {s.get('op')} {s.get('input_shapes')}{pct}{thr}: {s.get('reason')}")
    for n in res.notes:
        parts.append(f"Note: {n}")
    return "\n".join(parts)


def fuzz_text(res: Results) -> str:
    """The --fuzz verdicts, one line per thread count, and the rule they follow."""
    fuzz = (res.settings or {}).get("fuzz")
    if not fuzz:
        return ""
    lines = [f"Fuzz (--fuzz {fuzz['n']} --seed {fuzz['seed']}, each size drawn log-uniform in "
             f"[d/{fuzz['spread']:g}, d*{fuzz['spread']:g}] by torch.utils.benchmark.Fuzzer): is it the shape?"]
    for v in res.fuzz_verdicts():
        lines.append(f"  {v['threads']} thread{'s' if v['threads'] != 1 else ''}: {v['verdict']}: {v['why']}"
                     + (f"; us per {v['unit']}: given {v['given_us_per_unit']:g}, fuzzed median "
                        f"{v['fuzzed_median_us_per_unit']:g}" if v["ratio"] is not None else ""))
    lines.append(f"  Rule: {FUZZ_RULE}.")
    return "\n".join(lines)


def callgrind_tops(res: Results, n: int) -> list[dict]:
    out = []
    for r in res.rows:
        c = res.callgrind_of(r)
        if c:
            per = max(c["number"], 1)
            out.append({"case": case_title(r), "instructions_per_call": r.instructions_per_call,
                        "functions": [{"per_call": round(n_ / per, 1), "function": f}
                                      for n_, f in c["functions"][:n]]})
    return out


def callgrind_tops_text(res: Results, n: int) -> str:
    tops = callgrind_tops(res, n)
    if not tops:
        return "No callgrind function counts in this file (run with --callgrind)."
    lines = []
    for t in tops:
        lines.append(f"callgrind: {t['case']}: {t['instructions_per_call']:,} instructions per call; "
                     f"top {len(t['functions'])} functions (exclusive, per call):")
        lines.extend(f"  {f['per_call']:>12,.1f}  {_short(f['function'])}" for f in t["functions"])
    return "\n".join(lines)


def _short(fn: str, width: int = 110) -> str:
    """Long C++ names cut in the middle, as FunctionCounts' repr does."""
    if len(fn) <= width:
        return fn
    left = (width - 5) // 2
    return fn[:left] + " ... " + fn[-(width - left - 5):]
