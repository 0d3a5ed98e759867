"""Rules on the operators layer: hot_operator, copy_overhead, memory_churn.

Thresholds (share of all operator self CPU time in the instrumented pass):
- hot_operator: an (operator, shape) row among the top five at >= 10%.
  Compute kernels (matmul, convolution, attention) are where a healthy model
  spends its time, so only the top row gets a finding if it is one, `low`
  and marked an observation (evidence `observation`: ranked after what there
  is to fix; look at its efficiency); any other operator is `medium` at
  >= 10% and `high` at >= 30%, since it usually means avoidable work.
- copy_overhead: layout copies (copy_/clone/contiguous/to called from Python
  or from another copy, not the copies inside a compute kernel) >= 15% is
  `medium`, >= 30% `high`.
- memory_churn: allocations >= 256 MiB in total and >= 1 GiB/s is `low`,
  >= 2 GiB/s `medium`, >= 8 GiB/s `high`, the rate over the span the
  operator pass recorded (stake.recorded_span: with --iters above
  --profile-iters only the last iterations are recorded, and allocations
  are counted over those alone). The evidence adds the turnover (bytes
  allocated over the most bytes alive at once); it is not a threshold, since
  every training loop turns its activations over once per step.
"""

from __future__ import annotations

import re
from collections import defaultdict

from diagnose.findings.stake import UPPER_BOUND, operator_stake, recorded_span
from diagnose.report.model import Finding, OperatorRow, Report

HOT_MIN_PCT = 10.0
HOT_HIGH_PCT = 30.0
COPY_MEDIUM_PCT = 15.0
COPY_HIGH_PCT = 30.0
MIB = 1 << 20
GIB = 1 << 30
CHURN_MIN_BYTES = 256 * MIB
CHURN_RATES = ((8 * GIB, "high"), (2 * GIB, "medium"), (1 * GIB, "low"))

COMPUTE = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|addbmm|einsum|_?convolution\w*|conv\w*"
                     r"|mkldnn_\w*|_scaled_dot_product\w*|scaled_dot_product\w*|_mkl_linear|lstm\w*|gru\w*)$")
COPY_OPS = {"aten::copy_", "aten::clone", "aten::contiguous", "aten::to", "aten::_to_copy"}

# (pattern on the operator name, what to try)
SUGGESTIONS = [
    (COMPUTE, "This is the model's core compute. Check it runs efficiently: thread count vs usable CPUs "
              "(torch.set_num_threads), contiguous inputs, channels_last for convolutions, and bfloat16 "
              "autocast on CPUs with AVX512-BF16/AMX; micro-benchmark it at this shape."),
    (re.compile(r"^aten::(copy_|clone|contiguous|_to_copy|to)$"),
     "Copies change layout or dtype. Avoid .contiguous()/.clone()/.to() in the hot path: keep tensors in "
     "the layout the next operator wants, convert dtypes once outside the loop."),
    (re.compile(r"^aten::(sort|argsort|topk|unique\w*|cumsum|cumprod|nonzero|searchsorted)$"),
     "Often sequential or poorly parallelised on CPU. Reduce the size it works on (topk instead of a full "
     "sort, sort once outside the loop), or batch the calls."),
    (re.compile(r"^aten::(index\w*|gather|scatter\w*|masked_\w+|embedding\w*|take\w*)$"),
     "Gather/scatter is memory-bound. Batch the indices into one call, keep index tensors contiguous "
     "int64, and avoid boolean masks in loops."),
    (re.compile(r"^aten::(_?softmax|_?log_softmax|layer_norm|native_layer_norm|batch_norm\w*|group_norm\w*)$"),
     "Normalisations are memory-bound. Fuse them with their neighbours (torch.compile) or use fused "
     "kernels such as scaled_dot_product_attention for softmax(QK^T)V."),
    (re.compile(r"^aten::(cat|stack|split\w*|chunk|narrow|slice\w*|pad|constant_pad_nd)$"),
     "Concatenation and slicing copy memory. Preallocate the output and write into it, or restructure "
     "so the pieces are produced in place."),
    (re.compile(r"^aten::(empty\w*|zeros\w*|ones\w*|full\w*|rand\w*|normal_|uniform_|fill_|zero_)$"),
     "Tensor creation in the hot path. Allocate once outside the loop and reuse (out=, in-place fill_)."),
]
ELEMENTWISE_SUGGESTION = (
    "Elementwise operators are memory-bound: each reads and writes whole tensors. Fuse chains of them "
    "(torch.compile), use in-place variants where safe, and check the inputs are contiguous."
)


def suggestion_for(op: str) -> str:
    for pattern, text in SUGGESTIONS:
        if pattern.match(op):
            return text
    return ELEMENTWISE_SUGGESTION


def _shape_text(shapes) -> str:
    return ", ".join(str(s) for s in shapes if s != []) or "scalars"


def _overhead(report: Report) -> float | None:
    ratio = report.run.overhead_ratio
    return round(ratio, 3) if ratio else None


