"""A/B comparison: two saved results files, or two settings measured here in ABBA rounds.

Contract
- `compare_files(a, b)`: rows are matched on (op, input shapes, dtypes,
  layout, threads). For each pair: ratio B/A of medians, the noise floor from
  both sides' IQR/median (`stats.two_sided_floor`), and a verdict: `faster` /
  `slower` when the ratio is outside 1 ± floor, else `same`. Rows present on
  one side only are listed as such. Machines that differ (CPU model, torch
  version) are noted: the comparison then measures the machines too; rows
  measured under external contention (`contended`) are marked.
- `compare_abba(...)`: A and B are two settings of one operator (thread
  counts and/or dtypes). Both are measured here, interleaved A B B A for
  `rounds` rounds of ~`block_ms` blocks, so drift on a shared machine hits
  both alike. The verdict comes from `stats.abba_summary`: median per-round
  ratio, a sign-test (default) or seeded bootstrap interval, and the noise
  floor; "real" needs both the interval excluding 1 and the effect above the
  floor.
Both return a JSON-ready dict (`format: microbench-compare`) and have a
renderer in the style of torch.utils.benchmark.Compare.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from microbench import callgrind as cg
from microbench import stats
from microbench.api import build_spec_case
from microbench.cases import namespace, torch_dtype_name
from microbench.errors import UsageError
from microbench.machine import cpu_snapshot, describe, others_cpus
from microbench.measure import Budget, abba_rounds, block_measure, calibrate, make_timer
from microbench.render import _short, case_title, fmt_us, table
from microbench.results import COMPARE_FORMAT, FORMAT_VERSION, Results, load

# --------------------------------------------------------------------------
# Two saved files
# --------------------------------------------------------------------------

def callgrind_delta(ra, rb, ca: dict | None, cb: dict | None, top: int = 15) -> dict | None:
    """Instruction counts of two rows (1 thread, --callgrind): the total delta per call and, when both
    kept their function counts (format 2), the functions that account for it (B - A, denoised)."""
    if ra.instructions_per_call is None or rb.instructions_per_call is None:
        return None
    a, b = ra.instructions_per_call, rb.instructions_per_call
    out = {"a_instructions_per_call": a, "b_instructions_per_call": b, "delta_per_call": b - a,
           "delta_pct": round(100.0 * (b - a) / a, 2) if a else None, "functions": None}
    if ca and cb:
        delta = cg.function_delta(ca["functions"], ca["number"], cb["functions"], cb["number"], top=top)
        out["functions"] = [{"delta_per_call": round(c, 1), "function": f} for c, f in delta]
        out["kept_functions"] = min(len(ca["functions"]), len(cb["functions"]))
    return out


def compare_results(a: Results, b: Results, *, min_floor: float = stats.DEFAULT_MIN_FLOOR,
                    top_functions: int = 15) -> list[dict]:
    b_by_key = {r.key: r for r in b.rows}
    a_keys = set()
    out: list[dict] = []
    for ra in a.rows:
        a_keys.add(ra.key)
        rb = b_by_key.get(ra.key)
        base = {"op": ra.op, "input_shapes": ra.input_shapes, "dtypes": ra.dtypes, "threads": ra.threads,
                "title": case_title(ra), "a_median_us": ra.median_us, "a_noise_pct": ra.noise_pct}
        if rb is None:
            out.append({**base, "b_median_us": None, "b_noise_pct": None, "ratio": None,
                        "noise_floor_pct": None, "real": False, "verdict": "only in A"})
            continue
        ratio = rb.median_us / ra.median_us if ra.median_us > 0 else math.inf
        floor = stats.two_sided_floor(ra.noise_pct / 100.0, rb.noise_pct / 100.0, min_floor)
        real = math.isfinite(ratio) and ratio > 0 and stats.ratio_is_real(ratio, floor)
        out.append({**base, "b_median_us": rb.median_us, "b_noise_pct": rb.noise_pct, "ratio": round(ratio, 4),
                    "noise_floor_pct": round(100.0 * floor, 2), "real": real,
                    "verdict": stats.verdict(ratio, real),
                    "contended": [side for side, r in (("A", ra), ("B", rb)) if r.contended],
                    "callgrind": callgrind_delta(ra, rb, a.callgrind_of(ra), b.callgrind_of(rb), top_functions)})
    for rb in b.rows:
        if rb.key not in a_keys:
            out.append({"op": rb.op, "input_shapes": rb.input_shapes, "dtypes": rb.dtypes, "threads": rb.threads,
                        "title": case_title(rb), "a_median_us": None, "a_noise_pct": None,
                        "b_median_us": rb.median_us, "b_noise_pct": rb.noise_pct, "ratio": None,
                        "noise_floor_pct": None, "real": False, "verdict": "only in B"})
    return out


def machine_notes(a: Results, b: Results) -> list[str]:
    notes = []
    for key in ("cpu_model", "torch_version", "usable_cpus"):
        va, vb = a.machine.get(key), b.machine.get(key)
        if va != vb:
            notes.append(f"{key} differs: A {va!r}, B {vb!r}")
    return notes


def compare_files(path_a: str, path_b: str, *, min_floor: float = stats.DEFAULT_MIN_FLOOR,
                  top_functions: int = 15) -> dict:
    a, b = load(path_a), load(path_b)
    rows = compare_results(a, b, min_floor=min_floor, top_functions=top_functions)
    if not rows:
        raise UsageError("neither file has measurements to compare")
    return {"format": COMPARE_FORMAT, "format_version": FORMAT_VERSION, "mode": "files",
            "a": os.path.abspath(path_a), "b": os.path.abspath(path_b), "min_floor_pct": 100.0 * min_floor,
            "rows": rows, "notes": machine_notes(a, b)}


def render_files(cmp: dict) -> str:
    groups: dict[int, list[list[str]]] = {}
    for r in cmp["rows"]:
        verdict = r["verdict"]
        if r["ratio"] is not None:
            verdict = f"{verdict} (real)" if r["real"] else "same (within noise)"
        if r.get("contended"):
            verdict += f" [{'+'.join(r['contended'])} contended]"
        groups.setdefault(r["threads"], []).append([
            "  " + r["title"], fmt_us(r["a_median_us"]), fmt_us(r["b_median_us"]),
            "-" if r["ratio"] is None else f"{r['ratio']:.3f}",
            "-" if r["noise_floor_pct"] is None else f"±{r['noise_floor_pct']:.1f}%", verdict])
    header = ["", "A (us)", "B (us)", "B/A", "noise floor", "verdict"]
    title = f"microbench compare: A={os.path.basename(cmp['a'])}  B={os.path.basename(cmp['b'])}"
    footer = [
        "Times are in microseconds (us), medians. B/A < 1: B is faster.",
        "A change is real only when B/A lies outside 1 ± noise floor, where the floor is the mean of both",
        f"sides' IQR/median, and at least {cmp['min_floor_pct']:.0f}% "
        "(within-run spread understates run-to-run drift).",
    ]
    if any(r.get("contended") for r in cmp["rows"]):
        footer.append("[A/B contended]: other processes held CPUs that measurement's threads needed; "
                      "its time describes the busy machine.")
    footer += [f"Note: {n}" for n in cmp.get("notes", [])]
    text = table(title, header, [(f"{t} thread{'s' if t != 1 else ''}", rows) for t, rows in sorted(groups.items())],
                 footer)
    cg_parts = [render_callgrind(r) for r in cmp["rows"] if r.get("callgrind")]
    return "\n\n".join([text] + cg_parts)


def render_callgrind(r: dict) -> str:
    cg = r["callgrind"]
    pct = "" if cg["delta_pct"] is None else f" ({cg['delta_pct']:+.2f}%)"
    lines = [f"callgrind, {r['title']} at 1 thread: instructions per call A {cg['a_instructions_per_call']:,}, "
             f"B {cg['b_instructions_per_call']:,}, B - A {cg['delta_per_call']:+,}{pct}"]
    if cg["functions"] is None:
        lines.append("  (no function counts: one side predates format 2 or ran without --callgrind)")
    elif not cg["functions"]:
        lines.append("  no function differs once denoised")
    else:
        width = max(len(f"{f['delta_per_call']:+,.1f}") for f in cg["functions"])
        lines.append(f"  top {len(cg['functions'])} functions by |B - A| per call (exclusive, standardized, "
                     "denoised; CallgrindStats.delta):")
        lines.extend(f"  {f['delta_per_call']:>+{width},.1f}  {_short(f['function'])}" for f in cg["functions"])
        lines.append(f"  (from each side's top {cg['kept_functions']} functions; a function below that cut on "
                     "one side counts as 0 there)")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Interleaved ABBA
# --------------------------------------------------------------------------

def compare_abba(op: str, shapes_text: str, *, b_shapes: str | None = None, dtype: str | None = None,
                 dtypes: str | None = None,
                 args: dict[str, Any] | None = None, a_threads: int = 1, b_threads: int | None = None,
                 a_dtype: str | None = None, b_dtype: str | None = None, rounds: int = 20,
                 block_ms: float = 20.0, sub_blocks: int = 8, ci: str = "sign", confidence: float = 0.95,
                 min_effect: float = stats.DEFAULT_MIN_EFFECT, seed: int = 0, budget_s: float | None = 60.0,
                 progress=None) -> dict:
    import torch

    if rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {rounds}")
    if sub_blocks < 1:
        raise UsageError(f"--sub-blocks must be >= 1, got {sub_blocks}")
    if not 0.5 <= confidence < 1.0:
        raise UsageError(f"--confidence must be in [0.5, 1), got {confidence}")
    b_threads = b_threads if b_threads is not None else torch.get_num_threads()
    if a_threads < 1 or b_threads < 1:
        raise UsageError("thread counts must be >= 1")
    budget = Budget(budget_s)
    case_a = build_spec_case(op, shapes_text, dtype=a_dtype or dtype, dtypes=None if a_dtype else dtypes, args=args)
    case_b = build_spec_case(op, b_shapes or shapes_text, dtype=b_dtype or dtype,
                             dtypes=None if b_dtype else dtypes, args=args)
    same_case = case_a.setup_code() == case_b.setup_code() and case_a.stmt() == case_b.stmt()
    env_a = namespace(case_a)
    env_b = env_a if same_case else namespace(case_b)
    timer_a = make_timer(case_a.stmt(), env_a, a_threads, label=case_a.label())
    timer_b = make_timer(case_b.stmt(), env_b, b_threads, label=case_b.label())
    block_s = block_ms / 1000.0
    num_a, est_a = calibrate(timer_a, block_s)
    num_b, est_b = calibrate(timer_b, block_s)
    if progress:
        progress(f"ABBA: A {est_a * 1e6:.2f} us x{num_a}, B {est_b * 1e6:.2f} us x{num_b} per block, "
                 f"{rounds} rounds")
    before = torch.get_num_threads()
    snap = cpu_snapshot()
    try:
        rs = abba_rounds(block_measure(case_a.stmt(), env_a, a_threads, num_a, sub_blocks),
                         block_measure(case_b.stmt(), env_b, b_threads, num_b, sub_blocks), rounds, budget)
    finally:
        torch.set_num_threads(before)
    others = others_cpus(snap, cpu_snapshot())
    summary = stats.abba_summary(rs, method=ci, confidence=confidence, min_effect=min_effect, seed=seed)
    a_times = [x for r in rs for x in (r.a1, r.a2)]
    b_times = [x for r in rs for x in (r.b1, r.b2)]
    notes = []
    if len(rs) < rounds:
        notes.append(f"the time budget ({budget_s:g} s) allowed {len(rs)} of {rounds} rounds")
    if summary.ci_low is None:
        notes.append("too few rounds for a confidence interval (the sign test needs >= 6 at 95%)")
    if others is not None and others > 0.2:
        notes.append(f"other processes used {others:.1f} CPU(s) on average meanwhile: interleaving spreads "
                     "that over A and B alike, but a thread-count comparison then measures the busy machine")
    if same_case and a_threads == b_threads:
        notes.append("A and B are the same setting: this is an A/A check of the noise")
    return {
        "format": COMPARE_FORMAT, "format_version": FORMAT_VERSION, "mode": "abba",
        "op": case_a.op, "input_shapes": case_a.input_shapes, "b_input_shapes": case_b.input_shapes,
        "stmt_a": case_a.stmt(), "stmt_b": case_b.stmt(),
        "a": {"threads": a_threads, "dtypes": case_a.dtypes, "label": case_a.label(), "calls_per_block": num_a,
              "median_us": stats.median(a_times) * 1e6},
        "b": {"threads": b_threads, "dtypes": case_b.dtypes, "label": case_b.label(), "calls_per_block": num_b,
              "median_us": stats.median(b_times) * 1e6},
        "block_ms": block_ms, "sub_blocks": sub_blocks, "result": summary.as_dict(),
        "rounds_us": [[x * 1e6 for x in (r.a1, r.b1, r.b2, r.a2)] for r in rs],
        "others_cpus": None if others is None else round(others, 2),
        "machine": describe(), "notes": notes, "elapsed_s": round(budget.spent, 3),
    }


def _setting_name(side: dict) -> str:
    t = side["threads"]
    dts = sorted({torch_dtype_name(d) or d for d in side["dtypes"] if d not in ("Scalar", "ScalarList", "")})
    return f"{t} thread{'s' if t != 1 else ''}, {'/'.join(dts)}"


def render_abba(cmp: dict) -> str:
    res = cmp["result"]
    ci = "-" if res["ci_low"] is None else f"{res['ci_low']:.3f} .. {res['ci_high']:.3f}"
    conf = "" if res["confidence"] is None else f"{100 * res['confidence']:.1f}% "
    verdict = f"{res['verdict']} (real)" if res["real"] else "same (not shown to differ)"
    header = ["", f"A: {_setting_name(cmp['a'])}", f"B: {_setting_name(cmp['b'])}", "B/A",
              f"{conf}CI ({res['ci_method']})", "noise floor", "verdict"]
    row = ["  median (us)", fmt_us(cmp["a"]["median_us"]), fmt_us(cmp["b"]["median_us"]),
           f"{res['ratio']:.3f}", ci, f"±{res['noise_floor_pct']:.1f}%", verdict]
    footer = [
        f"{res['rounds']} interleaved A B B A rounds, slots of ~{cmp['block_ms']:g} ms "
        f"({cmp['a']['calls_per_block']} / {cmp['b']['calls_per_block']} calls)"
        + (f", each the fastest of {cmp['sub_blocks']} sub-blocks" if cmp.get("sub_blocks", 1) > 1 else "")
        + f". B/A = exp({'Hodges-Lehmann estimate of the' if res['ci_method'] == 'signed-rank' else 'median'} "
        "per-round log-ratio); < 1: B is faster.",
        f"Noise floor = typical same-setting difference inside a round: measured "
        f"{res['measured_noise_floor_pct']:.1f}%, minimum {res['min_effect_pct']:.1f}%.",
        "Real only when the interval excludes 1 and B/A lies outside 1 ± noise floor.",
    ]
    footer += [f"Note: {n}" for n in cmp.get("notes", [])]
    title = f"microbench A/B: {cmp['op']} {', '.join(str(s) for s in cmp['input_shapes'])}"
    if cmp.get("b_input_shapes") and cmp["b_input_shapes"] != cmp["input_shapes"]:
        title += f" vs B {', '.join(str(s) for s in cmp['b_input_shapes'])}"
    return table(title, header, [(None, [row])], footer)


def dumps(cmp: dict) -> str:
    return json.dumps(cmp, indent=1)
