"""The distributed view's rows and lines, shared by the terminal and Markdown renderers."""

from __future__ import annotations

from diagnose.render import fmt
from diagnose.report.model import Report


def heading(report: Report) -> str:
    d = report.distributed
    nodes = d.get("nodes") or []
    return (f"Ranks (world size {d.get('world_size')}, {len(nodes) or 1} node{'s' if len(nodes) > 1 else ''}"
            + (f", {d['backend']}" if d.get("backend") else "") + ")")


def rank_rows(report: Report) -> list[tuple[str, ...]]:
    rows = [("rank", "node", "status", "wall", "compute", "collectives", "coll. share", "threads", "top operator")]
    for e in report.distributed.get("ranks") or []:
        top = (e.get("operators") or [None])[0]
        rows.append((
            str(e["rank"]), str(e.get("node_rank", "-")), e.get("status", "-"), fmt.duration(e.get("wall_s")),
            fmt.us(e["compute_us"]) if e.get("compute_us") is not None else "-",
            fmt.us(e["collective_us"]) if e.get("collective_us") is not None else "-",
            f"{100 * e['collective_share']:.0f}%" if e.get("collective_share") is not None else "-",
            str(e.get("intra_op_threads") if e.get("intra_op_threads") is not None else "-"),
            f"{top['name']} {fmt.shapes(top['input_shapes'], 28)} {fmt.us(top['self_cpu_us'])}" if top else "-",
        ))
    return rows


def summary_lines(report: Report) -> list[str]:
    d = report.distributed
    out = []
    if d.get("launcher"):
        out.append(f"launched as: {d['launcher']}")
    s = d.get("straggler") or {}
    if s.get("measure") == "compute_us":
        ops = ", ".join(f"{o['name']} +{fmt.us(o['diff_us'])}" + (f" ({o['source']})" if o.get("source") else "")
                        for o in (s.get("operators") or [])[:3])
        out.append(f"slowest rank {s['rank']}: {fmt.us(s['slow'])} of operator time vs {fmt.us(s['fast'])} on rank "
                   f"{s['fastest_rank']} ({s['slower_pct']:+.0f}%)" + (f"; the difference: {ops}" if ops else ""))
    c = d.get("collectives") or {}
    if c.get("share") is not None:
        names = ", ".join(f"{x['name']} {x['calls']}x {fmt.us(x['us'])}" for x in (c.get("by_name") or [])[:3])
        out.append(f"collectives {100 * c['share']:.0f}% vs compute {100 * (1 - c['share']):.0f}% of the ranks' time"
                   + (f" ({names})" if names else "") + "; collective time includes waiting for slower ranks")
    for f in d.get("failed_ranks") or []:
        out.append(f"rank {f['rank']} {f['status']}" + (" first" if f.get("first") else "")
                   + (f" in the {f['pass']} pass" if f.get("pass") else "")
                   + (f": {f['error']}" if f.get("error") else ""))
    for o in d.get("observations") or []:
        out.append(f"[{o['severity']}] {o['kind']}: {o['title']}")
        out.append(f"    try: {o['suggestion']}")
    out += list(d.get("notes") or [])
    return out
