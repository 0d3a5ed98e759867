"""`diagnose compare` output: terminal text and Markdown from compare.compare()'s Comparison.

Short by design: the verdict line first, then wall time with each side's
noise, the findings that changed, and the operators whose time moved most.
"""

from __future__ import annotations

from diagnose.render import fmt
from diagnose.report.comparison import Comparison, OperatorDelta, WallSide

TOP_OPERATORS = 15


def _side(side: WallSide | None) -> str:
    if side is None:
        return "n/a"
    unit = "/iter" if side.unit == "iteration" else ""
    noise = f"IQR ±{side.noise_pct:.1f}%, n={side.n}" if side.noise_pct is not None else "one run: noise unknown"
    if side.runs_s:
        runs = f"{len(side.runs_s)} runs spread {side.drift_pct:.1f}%"
        noise = f"{noise}; {runs}" if side.noise_pct is not None else runs
    return f"{fmt.duration(side.seconds)}{unit} ({noise})"


def _ratio(r: OperatorDelta) -> str:
    if r.status in ("new", "gone"):
        return r.status
    if r.status == "faster":
        return f"{_x(1 / r.ratio)} faster" if r.ratio else "faster"
    if r.status == "slower":
        return f"{_x(r.ratio)} slower"
    return f"{r.ratio:.2f}x (noise)"


def _x(factor: float) -> str:
    return f"{factor:.0f}x" if factor >= 100 else f"{factor:.3g}x"


def _us(value: float | None) -> str:
    return "-" if value is None else fmt.us(value)


def operator_rows(cmp: Comparison, limit: int = TOP_OPERATORS) -> list[tuple[str, ...]]:
    ops = cmp.operators
    unit = "iter" if ops.unit == "iteration" else "run"
    rows = [("operator", "input shapes", f"before /{unit}", f"after /{unit}", "after/before", "source")]
    for r in ops.rows[:limit]:
        rows.append((r.name, fmt.shapes(r.input_shapes, 40), _us(r.before_us), _us(r.after_us), _ratio(r),
                     r.source or "-"))
    return rows


def finding_rows(cmp: Comparison) -> list[tuple[str, ...]]:
    rows = [("change", "kind", "severity", "operator", "location", "finding")]
    for f in cmp.findings:
        sev = f.after_severity or f.before_severity or "-"
        if f.status in ("worse", "better"):
            sev = f"{f.before_severity or '-'} -> {f.after_severity or '-'}"
        title = f.title if len(f.title) <= 90 else f.title[:89] + "…"
        rows.append((f.status, f.kind, sev, f.op or "-", f.after_location or f.before_location or "-", title))
    return rows


def terminal(cmp: Comparison) -> str:
    wall = cmp.wall
    out = [f"diagnose compare  {cmp.before.target} ({cmp.before.mode})  ->  "
           f"{cmp.after.target} ({cmp.after.mode})", "", cmp.verdict, "",
           "Wall time (uninstrumented)",
           f"  before: {_side(wall.before)}", f"  after:  {_side(wall.after)}",
           "  noise floor: " + (f"±{wall.noise_floor_pct:.1f}% " if wall.noise_floor_pct is not None else "")
           + f"({wall.noise_basis})"]
    if wall.interleaved:
        out.append("  each round's after/before: " + " ".join(f"{x:.3f}" for x in wall.interleaved.round_ratios))
    if cmp.findings:
        out += ["", "Findings"] + fmt.text_table(finding_rows(cmp), right=set())
    ops = cmp.operators
    if ops.rows:
        out += ["", f"Operators: self CPU time per {ops.unit} in the operator pass, biggest change first "
                    f"(noise floor ±{ops.noise_floor_pct:.1f}%)"]
        out += fmt.text_table(operator_rows(cmp), right={2, 3, 4})
        if len(ops.rows) > TOP_OPERATORS:
            out.append(f"  ... {len(ops.rows) - TOP_OPERATORS} more rows (--format json)")
    for note in cmp.notes:
        out.append(f"note: {note}")
    return "\n".join(out) + "\n"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _md_table(rows: list[tuple[str, ...]], code: set[int], right: set[int]) -> list[str]:
    head = "| " + " | ".join(rows[0]) + " |"
    sep = "|" + "|".join("---:" if i in right else "---" for i in range(len(rows[0]))) + "|"
    body = ["| " + " | ".join(f"`{_cell(c)}`" if i in code and c not in ("-", "") else _cell(c)
                              for i, c in enumerate(r)) + " |" for r in rows[1:]]
    return [head, sep, *body]


def markdown(cmp: Comparison) -> str:
    wall = cmp.wall
    out = [f"# diagnose compare: `{_cell(cmp.before.target)}` -> `{_cell(cmp.after.target)}`", "",
           f"**{_cell(cmp.verdict)}**", "",
           "| wall time (uninstrumented) | before | after | noise floor |", "|---|---|---|---|",
           f"| {_cell(cmp.before.mode)} / {_cell(cmp.after.mode)} mode | {_cell(_side(wall.before))} | "
           f"{_cell(_side(wall.after))} | "
           + (f"±{wall.noise_floor_pct:.1f}%" if wall.noise_floor_pct is not None else "-") + " |", "",
           f"_{_cell(wall.noise_basis)}_", ""]
    if wall.interleaved:
        out += ["Each round's after/before: " + ", ".join(f"{x:.3f}" for x in wall.interleaved.round_ratios), ""]
    if cmp.findings:
        out += ["## Findings", ""] + _md_table(finding_rows(cmp), code={3, 4}, right=set()) + [""]
    ops = cmp.operators
    if ops.rows:
        out += ["## Operators", "",
                f"Self CPU time per {ops.unit} in the operator pass, biggest change first; a change is called "
                f"only outside ±{ops.noise_floor_pct:.1f}% ({_cell(ops.noise_basis)}).", ""]
        out += _md_table(operator_rows(cmp), code={0, 1, 5}, right={2, 3, 4})
        if len(ops.rows) > TOP_OPERATORS:
            out.append(f"\n_{len(ops.rows) - TOP_OPERATORS} more rows in `--format json`._")
        out.append("")
    if cmp.notes:
        out += [f"- {_cell(n)}" for n in cmp.notes] + [""]
    return "\n".join(out)
