"""Operators against this machine's roofs: pure arithmetic on report rows, work estimates and peaks.

Contract
- `select_rows(operators)`: the hot ATen rows worth placing: most self time
  first, >= MIN_SHARE_PCT of operator time, at most MAX_ROWS, leaving out
  autograd/Python-level events and wrappers whose time is mostly in the
  operators they call (self < half of total: their children have rows).
- `roofs(peaks, threads, usable)` -> model.Roofs: the compute roof is the
  best fp32 GEMM GFLOP/s the probe measured at <= the run's intra-op threads
  (capped at the usable CPUs), the memory roof the best copy/triad GB/s
  likewise; the ridge point is their ratio (FLOP/byte). A roof is what this
  machine was measured to do, so an fp32 kernel of the run measured faster
  (`fastest_kernel`: micro-benchmarked alone, or in the operator pass, at <=
  those threads) raises the compute roof to its rate, and `Roofs.raised_by`
  names it beside the probe's figure: a probe caught in a slow stretch of a
  vCPU, or run at a square shape slower than the run's, is low (a cached
  132.5 GFLOP/s on an EPYC beside a [256,1024]x[1024,1024] mm at 143-162 alone
  read as "1.4x faster than this machine's roof").
- `place(row, work, roofs)` -> model.RooflineRow: achieved GFLOP/s = FLOPs x
  calls / self time and GB/s = bytes x calls / self time (self CPU time of the instrumented
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
- `no_verdict(name)` (diagnose/opkinds.py): operators whose time neither roof describes get no
  efficiency (efficiency_pct None, `reason` says why; the row stays in the
  table), so no low_efficiency finding:
  - random number generation (RNG: normal_, uniform_, bernoulli, rand*,
    dropout, multinomial ...; torch tags them `nondeterministic_seeded`): each
    element costs a generator step (Philox / Mersenne twister, tens of
    instructions), compute the FLOP counter does not see; measured against the
    bytes it writes, BERT's init `normal_` on [30522, 256] read as "3% of the
    memory roof" while it ran at the generator's speed;
  - sorting and selection (sort, argsort, topk, kthvalue, unique, median,
    mode): n log n comparisons and data-dependent branches, no FLOPs, and
    bytes say nothing about comparisons;
  - allocation (empty, empty_like, empty_strided, resize_, set_): they touch
    no data (the page faults land on the first operator that writes), so
    neither FLOPs nor bytes describe them;
  - views (view, reshape, select, slice, transpose, permute, expand, t,
    squeeze, unsqueeze, ...): metadata only, no data moves; their time is
    per-call dispatch. (A reshape that must copy does it in a clone/copy_
    child, which has its own row.)
- transcendental element-wise functions (gelu, tanh, sigmoid, silu, erf,
  exp, log, softplus, ... and their backward): a vectorised exp or erf is a
  polynomial of some 10-30 FLOPs per element, so the one-FLOP-per-element
  count calls them memory-bound while a plain run shows them compute-bound
  (tanh over 1M floats took ~3 ms whether it wrote a fresh or a reused
  output, against 0.3 ms of memory traffic): no verdict either way.
  Write-only operators keep their bytes model: fill_, zero_, zeros, ones,
  full write every output byte once, which is what a streaming store costs,
  so the memory roof is the right yardstick for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from diagnose.opkinds import ATEN, NOT_KERNELS, WRAPPER_SELF_FRACTION, no_verdict, tensor_dtypes
from diagnose.report.model import Peaks, RooflineRow, Roofs, Work

MIN_SHARE_PCT = 1.0
MAX_ROWS = 12
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


def roof_threads(peaks: Peaks, threads: int | None, usable: int | None) -> int:
    """The run's intra-op threads (else the usable CPUs), capped at the usable CPUs, at least 1."""
    usable = usable or (peaks.key.usable_cpus if peaks.key else None) or 1
    return max(1, min(threads or usable, usable))


def _gflops(flops: int, row: Any) -> float:
    """A row's achieved GFLOP/s: `flops` a call x its calls / its self CPU time (> 0)."""
    return flops * row.calls / (row.self_cpu_us / 1e6) / 1e9


def fastest_kernel(rows: list[Any], works: list[Work], alone: Sequence[Any],
                   threads: int) -> tuple[float, str] | None:
    """(GFLOP/s, what ran at it) of the fastest fp32 kernel this run measured at <= `threads`: the micro-benchmark's
    rows (`alone`, report.microbenchmarks) and the operator pass's rows whose FLOPs torch's FlopCounter counted (not
    a pointwise or softmax estimate). Only fp32: a bfloat16 GEMM on AMX outruns the fp32 roof by design."""
    def kernel(op: str, shapes: list[Any], where: str) -> str:
        return f"{op} {'x'.join(str(s) for s in shapes)} {where}"

    ran = [(float(r.gflops_per_s), kernel(r.op, r.input_shapes, f"micro-benchmarked alone at {r.threads} "
                                                                 f"thread{'s' if r.threads != 1 else ''}"))
           for r in alone if r.gflops_per_s and r.threads <= threads and set(r.dtypes) == {"float"}]
    ran += [(_gflops(w.flops, r), kernel(r.name, r.input_shapes, "in the operator pass"))
            for r, w in zip(rows, works)
            if w.flops and w.flops_source == "flop_counter" and r.self_cpu_us > 0 and r.calls
            and tensor_dtypes(r.input_shapes, r.dtypes) == {"float"}]
    return max(ran, default=None)


