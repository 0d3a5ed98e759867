"""Statistical power of `microbench compare --run`: planted differences, many A/B trials.

    .venv/bin/python benchmarks/microbench_power.py [--trials 25] [--write benchmarks/RESULTS.md] [--raw OUT.json]
    .venv/bin/python benchmarks/microbench_power.py --analyse OUT.json [--write ...]   # re-analyse saved rounds

A planted difference is the same operator at a slightly larger work size on
side B: `aten::mm [64,K]x[K,64]` with K scaled by 1.02, 1.05 and 1.10 (time
grows with K), and `aten::add [N],[N]` with N scaled alike (memory-bound).
Side A is the base size; an A/A trial has B identical to A (same inputs),
which is how false positives are counted. Every trial is one real
`microbench.compare.compare_abba` call (`compare --run OP --shapes A
--b-shapes B`): calibration, interleaved A B B A rounds, its verdict, and
its wall time, which is the "seconds per operator". The conditions run in a
rotated order inside each trial round, so a load that comes and goes
(other people's jobs on this 2-CPU machine) falls on all of them alike.

Detection = the verdict is "slower (real)" for a planted B (the right
direction); false positive = an A/A trial called real either way. Each
trial keeps its per-round times, so other statistics and fewer rounds
(the first k) are evaluated on the same data (`--analyse`): the method is
tuned on exactly the rounds the shipped one saw. Rates carry a Wilson 95%
interval: with 25 trials, 25/25 only proves >= 87%.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.results import replace_section  # noqa: E402
from microbench import stats  # noqa: E402
from microbench.machine import cpu_model, cpu_snapshot, others_cpus, usable_cpus  # noqa: E402

HEADING = "## microbench A/B: statistical power"
PLANTED = (0.0, 0.02, 0.05, 0.10)
OPERATORS = {   # name -> (op, A's shapes text, B's shapes for a planted fraction)
    "mm": ("aten::mm", "[64,4000],[4000,64]",
           lambda f: f"[64,{round(4000 * (1 + f))}],[{round(4000 * (1 + f))},64]"),
    "add": ("aten::add", "[262144],[262144],[]",
            lambda f: f"[{round(262144 * (1 + f))}],[{round(262144 * (1 + f))}],[]"),
}
GOAL_DETECT, GOAL_FP, GOAL_S = 0.95, 0.05, 10.0


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def loadavg() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except (OSError, ValueError):
        return float("nan")


def collect(trials: int, rounds: int, block_ms: float, ops: list[str], sub_blocks: list[int],
            progress=print, max_s: float = 18 * 60) -> dict:
    from microbench.compare import compare_abba

    out = {"rounds": rounds, "block_ms": block_ms, "sub_blocks": sub_blocks, "trials": []}
    conds = [(op, f, sb) for sb in sub_blocks for op in ops for f in PLANTED]
    t_start = time.perf_counter()
    for t in range(trials):
        if time.perf_counter() - t_start > max_s:
            progress(f"stopped after {t} trial rounds: the {max_s:.0f} s bound is spent")
            break
        k = t % len(conds)
        for op_name, frac, sb in conds[k:] + conds[:k]:    # rotated: no condition always runs first
            op, a_shapes, b_of = OPERATORS[op_name]
            b_shapes = a_shapes if frac == 0 else b_of(frac)
            snap, la = cpu_snapshot(), loadavg()
            t0 = time.perf_counter()
            res = compare_abba(op, a_shapes, b_shapes=b_shapes, a_threads=1, b_threads=1, rounds=rounds,
                               block_ms=block_ms, sub_blocks=sb, budget_s=None, ci="sign")
            wall = time.perf_counter() - t0
            others = others_cpus(snap, cpu_snapshot())
            out["trials"].append({"trial": t, "op": op_name, "planted": frac, "sub_blocks": sb,
                                  "wall_s": round(wall, 3),
                                  "others_cpus": None if others is None else round(others, 2), "loadavg": la,
                                  "verdict": res["result"]["verdict"], "real": res["result"]["real"],
                                  "ratio": res["result"]["ratio"], "rounds_us": res["rounds_us"]})
        progress(f"trial {t + 1}/{trials} done, {time.perf_counter() - t_start:.0f} s, load {loadavg():.2f}")
    out["took_s"] = round(time.perf_counter() - t_start, 1)
    return out


# -- statistics evaluated on the recorded rounds --------------------------------------------------------

def decide(rounds_us: list[list[float]], method: str, k: int) -> tuple[bool, float]:
    """(called real, B/A) by `method` on the first k rounds."""
    rs = [stats.AbbaRound(*r) for r in rounds_us[:k]]
    if method == "shipped: sign CI + noise floor":
        s = stats.abba_summary(rs, method="sign")
        return s.real, s.ratio
    if method == "sign CI":
        s = stats.abba_summary(rs, method="sign", min_effect=0.0)
        return s.ci_low is not None and (s.ci_low > 1 or s.ci_high < 1), s.ratio
    if method == "bootstrap CI":
        s = stats.abba_summary(rs, method="bootstrap", min_effect=0.0, resamples=1000)
        return s.ci_low > 1 or s.ci_high < 1, s.ratio
    if method == "signed-rank CI":
        s = stats.abba_summary(rs, method="signed-rank", min_effect=0.0)
        return s.ci_low is not None and (s.ci_low > 1 or s.ci_high < 1), s.ratio
    if method == "signed-rank CI + 1% floor":
        s = stats.abba_summary(rs, method="signed-rank", min_effect=0.01, measured_floor=False)
        return s.real, s.ratio
    raise ValueError(method)


METHODS = ("shipped: sign CI + noise floor", "sign CI", "bootstrap CI", "signed-rank CI",
           "signed-rank CI + 1% floor")


def analyse(data: dict) -> list[dict]:
    rounds = data["rounds"]
    ks = sorted({k for k in (10, 20, rounds) if k <= rounds})
    rows = []
    ops = sorted({t["op"] for t in data["trials"]}, key=list(OPERATORS).index)
    sbs = sorted({t.get("sub_blocks", 1) for t in data["trials"]}, reverse=True)
    for sb, method, k, op in ((sb, m, k, op) for sb in sbs for m in METHODS for k in ks for op in ops):
        row = {"method": method, "rounds": k, "op": op, "sub_blocks": sb}
        for frac in PLANTED:
            ts = [t for t in data["trials"] if t["op"] == op and t["planted"] == frac
                  and t.get("sub_blocks", 1) == sb]
            calls = [decide(t["rounds_us"], method, k) for t in ts]
            if frac == 0:
                hits = sum(real for real, _ in calls)
            else:
                hits = sum(real and ratio > 1 for real, ratio in calls)
            row[frac] = (hits, len(ts))
        # seconds per operator: wall of the trials, scaled to k rounds (calibration is per trial)
        walls = [t["wall_s"] for t in data["trials"] if t["op"] == op and t.get("sub_blocks", 1) == sb]
        row["s_per_op"] = stats.median(walls) * k / rounds if walls else float("nan")
        rows.append(row)
    return rows


def meets(row: dict) -> bool:
    hits5, n5 = row[0.05]
    fp, n0 = row[0.0]
    return hits5 >= GOAL_DETECT * n5 and fp <= GOAL_FP * n0 and row["s_per_op"] <= GOAL_S


def fmt_rate(hn: tuple[int, int]) -> str:
    k, n = hn
    lo, hi = wilson(k, n)
    return f"{k}/{n} ({100 * k / n:.0f}%, {100 * lo:.0f}-{100 * hi:.0f})" if n else "-"


def effects(data: dict) -> dict:
    """Measured B/A per (op, planted): the median over trials of each trial's median round ratio."""
    out = {}
    for t in data["trials"]:
        out.setdefault((t["op"], t["planted"]), []).append(t["ratio"])
    return {k: stats.median(v) for k, v in out.items()}


