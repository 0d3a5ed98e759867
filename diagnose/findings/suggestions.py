"""What an operator is and what to try about it: the one place for operator classes and suggestion texts.

`op_class(name)` puts an ATen operator in a class (CLASSES, first match);
`suggestion_for(report, name, input_shapes, dtypes, source)` gives the
class's text, sharpened by what the report shows about this call:
- float64 tensors: use float32;
- convolution, pooling and batch norm on a 4-D input in the default NCHW
  layout (its recorded strides, else assumed): channels_last, once, for the
  model and the input;
- aten::cat at a line where another operator runs at many shapes whose one
  dimension grows step by step (`growth_at`: a generation loop; the profiler
  records no member shapes of cat's TensorList, so the cat itself cannot
  show it): a preallocated / static KV cache;
- a copy (copy_, clone, _to_copy): what the user wrote to cause it
  (diagnose/findings/copies.py): .contiguous(), .clone(), .to(), a copying
  reshape, an explicit .copy_(), indexed assignment, or a kernel's internal
  copy.
hot_operator, low_efficiency and sequential_operator all take their
operator-specific advice from here (low_efficiency and sequential_operator
add what their own measurements show: skinny matmul, fresh output, memory
bandwidth).

GROWTH_MIN_STEPS (4): the fewest distinct, consecutive values of the one
varying dimension that count as "grows step by step"; two or three shapes
are as often two batch sizes or a last partial batch.
"""

from __future__ import annotations

from typing import Any

from diagnose.findings import copies
from diagnose.opkinds import (  # noqa: F401 - the rules import the table's names from here too
    ACTIVATION_CLASSES,
    CHANNELS_LAST_CLASSES,
    CLASSES,
    COMPUTE_CLASSES,
    GEMMS,
    LOW_PRECISION,
    MATMUL,
    QUANTIZED_CLASSES,
    RNG,
    is_compute,
    low_precision,
    op_class,
    tensor_dtypes,
    weight_init,
)
from diagnose.report.model import OperatorRow, Report

GROWTH_MIN_STEPS = 4

CHECK_TEXT = ("Check it runs efficiently: intra-op threads vs usable CPUs (torch.set_num_threads), contiguous "
              "inputs, and bfloat16 (torch.autocast('cpu', dtype=torch.bfloat16)) on CPUs with AVX512-BF16/AMX; "
              "micro-benchmark it at this shape.")
COMPUTE_TEXT = "This is the model's core compute. " + CHECK_TEXT
# a GEMM or convolution that already computes in bfloat16/float16: the dtype is not the lever
LOW_PRECISION_TEXT = ("This is the model's core compute, already in {dtype}. Check it runs efficiently: intra-op "
                      "threads vs usable CPUs (torch.set_num_threads), contiguous inputs, enough rows per call (a "
                      "larger batch); the doctor's low_precision check says whether this CPU computes {dtype} "
                      "natively (without it, float32 is often faster); micro-benchmark it at this shape.")
QUANTIZED_TEXT = ("An int8 {what} of a quantised model: the model's core compute, already in its smallest dtype. "
                  "Check it runs efficiently: intra-op threads vs usable CPUs (torch.set_num_threads), and enough "
                  "rows per call (a larger batch amortises reading the int8 weights and, for dynamic quantisation, "
                  "quantising the activations on every call); the quantised engine is "
                  "torch.backends.quantized.engine (x86/fbgemm use VNNI instructions where the CPU has them); "
                  "micro-benchmark it at this shape.")
