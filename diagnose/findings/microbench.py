"""Rule on the micro-benchmarks: sequential_operator.

An operator measured alone at its recorded shapes whose time barely moves
from 1 thread to all usable CPUs leaves the other CPUs idle while it runs.
Thresholds (speedup = median at 1 thread / median at the most threads
measured, which must be >= 2):
- speedup < SEQUENTIAL_MAX_SPEEDUP (1.25): "near 1";
- the 1-thread median is >= MIN_US (200 µs): torch does not split smaller
  work across threads (grain size), which is Python/dispatch overhead's
  story (python_overhead), not a sequential kernel's;
- severity from the operator's share of operator CPU time in the operator
  pass: `high` >= 30%, `medium` >= 10%, `low` >= 5%, nothing below;
- a measurement microbench marked `contended` (other processes held the
  CPUs) or `noisy` (IQR/median high) makes it `low`, with the reason, since
  the speedup itself is then uncertain;
- so does a matrix multiply (GEMM_OPS) when this machine's own GEMM probe
  (the efficiency layer's peaks) scaled by >= PROBE_SCALES from 1 thread to
  as many threads: torch's GEMMs run in parallel, so a flat speedup there
  contradicts the machine's measurement (a disturbance /proc/stat did not
  show, e.g. the hypervisor taking a vCPU) rather than showing a sequential kernel.
"""

from __future__ import annotations

from typing import Any

from diagnose.report.model import Finding, Report

SEQUENTIAL_MAX_SPEEDUP = 1.25
SHARE_HIGH_PCT = 30.0
SHARE_MEDIUM_PCT = 10.0
MIN_US = 200.0  # an op shorter than this alone is too small to split across threads, not a sequential kernel
SHARE_MIN_PCT = 5.0  # below this share of operator time an idle CPU costs too little to report
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"}
PROBE_SCALES = 1.5  # the probe's GEMM speedup from 1 thread to n that says GEMMs scale here
AVOID = {  # what to do instead, for the sequential kernels users meet most
    "sort": "torch.topk or torch.kthvalue when only the top k are used, or sort once outside the loop",
    "argsort": "torch.topk when only the top k indices are used, or sort once outside the loop",
    "unique": "torch.unique on a smaller input, or a bincount/one-hot formulation",
}


def _key(row: dict[str, Any]) -> tuple:
    return row.get("op"), repr(row.get("input_shapes")), repr(row.get("dtypes"))


def sequential_operator(report: Report) -> list[Finding]:
    cases: dict[tuple, list[dict[str, Any]]] = {}
    for row in report.microbenchmarks:
        if row.get("median_us") and row.get("threads"):
            cases.setdefault(_key(row), []).append(row)
    out = []
    for rows in cases.values():
        one = next((r for r in rows if r["threads"] == 1), None)
        most = max(rows, key=lambda r: r["threads"])
        if one is None or most["threads"] < 2 or one["median_us"] < MIN_US:
            continue
        speedup = one["median_us"] / most["median_us"]
        if speedup >= SEQUENTIAL_MAX_SPEEDUP:
            continue
        share = float(one.get("self_pct") or _share(report, one) or 0.0)
        if share < SHARE_MIN_PCT:
            continue
        severity = "high" if share >= SHARE_HIGH_PCT else "medium" if share >= SHARE_MEDIUM_PCT else "low"
        doubts = [f"{r['threads']}-thread run contended by other processes" for r in (one, most) if r.get("contended")]
        doubts += [f"{r['threads']}-thread run noisy (IQR {r.get('noise_pct'):.0f}% of the median)"
                   for r in (one, most) if r.get("noisy")]
        probe = _probe_speedup(report, most["threads"])
        if one.get("op") in GEMM_OPS and probe is not None and probe >= PROBE_SCALES:
            doubts.append(f"this machine's GEMM probe scaled {probe:.2f}x from 1 to {most['threads']} threads: "
                          "torch's matrix multiplies run in parallel here, re-measure before trusting this one")
        if doubts:
            severity = "low"
        n = most["threads"]
        evidence = {
            "input_shapes": one.get("input_shapes"), "dtypes": one.get("dtypes"),
            "median_us_1_thread": round(one["median_us"], 1), f"median_us_{n}_threads": round(most["median_us"], 1),
            "threads": n, "speedup": round(speedup, 3), "parallel_efficiency": round(speedup / n, 3),
            "noise_pct_1_thread": one.get("noise_pct"), f"noise_pct_{n}_threads": most.get("noise_pct"),
            "threshold_speedup": SEQUENTIAL_MAX_SPEEDUP, "share_pct": round(share, 1),
            "reproducer": one.get("reproducer"),
        }
        if doubts:
            evidence["doubts"] = doubts
        op = one.get("op")
        short = (op or "").split("::")[-1]
        shapes = ", ".join(str(x).replace(" ", "") for x in one.get("input_shapes") or [] if x != []) or "-"
        avoid = AVOID.get(short, "a smaller input, or fewer calls")
        out.append(Finding(
            kind="sequential_operator", severity=severity,
            title=(f"{op} at {shapes} does not speed up with threads: "
                   f"{one['median_us'] / 1e3:.2f} ms on 1 thread vs {most['median_us'] / 1e3:.2f} ms on {n} "
                   f"({speedup:.2f}x); it takes {share:.0f}% of operator time"),
            op=op, location=one.get("source"), evidence=evidence,
            suggestion=(f"While {short} runs, {n - 1} of the {n} CPUs idle: the kernel is sequential at this "
                        f"shape. Avoid the work ({avoid}), overlap it with other work (torch.jit.fork, or move it into a DataLoader "
                        f"worker), or split it into independent pieces that run in parallel. "
                        f"{evidence['reproducer'] or 'The micro-benchmark'} reproduces it alone."),
            layer="microbench"))
    return out


def _probe_speedup(report: Report, threads: int) -> float | None:
    """GEMM GFLOP/s at `threads` over 1 thread in the efficiency layer's probe, when it measured both."""
    gemm = ((report.efficiency or {}).get("peaks") or {}).get("gemm_fp32") or []
    rate = {g.get("threads"): g.get("gflops_per_s") for g in gemm if isinstance(g, dict)}
    if rate.get(1) and rate.get(threads):
        return rate[threads] / rate[1]
    return None


def _share(report: Report, row: dict[str, Any]) -> float | None:
    for op in report.operators:
        if op.name == row.get("op") and op.input_shapes == row.get("input_shapes"):
            return op.self_pct
    return None