def roofs(peaks: Peaks, threads: int | None, usable: int | None, fastest: tuple[float, str] | None = None) -> Roofs:
    t = roof_threads(peaks, threads, usable)
    flops, bw = peaks.gemm_peak(t), peaks.bandwidth_peak(t)
    probed, raised_by = None, None
    if flops and fastest and fastest[0] > flops:
        probed, raised_by, flops = flops, fastest[1], _sig(fastest[0])
    return Roofs(threads=t, gflops_per_s=flops, gb_per_s=bw,
                 ridge_flop_per_byte=round(flops / bw, 3) if flops and bw else None, llc_bytes=peaks.llc_bytes,
                 probed_gflops_per_s=probed, raised_by=raised_by)


def _sig(x: float | None, digits: int = 4) -> float | None:
    if x is None:
        return None
    return float(f"{x:.{digits}g}")


def place(row: Any, work: Work, roof: Roofs) -> RooflineRow:
    """One operator row on the roofline (a row of report.efficiency.operators)."""
    seconds = row.self_cpu_us / 1e6
    flops, nbytes = work.flops, work.bytes
    out = RooflineRow(
        name=row.name, input_shapes=row.input_shapes, dtypes=row.dtypes, source=row.source,
        share_pct=row.self_pct, calls=row.calls, self_cpu_us=row.self_cpu_us,
        us_per_call=round(row.self_cpu_us / row.calls, 3) if row.calls else None,
        threads=roof.threads, flops=flops, flops_source=work.flops_source, bytes=nbytes,
        output_shapes=work.output_shapes, contiguous=_contiguous(row, work), roof_gb_per_s=roof.gb_per_s,
        roof_note=_roof_note(tensor_dtypes(row.input_shapes, row.dtypes)), reason=work.reason,
    )
    if no_verdict(row.name):
        out.reason = no_verdict(row.name)
        return out
    if seconds <= 0 or not row.calls:
        out.reason = out.reason or "no self time recorded"
        return out
    if nbytes:
        out.achieved_gb_per_s = _sig(nbytes * row.calls / seconds / 1e9)
    peak, bw, ridge = roof.gflops_per_s, roof.gb_per_s, roof.ridge_flop_per_byte
    if flops:
        achieved = _gflops(flops, row)
        out.achieved_gflops_per_s = _sig(achieved)
        if nbytes:
            intensity = flops / nbytes
            out.intensity_flop_per_byte = _sig(intensity)
            if peak and bw:
                roof_here = min(peak, intensity * bw)
                out.bound = "compute" if intensity >= ridge else "memory"
                out.bound_basis = f"intensity {intensity:.3g} FLOP/byte vs ridge {ridge:.3g}"
                out.roof_gflops_per_s = _sig(roof_here)
                out.efficiency_pct = _sig(100.0 * achieved / roof_here, 3)
        elif peak:
            out.bound, out.bound_basis = "compute", "no byte estimate: compute roof only"
            out.roof_gflops_per_s = _sig(peak)
            out.efficiency_pct = _sig(100.0 * achieved / peak, 3)
    elif nbytes and bw:
        out.bound, out.bound_basis = "memory", "no FLOP count for this operator: memory roof only"
        out.efficiency_pct = _sig(100.0 * out.achieved_gb_per_s / bw, 3)
    llc = roof.llc_bytes
    out.cache_resident = bool(out.bound == "memory" and nbytes and llc and nbytes <= llc)
    if out.cache_resident:
        out.roof_note = "; ".join(filter(None, [
            out.roof_note, f"its {nbytes / (1 << 20):.3g} MiB per call fit in the {llc / (1 << 20):.0f} MiB "
            "last-level cache, which streams faster than the DRAM roof: above 100% is possible"]))
    return out


def _contiguous(row: Any, work: Work) -> bool | None:
    """False when an input strides through memory the kernel must copy or gather; a matrix product's 2-D
    operand transposed as a whole (nn.Linear's weight.t(): strides (1, rows)) is not that: BLAS reads a
    transposed operand natively."""
    flags = getattr(row, "contiguous", None)
    if isinstance(flags, list) and any(f is False for f in flags):
        strides = getattr(row, "input_strides", None) or []
        shapes = getattr(row, "input_shapes", None) or []
        matmul = row.name.split("::")[-1] in ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm")
        odd = [i for i, f in enumerate(flags) if f is False
               and not (matmul and _transposed(shapes[i] if i < len(shapes) else None,
                                               strides[i] if i < len(strides) else None))]
        if odd:
            return False
    return work.contiguous


def _transposed(shape: Any, stride: Any) -> bool:
    """A matrix (or a batch of them) whose last two dimensions are swapped: a transposed, dense view."""
    if not isinstance(shape, list) or not isinstance(stride, list) or len(shape) < 2 or len(shape) != len(stride):
        return False
    rows = shape[-2]
    return stride[-2] == 1 and stride[-1] == max(rows, 1)


def _roof_note(kinds: set[str]) -> str | None:
    if "double" in kinds:
        return "float64: the fp32 GEMM roof is about twice what float64 kernels can reach"
    if kinds & {"c10::BFloat16", "c10::Half"}:
        return "bfloat16/float16: the roofs are fp32 measurements; AMX/AVX512-FP16 CPUs go higher"
    return None


def analyse(rows: list[Any], works: list[Work], peaks: Peaks, threads: int | None,
            usable: int | None, alone: Sequence[Any] = ()) -> tuple[Roofs, list[RooflineRow]]:
    """The roofs (raised by the fastest fp32 kernel measured, `fastest_kernel`) and every row placed under them."""
    fastest = fastest_kernel(rows, works, alone, roof_threads(peaks, threads, usable))
    roof = roofs(peaks, threads, usable, fastest)
    return roof, [place(r, w, roof) for r, w in zip(rows, works)]