AUTOCAST_TEXT = {
    "weight": ("This is autocast casting {via}'s float32 {what} {shape} to {dtype} on every call (torch.autocast), "
               "not a copy of the model's own work: the same weights are converted again at every step. Convert the "
               "weights once instead: model.to(torch.bfloat16) (and the inputs with x.to(torch.bfloat16)), then "
               "drop autocast or keep it only where float32 is needed; or keep the cast out of the loop (convert a "
               "copy of the model once before it)."),
    "input": ("This is autocast casting {via}'s float32 input {shape} to {dtype} on every call (torch.autocast): "
              "produce the input in {dtype} where it is made (x.to(torch.bfloat16) once, in the data pipeline), or "
              "convert the model and its inputs once (model.to(torch.bfloat16)) and drop autocast."),
}
TEXT = {
    "matmul": COMPUTE_TEXT,
    "attention": "Fused attention is the model's core compute and grows with the sequence length. " + CHECK_TEXT,
    "convolution": COMPUTE_TEXT,
    "rnn": COMPUTE_TEXT + " Recurrent layers run step by step in time: a larger batch is the main lever.",
    "quantized_matmul": QUANTIZED_TEXT.format(what="GEMM (a quantised Linear)"),
    "quantized_convolution": QUANTIZED_TEXT.format(what="convolution"),
    "weight_packing": "Weight packing: a quantised layer's weights converted to its kernel's int8 layout, a one-off "
                      "set-up cost when the model is quantised or loaded. In the loop it means the model is "
                      "quantised again every step: quantise (or load) it once, outside the loop.",
    "quantize": "Conversions between float and int8 at the edges of a quantised region: keep consecutive "
                "quantised layers together (fewer QuantStub/DeQuantStub pairs) so the activations stay int8 "
                "between them, and quantise the input once.",
    "pooling": "Pooling is memory-bound: it reads every input element once; torch.compile can fuse it with the "
               "activation before it.",
    "batch_norm": "Batch norm is memory-bound (it reads and writes the whole activation). For inference, fold it "
                  "into the preceding convolution (model.eval(), then torch.ao.quantization.fuse_modules or "
                  "torch.compile).",
    "layer_norm": "Layer/group norm is memory-bound: two passes over each row for a few FLOPs per element. Fuse it "
                  "with the elementwise operators around it (torch.compile); bfloat16 activations halve its bytes. "
                  "Per-token calls in a generation loop are mostly per-call overhead: more sequences per step.",
    "softmax": "Softmax outside fused attention: when it is softmax(QK^T)V, call "
               "F.scaled_dot_product_attention (one fused kernel that never writes the [L, L] scores); otherwise "
               "fuse it with its scale and mask (torch.compile).",
    "compiled": "A kernel torch.compile generated: one loop over the operators its name lists, already fused, so "
                "fusing is not the lever. Its time is the bytes it reads and writes: running the compiled region in "
                "bfloat16 (torch.autocast) halves them. The profiler records no shapes for it; its operators' "
                "shapes are in the eager run (diagnose the script without torch.compile).",
    "compiled_rng": "A kernel torch.compile generated whose loop draws random numbers (dropout's mask, fused with "
                    "the operators its name lists): a generator step per element costs far more than the bytes "
                    "(dropout over 1M floats took 4.3 ms compiled, 8.4 ms eager, against 0.06 ms for a relu, on a "
                    "2-CPU AMD EPYC). Where the model does not need that dropout, p=0 removes the cost; "
                    "model.eval() turns dropout off for inference.",
    "activation": "An activation function, already one fused kernel: part of what a model computes. It reads "
                  "and writes the whole tensor, so it is memory-bound: fuse it into the matmul or convolution before "
                  "it (torch.compile does, and so do oneDNN's fused Linear+GELU paths), or run the block in "
                  "bfloat16 to halve its bytes.",
    "activation_chain": "Part of an activation written as a chain of elementwise operators (e.g. GELU's tanh "
                        "approximation 0.5*x*(1+tanh(c*(x+0.044715*x**3))): pow, mul, add, tanh, mul), each "
                        "reading and writing the whole tensor. Use the fused F.gelu(x, approximate='tanh') / "
                        "nn.GELU, or torch.compile the block so the chain runs as one kernel.",
    "reduction": "Reductions are memory-bound: one pass over the input for one FLOP per element. Get several "
                 "statistics from one pass (torch.var_mean / torch.std_mean instead of separate mean and std), "
                 "reduce whole batches at once (dim=, keepdim=True) rather than row by row, and fuse with the "
                 "neighbouring elementwise operators (torch.compile).",
    "sort": "Sorting is n log n comparisons and parallelises poorly on CPU: torch.topk or torch.kthvalue when only "
            "the top k (or one quantile) is used, sort once outside the loop, or sort smaller pieces.",
    "scan": "Scans (cumsum, nonzero, searchsorted) are sequential along their dimension: work on a smaller input, "
            "hoist them out of the loop, or batch several rows into one call.",
    "gather": "Gather/scatter (embedding lookups, index_select) is memory-bound and pays per call: batch the indices "
              "into one call (more tokens or sequences per step), keep index tensors contiguous int64, use "
              "nn.EmbeddingBag when the looked-up rows are summed, and bfloat16 tables halve the bytes.",
    "cat": "Concatenation copies every input into a new tensor: preallocate the output and write the pieces into "
           "its slices, or restructure so the pieces are produced in place.",
    "rng": "Random number generation costs a generator step per element. Draw once outside the loop and reuse, "
           "or draw a smaller tensor. If it is weight initialisation (normal_/uniform_ while a model is built), "
           "build the model once outside the measured code, or skip the init when loading weights "
           "(`with torch.device('meta'):` then model.load_state_dict(state, assign=True)).",
    # rng under a dropout (findings: a mask row whose calls come from aten::dropout and its kin): the model's own
    # dropout, which no loop hoists
    "dropout": "Dropout's mask: one random draw per element, on one thread in eager mode (the generator is "
               "sequential), so a dropout can cost as much as the matmul beside it. Where the model does not need "
               "that dropout, p=0 removes it (a transformers config's hidden_dropout_prob / "
               "attention_probs_dropout_prob = 0.0); model.eval() turns it off for inference; torch.compile draws "
               "the mask inside its fused kernel (dropout over 1M floats took 4.3 ms compiled, 8.4 ms eager, on a "
               "2-CPU AMD EPYC): `diagnose --what-if compile` measures that on your steps.",
    "creation": "Tensor creation in the hot path: allocate once outside the loop and reuse it (out=, in-place "
                "fill_/zero_).",
    "pad": "Padding copies the whole tensor: pad once (e.g. in the data pipeline) or use a convolution's own "
           "padding= argument.",
    "view": "A view: no data moves, its time is per-call dispatch overhead. Fewer, larger calls (batch the work) "
            "or torch.compile remove it.",
    "elementwise": "Elementwise operators are memory-bound: each reads and writes whole tensors. Fuse chains of "
                   "them (torch.compile), use in-place variants where safe, and check the inputs are contiguous.",
}
FLOAT64_TEXT = ("It runs in float64: half the fp32 SIMD rate and twice the bytes. Use float32 (model.float(), "
                "x.float(), and no torch.set_default_dtype(torch.float64)) unless you need the precision.")