def findings(data: dict, sub_blocks: int) -> list[str]:
    """What the shipped statistic saw, computed from the trials (sub-blocks = the default)."""
    out = []
    ts = [t for t in data["trials"] if t.get("sub_blocks", 1) == sub_blocks]
    summ = {id(t): stats.abba_summary([stats.AbbaRound(*r) for r in t["rounds_us"]]) for t in ts}
    aa = [summ[id(t)] for t in ts if t["planted"] == 0]
    if aa:
        tight = sum(1 for s in aa if s.ci_low is not None and (s.ci_low > 1 or s.ci_high < 1))
        out.append(f"- A/A (sub-blocks {sub_blocks}): B/A between {min(s.ratio for s in aa):.4f} and "
                   f"{max(s.ratio for s in aa):.4f}; in {tight} of {len(aa)} trials the interval alone excluded 1 "
                   "(two timeit loops over the same tensors differ systematically by < 1% in one process), which "
                   "is why the statistics without a floor show false positives and the shipped one keeps the 1% "
                   "minimum effect.")
    for op in sorted({t["op"] for t in ts}):
        wrong = [(t["planted"], summ[id(t)].ratio) for t in ts
                 if t["op"] == op and t["planted"] > 0 and summ[id(t)].verdict == "faster"]
        if wrong:
            out.append(f"- {op}: in {len(wrong)} planted trial(s) B, doing more work, was really faster (B/A "
                       + ", ".join(f"{r:.3f} at +{100 * f:.0f}%" for f, r in sorted(wrong))
                       + "): each trial builds fresh tensors, and where they land in memory moved this "
                       "memory-bound op by more than the planted work. Those misses are the machine's, not the "
                       "statistic's; a comparison of two builds should rebuild inputs between rounds to average "
                       "placement out (not done yet).")
    return out


