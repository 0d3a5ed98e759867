"""Operators against this machine's roofs: pure arithmetic on report rows, work estimates and peaks.

Contract
- `select_rows(operators)`: the hot ATen rows worth placing: most self time
  first, >= MIN_SHARE_PCT of operator time, at most MAX_ROWS, leaving out
  autograd/Python-level events and wrappers whose time is mostly in the
  operators they call (self < half of total: their children have rows).
- `roofs(peaks, threads)`: the compute roof is the best fp32 GEMM GFLOP/s the
  probe measured at <= the run's intra-op threads (capped at the usable
  CPUs), the memory roof the best copy/triad GB/s likewise; the ridge point
  is their ratio (FLOP/byte).
- `place(row, work, roofs)`: achieved GFLOP/s = FLOPs x calls / self time and
  GB/s = bytes x calls / self time (self CPU time of the instrumented
  operator pass, so the numbers carry that pass's overhead); intensity =
  FLOPs / bytes; `bound` is "compute" at or right of the ridge, else
  "memory"; the roof at that intensity is min(compute roof, intensity x
  memory roof); efficiency_pct = achieved / roof. A row without a FLOP count
  is measured against the memory roof alone (bound "memory", basis says so).
- A memory-bound row whose bytes per call fit in the last-level cache (the probe reads
  its size from sysfs) is `cache_resident`: its data may never leave the
  cache, so it can run above the DRAM roof (efficiency > 100%).
- The peaks are fp32 GEMM: a float64 kernel's real roof is about half, a
  bfloat16/float16 one's can be higher; `roof_note` says so on those rows.
"""

from __future__ import annotations

import re
from typing import Any

from diagnose.layers.efficiency import probe

MIN_SHARE_PCT = 1.0
MAX_ROWS = 12
WRAPPER_SELF_FRACTION = 0.5
ATEN = re.compile(r"^[a-z_][a-z0-9_]*::\w+$")
NOT_KERNELS = ("autograd", "profiler", "torch", "Optimizer")


def select_rows(operators: list[Any]) -> list[Any]:
    out = []
    for row in sorted(operators, key=lambda r: -r.self_pct):
        if row.self_pct < MIN_SHARE_PCT or len(out) >= MAX_ROWS:
            break
        if not ATEN.match(row.name) or row.name.split("::")[0] in NOT_KERNELS:
            continue
        if row.total_cpu_us > 0 and row.self_cpu_us < WRAPPER_SELF_FRACTION * row.total_cpu_us:
            continue
        out.append(row)
    return out


def roofs(peaks: dict[str, Any], threads: int | None, usable: int | None) -> dict[str, Any]:
    usable = usable or (peaks.get("key") or {}).get("usable_cpus") or 1
    t = max(1, min(threads or usable, usable))
    flops, bw = probe.gemm_peak(peaks, t), probe.bandwidth_peak(peaks, t)
    return {"threads": t, "gflops_per_s": flops, "gb_per_s": bw,
            "ridge_flop_per_byte": round(flops / bw, 3) if flops and bw else None,
            "llc_bytes": peaks.get("llc_bytes")}


def _sig(x: float | None, digits: int = 4) -> float | None:
    if x is None:
        return None
    return float(f"{x:.{digits}g}")


def place(row: Any, work: dict[str, Any], roof: dict[str, Any]) -> dict[str, Any]:
    """One operator row on the roofline (a dict for report.efficiency["operators"])."""
    seconds = row.self_cpu_us / 1e6
    flops, nbytes = work.get("flops"), work.get("bytes")
    out: dict[str, Any] = {
        "name": row.name, "input_shapes": row.input_shapes, "dtypes": row.dtypes, "source": row.source,
        "share_pct": row.self_pct, "calls": row.calls, "self_cpu_us": row.self_cpu_us,
        "us_per_call": round(row.self_cpu_us / row.calls, 3) if row.calls else None,
        "threads": roof["threads"], "flops": flops, "flops_source": work.get("flops_source"), "bytes": nbytes,
        "output_shapes": work.get("output_shapes"),
        "contiguous": _contiguous(row, work),
        "intensity_flop_per_byte": None, "achieved_gflops_per_s": None, "achieved_gb_per_s": None,
        "bound": None, "bound_basis": None, "roof_gflops_per_s": None, "roof_gb_per_s": roof["gb_per_s"],
        "efficiency_pct": None, "roof_note": _roof_note(tensor_dtypes(row.input_shapes, row.dtypes)),
        "reason": work.get("reason"),
    }
    if seconds <= 0 or not row.calls:
        out["reason"] = out["reason"] or "no self time recorded"
        return out
    if nbytes:
        out["achieved_gb_per_s"] = _sig(nbytes * row.calls / seconds / 1e9)
    peak, bw, ridge = roof["gflops_per_s"], roof["gb_per_s"], roof["ridge_flop_per_byte"]
    if flops:
        achieved = flops * row.calls / seconds / 1e9
        out["achieved_gflops_per_s"] = _sig(achieved)
        if nbytes:
            intensity = flops / nbytes
            out["intensity_flop_per_byte"] = _sig(intensity)
            if peak and bw:
                compute = intensity >= ridge
                roof_here = min(peak, intensity * bw)
                out.update(bound="compute" if compute else "memory",
                           bound_basis=f"intensity {intensity:.3g} FLOP/byte vs ridge {ridge:.3g}",
                           roof_gflops_per_s=_sig(roof_here),
                           efficiency_pct=_sig(100.0 * achieved / roof_here, 3))
        elif peak:
            out.update(bound="compute", bound_basis="no byte estimate: compute roof only",
                       roof_gflops_per_s=_sig(peak), efficiency_pct=_sig(100.0 * achieved / peak, 3))
    elif nbytes and bw:
        out.update(bound="memory", bound_basis="no FLOP count for this operator: memory roof only",
                   efficiency_pct=_sig(100.0 * out["achieved_gb_per_s"] / bw, 3))
    llc = roof.get("llc_bytes")
    out["cache_resident"] = bool(out["bound"] == "memory" and nbytes and llc and nbytes <= llc)
    if out["cache_resident"]:
        out["roof_note"] = "; ".join(filter(None, [
            out["roof_note"], f"its {nbytes / (1 << 20):.3g} MiB per call fit in the {llc / (1 << 20):.0f} MiB "
            "last-level cache, which streams faster than the DRAM roof: above 100% is possible"]))
    return out


def _contiguous(row: Any, work: dict[str, Any]) -> bool | None:
    flags = getattr(row, "contiguous", None)
    if isinstance(flags, list) and any(f is False for f in flags):
        return False
    return work.get("contiguous")


def tensor_dtypes(shapes: list[Any], dtypes: list[str]) -> set[str]:
    """Dtypes of the tensor inputs with at least one dimension (a Python scalar is recorded as a 0-d double)."""
    return {d for s, d in zip(shapes or [], dtypes or []) if isinstance(s, list) and len(s) > 0}


def _roof_note(kinds: set[str]) -> str | None:
    if "double" in kinds:
        return "float64: the fp32 GEMM roof is about twice what float64 kernels can reach"
    if kinds & {"c10::BFloat16", "c10::Half"}:
        return "bfloat16/float16: the roofs are fp32 measurements; AMX/AVX512-FP16 CPUs go higher"
    return None


def analyse(rows: list[Any], works: list[dict[str, Any]], peaks: dict[str, Any], threads: int | None,
            usable: int | None) -> dict[str, Any]:
    roof = roofs(peaks, threads, usable)
    return {"roofs": roof, "operators": [place(r, w, roof) for r, w in zip(rows, works)]}