CHANNELS_LAST_TEXT = ("Its input is a 4-D tensor in the default NCHW layout; oneDNN's convolution, pooling and "
                      "batch-norm kernels run faster in channels_last (NHWC) and reorder NCHW inputs on every "
                      "call. Convert once: `model = model.to(memory_format=torch.channels_last)` and "
                      "`x = x.to(memory_format=torch.channels_last)`.")
GROWING_CACHE_TEXT = (
    "This line runs {op} at {steps} shapes whose one dimension grows step by step ({lo} -> {hi}), as in "
    "token-by-token generation. If this cat grows a cache (a KV cache), it copies all of it at every step "
    "(quadratic in the length): preallocate the cache at the final length and write each step into its slot, "
    "a static KV cache (transformers: model.generate(..., cache_implementation=\"static\")), or in your own "
    "loop cache[:, :, t] = kv into a tensor allocated once.")
COPY_TEXT = {
    "contiguous": ".contiguous() on a transposed/permuted/sliced tensor copies all of it. Keep the layout the next "
                  "operator accepts (matmul and linear take transposed inputs without a copy), transpose weights "
                  "once when the model is built, or move the .contiguous() out of the loop.",
    "clone": ".clone() copies the whole tensor: drop it where the original is not modified afterwards, or clone "
             "once outside the loop.",
    "to": "A dtype/memory-format conversion (.to(), .float(), .double(), .type()) on every call: convert once, "
          "outside the loop (the model with model.to(...), the inputs where they are produced), and keep one "
          "dtype through the computation.",
    "reshape": "reshape/flatten of a non-contiguous tensor (after a transpose or permute) copies it: reorder the "
               "operations so the reshape sees a contiguous tensor, or keep the data in the layout you reshape to.",
    "copy_": "An explicit .copy_(): have the producer write into the destination directly (out=...), or use the "
             "source tensor itself if the destination is only read afterwards.",
    "indexed assignment": "Indexed assignment (out[i] = v) copies one slice per call, not a layout copy: in a "
                          "loop it is one small copy_ per row. Build the whole result in one operation: compute "
                          "all rows at once (broadcasting, dim= arguments), torch.stack/torch.cat the pieces "
                          "once, or index_copy_/index_put_ with all indices in one call.",
    "autocast": "autocast casts the float32 weights (and inputs) of each GEMM to the lower precision on every "
                "call: a copy every step that is not part of the model's work. Convert the weights once instead: "
                "model.to(torch.bfloat16) and the inputs with them, then drop autocast (or keep it only where float32 "
                "is needed); or keep the cast out of the loop.",
    "internal": "This is {via}'s own internal copy (a kernel copying its inputs or output), not a copy your code "
                "asks for: give {via} contiguous inputs in the dtype it computes in, or see {via}'s own row.",
}
# measured with torch 2.13: a Linear called 5 times under autocast cast its [1024, 1024] weight 5 times inside
# torch.inference_mode and once inside torch.no_grad (autocast's cache keeps a leaf weight's cast for the region)
AUTOCAST_INFERENCE_TEXT = ("Under torch.inference_mode, entered before autocast here, autocast does not cache these "
                           "casts: each weight is cast again on every call (a Linear called 5 times cast its weight "
                           "5 times; under torch.no_grad, once). If you keep autocast, torch.no_grad() in place of "
                           "torch.inference_mode() around it casts each weight once per autocast region.")