def report(data: dict, rows: list[dict]) -> str:
    trials = data["trials"]
    n = max(t["trial"] for t in trials) + 1
    others = [t["others_cpus"] for t in trials if t["others_cpus"] is not None]
    las = [t["loadavg"] for t in trials if not math.isnan(t["loadavg"])]
    eff = effects(data)
    shipped = [r for r in rows if r["method"] == METHODS[0] and r["rounds"] == data["rounds"]
               and r["sub_blocks"] == max(x["sub_blocks"] for x in rows)]
    lines = [HEADING, "",
             f"- When: {data['when']}; machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {usable_cpus()} "
             f"usable; {platform.platform()}; Python {platform.python_version()}. Took {data['took_s']:.0f} s.",
             f"- Load while it ran (other processes' CPUs during each trial, /proc/stat): median "
             f"{stats.median(others):.2f}, max {max(others):.2f} of {usable_cpus()}; load average "
             f"{min(las):.1f}-{max(las):.1f}." if others and las else "- Load: not readable.",
             f"- Method: {n} trials per operator and planted difference, each one real `compare --run OP "
             f"--shapes A --b-shapes B` at 1 thread: {data['rounds']} interleaved A B B A rounds of "
             f"~{data['block_ms']:g} ms blocks; conditions rotated within each trial round. Planted: B does "
             "2%, 5%, 10% more work (mm: K x 1.02/1.05/1.10; add: N x the same); A/A: B = A.",
             "- Measured B/A (median over trials): " + "; ".join(
                 f"{op} +{100 * f:.0f}%: {eff[(op, f)]:.3f}" for (op, f) in sorted(eff) if f > 0) + ".",
             "", "Detection (verdict `slower (real)`) and false positives (A/A called real), Wilson 95% interval:",
             "", "| sub-blocks | statistic | rounds | operator | +2% | +5% | +10% | A/A false positives | "
                 "s per operator | goal |",
             "| ---: | --- | ---: | --- | --- | --- | --- | --- | ---: | --- |"]
    full = data["rounds"]
    top = max(r["sub_blocks"] for r in rows)
    shown = [r for r in rows if r["method"] == METHODS[0] or (r["sub_blocks"] == top and r["rounds"] == full)]
    for r in shown:
        lines.append(f"| {r['sub_blocks']} | {r['method']} | {r['rounds']} | {r['op']} | {fmt_rate(r[0.02])} | "
                     f"{fmt_rate(r[0.05])} | "
                     f"{fmt_rate(r[0.10])} | {fmt_rate(r[0.0])} | {r['s_per_op']:.1f} | "
                     f"{'met' if meets(r) else 'not met'} |")
    lines += ["", "- Goal: +5% detected in >= 95% of trials, A/A false positives <= 5%, <= 10 s per operator "
                  "(the goal column checks the observed rates, not their intervals). Sub-blocks 1 = one timed "
                  "block per slot (before issue 21); 8 = each slot the fastest of 8 sub-blocks (the default now)."]
    lines += findings(data, top)
    ok = [r for r in rows if meets(r)]
    lines.append(f"- Shipped statistic, sub-blocks {top}, {data['rounds']} rounds (the CLI default is 20): "
                 + ", ".join(
        f"{r['op']} {'met' if meets(r) else 'not met'}" for r in shipped) + ".")
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in ok if r["op"] == op]
        if mine:
            best = min(mine, key=lambda r: (r["s_per_op"], METHODS.index(r["method"])))
            lines.append(f"- {op}: the cheapest setting that met the goal: {best['method']}, sub-blocks "
                         f"{best['sub_blocks']}, {best['rounds']} rounds, {best['s_per_op']:.1f} s.")
        else:
            lines.append(f"- {op}: no setting met the goal.")
    lines += ["", f"- Reproduce: `.venv/bin/python benchmarks/microbench_power.py --trials {n} --sub-blocks "
                  f"{','.join(str(x) for x in sorted({t.get('sub_blocks', 1) for t in trials}))} --write "
                  "benchmarks/RESULTS.md` (about 2.5 s per trial and condition, < 20 min; raw rounds with `--raw`, "
                  "re-analysed with `--analyse`)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=25)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--block-ms", type=float, default=20.0)
    p.add_argument("--sub-blocks", default="8",
                   help="comma-separated variants measured side by side, e.g. 1,8 (1 = one block per slot)")
    p.add_argument("--ops", default="mm,add")
    p.add_argument("--max-minutes", type=float, default=18.0,
                   help="no new trial round starts after this (default 18: the whole run stays < 20 min)")
    p.add_argument("--raw", help="write every trial's rounds here (JSON)")
    p.add_argument("--analyse", metavar="RAW.json", help="re-analyse saved rounds instead of measuring")
    p.add_argument("--write", help="replace this benchmark's section of RESULTS.md")
    args = p.parse_args(argv)
    if args.analyse:
        data = json.loads(Path(args.analyse).read_text())
    else:
        ops = [o for o in args.ops.split(",") if o]
        data = collect(args.trials, args.rounds, args.block_ms, ops, [int(x) for x in args.sub_blocks.split(",")],
                       max_s=60 * args.max_minutes,
                       progress=lambda m: print(m, file=sys.stderr, flush=True))
        data["when"] = datetime.date.today().isoformat()
        if args.raw:
            Path(args.raw).write_text(json.dumps(data))
    text = report(data, analyse(data))
    print(text)
    if args.write:
        replace_section(args.write, HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
