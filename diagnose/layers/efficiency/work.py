"""The work one call of an operator does, from its recorded shapes: FLOPs and bytes moved.

    python -m diagnose.layers.efficiency.work ROWS.json OUT.json

Contract
- Input: operator rows as in report.json (name, input_shapes, dtypes and,
  when recorded, input_strides, contiguous, concrete_inputs). Output: one
  `Work` per row, in order (report/model.py; as JSON its fields: flops,
  flops_source, bytes, bytes_source, output_shapes, contiguous, reason), per call.
- The call is rebuilt with microbench.cases (same overload choice and
  argument guesses as the micro-benchmarks) on the `meta` device: shapes,
  dtypes and strides, no data, no compute; milliseconds per row.
- FLOPs, in order of preference:
  1. `torch.utils.flop_counter` formulas (flop_source "flop_counter"): matmul,
     bmm, addmm, baddbmm, convolution, attention, their backwards; counted only
     when the operator itself has a formula (a composite such as aten::linear
     would otherwise get its children's FLOPs against its own small self time);
  2. pointwise operators (torch.Tag.pointwise): 1 FLOP per output element
     ("pointwise estimate");
  3. softmax / log_softmax and their backward: 5 per element; sum/mean-style
     reductions: 1 per input element ("estimate");
  4. else None: the operator is placed against the memory roof only.
- Bytes: each input tensor read once (its distinct elements: a broadcast
  dimension of stride 0 is read once) plus each output written once. That is
  the compulsory traffic, a LOWER bound on what the kernel moves (a matmul
  re-reads tiles that miss the cache), so the intensity is an upper bound.
  For out-of-place writes into an argument (copy_, fill_, zero_, normal_ ...)
  and the out tensor of an `out=` overload (a compiled graph's
  `aten::addmm.out`) the destination counts as written, not read. A gather
  (embedding, index_select, gather, take, index) reads only the rows it picks from its
  source, as many elements as it writes, not the whole table: an embedding
  lookup of 2 tokens in a [30522, 256] table reads 2 rows, not 31 MB.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any

from diagnose.report.model import Work
from microbench.cases import CannotRebuild, case_from_row

WRITE_ONLY_FIRST_ARG = {"copy_", "fill_", "zero_", "normal_", "uniform_", "random_", "bernoulli_", "index_put_",
                        "exponential_", "set_", "resize_", "masked_fill_"}
SOFTMAX_FAMILY = {"_softmax", "softmax", "_log_softmax", "log_softmax", "_softmax_backward_data",
                  "_log_softmax_backward_data"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "norm", "linalg_vector_norm", "var", "std", "prod",
              "logsumexp", "var_mean", "std_mean", "argmax", "argmin", "all", "any"}
GATHERS = {"embedding", "index_select", "gather", "take", "index"}  # the source is their first tensor
FLOPS_PER_ELEMENT = {"softmax": 5, "reduction": 1, "pointwise": 1}
# attention kernels flop_counter does not register (the CPU flash kernel): q, k, v are their first three inputs
ATTENTION_FORWARD = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math",
                     "_scaled_dot_product_fused_attention_overrideable"}


def _distinct_elements(shape: list[int], strides: list[int] | None) -> int:
    if strides is None:
        return math.prod(shape) if shape else 1
    return math.prod(s for s, st in zip(shape, strides) if st != 0) if shape else 1


def _tensors(x):
    import torch

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _meta_args(case) -> tuple[list[Any], dict[str, Any], list[Any]]:
    import torch

    pos, kw, tensors = [], {}, []
    for a in case.args:
        if a.tensor is not None:
            t = a.tensor
            dtype = getattr(torch, t.dtype)
            if t.strides is None:
                value = torch.empty(t.shape, dtype=dtype, device="meta")
            else:
                value = torch.empty_strided(t.shape, t.strides, dtype=dtype, device="meta")
            tensors.append((value, t.strides))
        else:
            value = a.value
            if isinstance(value, str) and value.startswith("torch."):  # Code("torch.float32")
                value = getattr(torch, value.split(".", 1)[1])
        (kw.__setitem__(a.name, value) if a.kwarg_only else pos.append(value))
    return pos, kw, tensors


def estimate(row: dict[str, Any]) -> Work:
    """Work per call of one operator row; never raises (the reason says what was not possible)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    out = Work()
    try:
        case = case_from_row(row)
    except CannotRebuild as exc:
        out.reason = f"cannot rebuild the call: {exc}"
        return out
    ns, opname = case.op.split("::")
    packet = getattr(getattr(torch.ops, ns), opname)
    overload = getattr(packet, case.overload)
    try:
        pos, kw, tensors = _meta_args(case)
        with FlopCounterMode(display=False) as counter:
            result = overload(*pos, **kw)
    except Exception as exc:  # noqa: BLE001 - an op without a meta kernel: no estimate, say why
        out.reason = f"{case.op} does not run on the meta device: {type(exc).__name__}: " \
                        f"{str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"
        return out
    outputs = [t for t in _tensors(result)]
    out.output_shapes = [list(t.shape) for t in outputs]
    out.contiguous = all(st is None for _, st in tensors)
    read = [t for t, reads in zip(tensors, case.read) if reads]  # an out= tensor is written, not read
    if opname in WRITE_ONLY_FIRST_ARG and read:
        read = read[1:]
    read_bytes = [_distinct_elements(list(t.shape), st) * t.element_size() for t, st in read]
    out_bytes = sum(t.numel() * t.element_size() for t in outputs)
    if opname in GATHERS and read_bytes and outputs:
        source = read[0][0]
        read_bytes[0] = min(read_bytes[0], outputs[0].numel() * source.element_size())
    in_bytes = sum(read_bytes)
    out.bytes = int(in_bytes + out_bytes)
    out.bytes_source = "inputs read once + outputs written once (compulsory traffic, a lower bound)"
    out_elems = sum(t.numel() for t in outputs)
    in_elems = max((t.numel() for t, _ in read), default=0)
    base = opname.rstrip("_")
    if packet in flop_registry:
        out.flops, out.flops_source = int(counter.get_total_flops()), "flop_counter"
    elif opname in ATTENTION_FORWARD and len(tensors) >= 3:
        from torch.utils.flop_counter import sdpa_flop_count

        q, k, v = (list(t.shape) for t, _ in tensors[:3])
        out.flops, out.flops_source = int(sdpa_flop_count(q, k, v)), \
            "flop_counter's attention count (Q K^T and P V: 4 x batch x heads x L x S x E; softmax not counted)"
    elif torch.Tag.pointwise in getattr(overload, "tags", ()):
        out.flops, out.flops_source = out_elems * FLOPS_PER_ELEMENT["pointwise"], \
            "pointwise estimate: 1 FLOP per output element"
    elif opname in SOFTMAX_FAMILY:
        out.flops, out.flops_source = in_elems * FLOPS_PER_ELEMENT["softmax"], \
            "estimate: 5 FLOPs per element (max, subtract, exp, sum, divide; exp counted as 1)"
    elif base in REDUCTIONS:
        out.flops, out.flops_source = in_elems * FLOPS_PER_ELEMENT["reduction"], \
            "estimate: 1 FLOP per input element"
    return out


def estimate_all(rows: list[dict[str, Any]]) -> list[Work]:
    return [estimate(r) for r in rows]


def main(argv: list[str]) -> int:
    with open(argv[0]) as fh:
        rows = json.load(fh)
    result = estimate_all(rows)
    with open(argv[1] + ".tmp", "w") as fh:
        json.dump([dataclasses.asdict(w) for w in result], fh)
    import os

    os.replace(argv[1] + ".tmp", argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