COPY_LABEL = {"contiguous": ".contiguous()", "clone": ".clone()", "to": ".to() conversions",
              "reshape": "copying reshapes", "copy_": "explicit .copy_()", "indexed assignment": "indexed assignment",
              "autocast": "autocast's casts", "internal": "kernels' internal copies"}
BANDWIDTH_TEXT = {
    "matmul_low_precision": "More rows per call cost almost nothing extra here, since the weights are read once "
                            "per call whatever the number of rows: batch several sequences (or several tokens per "
                            "step). Or read fewer bytes: int8 dynamic quantisation halves them again "
                            "(torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)).",
    "matmul": "More rows per call cost almost nothing extra here, since the weights are read once per call "
              "whatever the number of rows: batch several sequences (or several tokens per step). Or read "
              "fewer bytes: bfloat16 weights halve them (model.to(torch.bfloat16)), int8 dynamic quantisation "
              "quarters them (torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, "
              "dtype=torch.qint8)).",
    "other": "Read fewer bytes per result: fuse it with its neighbours so the data is read once (torch.compile), "
             "use a smaller dtype (bfloat16), or batch more work per call.",
}


def matmul_dims(name: str, shapes: list[list[int]]) -> tuple[int, int, int] | None:
    """(M, N, K) of a matmul row from its input shapes, batch folded out."""
    tensors = [s for s in shapes if isinstance(s, list) and len(s) >= 2]
    if name in ("aten::addmm", "aten::baddbmm", "aten::addbmm") and len(tensors) >= 3:
        tensors = tensors[1:]  # a 2-D or 3-D bias first (a 1-D one was never counted)
    if name in ("aten::linear", "aten::_mkl_linear", "aten::mkldnn_linear") and len(tensors) >= 2:
        x, w = tensors[0], tensors[1]
        m = 1
        for d in x[:-1]:
            m *= int(d)
        return m, w[0], x[-1]
    if len(tensors) < 2:
        return None
    a, b = tensors[0], tensors[1]
    return a[-2], b[-1], a[-1]


def _row(report: Report, name: str, input_shapes) -> OperatorRow | None:
    return next((r for r in report.operators if r.name == name and r.input_shapes == input_shapes), None)


def _nchw(report: Report, name: str, input_shapes) -> bool:
    """The first tensor input is 4-D and not channels_last (by its recorded strides; the default layout if none)."""
    first = next((s for s in input_shapes or [] if isinstance(s, list) and s and isinstance(s[0], int)), None)
    if first is None or len(first) != 4:
        return False
    if first[1] == 1 or first[2] * first[3] == 1:
        return False  # one channel, or 1x1 pixels: both layouts are the same bytes in the same order
    row = _row(report, name, input_shapes)
    strides = next((s for s in (row.input_strides or []) if isinstance(s, list) and len(s) == 4), None) \
        if row else None
    return strides is None or strides[1] != 1


def growth_at(report: Report, source: str | None) -> dict[str, Any] | None:
    """An operator at `source` seen at >= GROWTH_MIN_STEPS shapes that differ in one growing value, or None.

    Rows of one operator at one line with the same shape structure are compared number by number. For
    each position that varies, rows are grouped by their numbers with that position's value masked
    wherever it occurs in the row (k and v of attention grow together; a prefill row whose query has
    the same length falls into a group of its own); a group whose masked values are >= GROWTH_MIN_STEPS
    consecutive integers grew one step per iteration."""
    if not source:
        return None
    groups: dict[tuple, list[list[int]]] = {}
    for r in report.operators:
        if source != r.source and source not in {s.location for s in r.sources}:
            continue
        flat = [d for s in r.input_shapes or [] if isinstance(s, list) for d in s if isinstance(d, int)]
        structure = tuple(len(s) if isinstance(s, list) else -1 for s in r.input_shapes or [])
        groups.setdefault((r.name, structure), []).append(flat)
    best = None
    for (name, _), shapes in groups.items():
        varying = [i for i in range(len(shapes[0])) if len({s[i] for s in shapes}) > 1]
        runs: dict[tuple, set[int]] = {}
        for i in varying:
            for s in shapes:
                masked = tuple("*" if x == s[i] else x for x in s)
                runs.setdefault((i, masked), set()).add(s[i])
        for values in runs.values():
            lo, hi = min(values), max(values)
            if len(values) >= GROWTH_MIN_STEPS and hi - lo == len(values) - 1 \
                    and (best is None or len(values) > best["steps"]):
                best = {"op": name, "steps": len(values), "lo": lo, "hi": hi}
    return best