def hot_operator(report: Report) -> list[Finding]:
    out = []
    for i, row in enumerate(report.operators[:5]):
        if row.self_pct < HOT_MIN_PCT:
            break
        compute = bool(COMPUTE.match(row.name))
        if compute and i > 0:
            continue  # a healthy model's compute: one low finding for the top row is enough
        severity = "low" if compute else ("high" if row.self_pct >= HOT_HIGH_PCT else "medium")
        where = f" at {row.source}" if row.source else ""
        out.append(Finding(
            kind="hot_operator",
            severity=severity,
            title=f"{row.name} on {_shape_text(row.input_shapes)} takes {row.self_pct:.0f}% of operator CPU time{where}",
            op=row.name,
            location=row.source,
            evidence={
                "share_pct": row.self_pct,
                "self_cpu_us": row.self_cpu_us,
                "calls": row.calls,
                "us_per_call": round(row.self_cpu_us / row.calls, 3) if row.calls else None,
                "input_shapes": row.input_shapes,
                "dtypes": row.dtypes,
                "gflops_per_s": row.gflops_per_s,
                "sources": [{"location": s.location, "self_cpu_us": s.self_cpu_us, "calls": s.calls}
                            for s in row.sources[:3]],
                "threshold_pct": HOT_MIN_PCT if compute else (HOT_HIGH_PCT if severity == "high" else HOT_MIN_PCT),
                "compute_kernel": compute,
                "observation": compute,
                "instrumentation_overhead": _overhead(report),
                **operator_stake(report, row.self_pct),
            },
            suggestion=suggestion_for(row.name),
            layer="operators",
        ))
    return out



def _layout_copy_us(row: OperatorRow) -> float:
    """Self time of a copy op that Python or another copy asked for (not a kernel's internal copy)."""
    if row.name not in COPY_OPS:
        return 0.0
    return sum(us for parent, us in row.called_by.items() if parent == "" or parent in COPY_OPS)


def copy_overhead(report: Report) -> list[Finding]:
    total = sum(r.self_cpu_us for r in report.operators)
    if total <= 0:
        return []
    by_location: dict[str | None, float] = defaultdict(float)
    copy_us = 0.0
    for row in report.operators:
        us = _layout_copy_us(row)
        if us <= 0:
            continue
        copy_us += us
        row_total = sum(s.self_cpu_us for s in row.sources) or 1.0
        for s in row.sources:
            by_location[s.location] += us * s.self_cpu_us / row_total
    pct = 100.0 * copy_us / total
    if pct < COPY_MEDIUM_PCT:
        return []
    location = max(by_location, key=lambda k: (k is not None, by_location[k])) if by_location else None
    severity = "high" if pct >= COPY_HIGH_PCT else "medium"
    where = f", most of it from {location}" if location else ""
    return [Finding(
        kind="copy_overhead",
        severity=severity,
        title=f"Layout copies take {pct:.0f}% of operator CPU time{where}",
        op="aten::copy_",
        location=location,
        evidence={
            "share_pct": round(pct, 3),
            "copy_self_cpu_us": round(copy_us, 3),
            "threshold_pct": COPY_HIGH_PCT if severity == "high" else COPY_MEDIUM_PCT,
            "by_location_us": {str(k): round(v, 3) for k, v in sorted(by_location.items(), key=lambda kv: -kv[1])[:5]},
            "instrumentation_overhead": _overhead(report),
            **operator_stake(report, pct),
        },
        suggestion=suggestion_for("aten::copy_"),
        layer="operators",
    )]



def memory_churn(report: Report) -> list[Finding]:
    mem = report.operator_summary.get("memory") or {}
    allocated = int(mem.get("allocated_bytes") or 0)
    wall, span_basis = recorded_span(report)
    if allocated < CHURN_MIN_BYTES or not wall:
        return []
    rate = allocated / wall
    peak = int(mem.get("peak_live_bytes") or 0)
    turnover = allocated / peak if peak else None
    severity = next((sev for limit, sev in CHURN_RATES if rate >= limit), None)
    if severity is None:
        return []
    by_location: dict[str | None, int] = defaultdict(int)
    for row in report.operators:
        if row.cpu_memory_bytes > 0:
            total = sum(s.self_cpu_us for s in row.sources) or 1.0
            share = {s.location: (s.self_cpu_us / total) for s in row.sources} or {row.source: 1.0}
            for loc, frac in share.items():
                by_location[loc] += int(row.cpu_memory_bytes * frac)
    location = max(by_location, key=lambda k: (k is not None, by_location[k])) if by_location else None
    top_ops = sorted((r for r in report.operators if r.cpu_memory_bytes > 0), key=lambda r: -r.cpu_memory_bytes)[:3]
    where = f", most of it at {location}" if location else ""
    return [Finding(
        kind="memory_churn",
        severity=severity,
        title=(f"{allocated / GIB:.1f} GiB allocated in {wall:.2f} s ({rate / GIB:.1f} GiB/s"
               + (f", {turnover:.0f}x the {peak / MIB:.0f} MiB ever alive at once" if turnover else "")
               + f"){where}"),
        op=top_ops[0].name if top_ops else None,
        location=location,
        evidence={
            "allocated_bytes": allocated,
            "allocations": int(mem.get("allocations") or 0),
            "bytes_per_s": round(rate),
            "recorded_s": round(wall, 4),
            "recorded_s_basis": span_basis,
            "threshold_bytes_per_s": next(limit for limit, sev in CHURN_RATES if sev == severity),
            "peak_live_bytes": peak or None,
            "turnover": round(turnover, 1) if turnover else None,
            "top_operators": [{"op": r.name, "input_shapes": r.input_shapes, "bytes": r.cpu_memory_bytes,
                               "source": r.source} for r in top_ops],
            "instrumentation_overhead": _overhead(report),
            **_churn_stake(report),
        },
        suggestion="Reuse buffers instead of allocating per step: out= arguments and in-place operators, "
                   "tensors created once outside the loop, torch.inference_mode() for inference so autograd "
                   "keeps nothing alive; if the allocator itself shows up, try jemalloc or tcmalloc via LD_PRELOAD.",
        layer="operators",
    )]


def _churn_stake(report: Report) -> dict:
    """The time of the operators that allocated, page faults and all: an upper bound on what reuse wins."""
    out = operator_stake(report, sum(r.self_pct for r in report.operators if r.cpu_memory_bytes > 0))
    out["time_at_stake_basis"] += f" ({UPPER_BOUND}: the allocating operators' whole time)"
    return out