def suggestion_for(report: Report, name: str, input_shapes=None, dtypes=None, source: str | None = None) -> str:
    """What to try for this operator at these shapes (see the module docstring)."""
    cls = op_class(name)
    parts = []
    if "double" in tensor_dtypes(input_shapes or [], dtypes or []):
        parts.append(FLOAT64_TEXT)
    if cls in CHANNELS_LAST_CLASSES and _nchw(report, name, input_shapes):
        parts.append(CHANNELS_LAST_TEXT)
    growth = growth_at(report, source) if cls == "cat" else None
    if growth:
        parts.append(GROWING_CACHE_TEXT.format(**growth))
    elif cls == "copy":
        kind, via = copies.row_kind(report, name, input_shapes)
        if kind == "autocast":
            parts.append(autocast_text(report, via, input_shapes, dtypes))
        else:
            parts.append(COPY_TEXT[kind].format(via=via or "the calling operator"))
    elif cls in COMPUTE_CLASSES and cls not in QUANTIZED_CLASSES and low_precision(input_shapes, dtypes):
        parts.append(LOW_PRECISION_TEXT.format(dtype=low_precision(input_shapes, dtypes)))
    elif cls == "rng" and under_dropout(report, name, input_shapes):
        parts.append(TEXT["dropout"])
    else:
        parts.append(TEXT[cls])
    return " ".join(parts)


DROPOUTS = {f"aten::{n}" for n in RNG if "dropout" in n}  # the random-number operators that are a dropout


def under_dropout(report: Report, name: str, input_shapes) -> bool:
    """Most of this random-number row's time (at these shapes) is called by a dropout operator: its mask."""
    under = total = 0.0
    for row in report.operators:
        if row.name == name and row.input_shapes == input_shapes:
            for caller, us in (row.called_by or {}).items():
                total += us
                under += us if caller in DROPOUTS else 0.0
    return total > 0 and under > total / 2


def autocast_text(report: Report, via: str | None, input_shapes, dtypes) -> str:
    """autocast's cast of a GEMM's operand: a weight (or bias) when its shape is a parameter input of that GEMM's
    own rows (input 1 or 2 of aten::linear, a convolution's weight), else an input."""
    shape = next((s for s in input_shapes or [] if isinstance(s, list) and s), None)
    params = [r.input_shapes[1:3] for r in report.operators if r.name == via]
    what = "weight" if shape and len(shape) > 1 and any(shape == p[0] for p in params if p) else (
        "bias" if shape and any(len(p) > 1 and shape == p[1] for p in params) else None)
    dtype = next((LOW_PRECISION[d] for d in dtypes or [] if d in LOW_PRECISION), "a lower precision")
    return AUTOCAST_TEXT["weight" if what else "input"].format(
        via=via or "the GEMM", what=what or "input", shape=f"[{','.join(map(str, shape or []))}]", dtype=dtype)


def bandwidth_text(dims, input_shapes, dtypes) -> str:
    """BANDWIDTH_TEXT for a memory-bound operator: a GEMM already in bfloat16/float16 is not told to halve its
    bytes with bfloat16."""
    if not dims:
        return BANDWIDTH_TEXT["other"]
    return BANDWIDTH_TEXT["matmul_low_precision" if low_precision(input_shapes, dtypes) else "matmul"]


def recorded_steps(report: Report) -> int | None:
    """How many of the script's steps (or the function's calls) the operator pass recorded; None: no steps."""
    st = report.steps
    if st is None or st.detector is None:
        return report.profiled_steps() if report.target and report.target.function else None
    if st.window_first is not None and st.window_last is not None and not st.full_run:
        return st.window_last - st.window_first + 1
    return st.steps_seen or None


def weight_init_row(report: Report, row: OperatorRow) -> bool:
    """The row is weight initialisation during set-up (opkinds.weight_init), not the loop's work."""
    return weight_init(row.name, row.module, row.calls, recorded_steps(report))
