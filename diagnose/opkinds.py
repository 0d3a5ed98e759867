"""What an operator is, by its name: the one table the rules and the roofline read before judging it.

Random number generation, sorting, allocation, views and transcendental
functions each cost something that neither a FLOP count nor bytes describe
(layers/efficiency/roofline.py's docstring says why for each), so they get no
roofline verdict; a wrapper whose time is mostly in the operators it calls is
not a kernel.

`op_class(name)` puts an operator in a class (CLASSES, first match): the one
table every rule reads before it picks advice (findings/suggestions.py holds
the texts). Kinds that need more than the name are decided here too, from
plain values the rules pass in:
- `quantized_matmul` / `quantized_convolution` (quantized::linear*,
  quantized::linear_dynamic, onednn::qlinear*, quantized::conv*): int8 GEMMs
  and convolutions, the model's core compute, never element-wise;
  `weight_packing` (linear_prepack) is a quantised model's set-up;
- `low_precision(shapes, dtypes)`: an operator already computing in
  bfloat16 / float16, so "try bfloat16" is never its advice;
- `weight_init(name, module, calls, steps)`: an RNG filling a tensor in place
  outside any forward, less than once a step: set-up, never a suspect;
- autocast's weight casts are a copy kind (findings/copies.py: `aten::to`
  called by the GEMM itself, to a lower precision);
- `compiled`: a kernel torch.compile generated (COMPILED_KERNEL), already a
  fused loop over several operators: never told to fuse with torch.compile;
  `compiled_rng` when its loop draws random numbers (dropout's mask), which
  costs a generator step per element: not an activation-like observation.
Imports nothing of diagnose's: the ground floor.
"""

from __future__ import annotations

import re
from typing import Any

WRAPPER_SELF_FRACTION = 0.5
ATEN = re.compile(r"^[a-z_][a-z0-9_]*::\w+$")
NOT_KERNELS = ("autograd", "profiler", "torch", "Optimizer")
RNG = {"bernoulli", "bernoulli_", "binomial", "cauchy", "cauchy_", "dropout", "dropout_", "alpha_dropout",
       "alpha_dropout_", "feature_dropout", "feature_dropout_", "feature_alpha_dropout", "feature_alpha_dropout_",
       "native_dropout", "_fused_dropout", "_fill_mem_eff_dropout_mask_", "_cudnn_init_dropout_state",
       "normal_functional", "rrelu", "rrelu_", "exponential", "exponential_", "geometric",
       "geometric_", "log_normal", "log_normal_", "multinomial", "normal", "normal_", "poisson", "rand",
       "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm", "random", "random_",
       "rrelu_with_noise", "rrelu_with_noise_", "rrelu_with_noise_functional", "_standard_gamma",
       "_sample_dirichlet", "uniform", "uniform_"}
SORTING = {"sort", "argsort", "msort", "topk", "kthvalue", "unique", "_unique", "_unique2", "unique_consecutive",
           "unique_dim", "unique_dim_consecutive", "mode", "median", "nanmedian"}
ALLOCATION = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_"}
TRANSCENDENTAL = {f + s for f in ("gelu", "tanh", "sigmoid", "silu", "mish", "erf", "erfc", "erfinv", "exp", "exp2",
                                  "expm1", "log", "log2", "log10", "log1p", "softplus", "elu", "selu", "celu",
                                  "logsigmoid", "log_sigmoid_forward", "sin", "cos", "tan", "atan", "asin", "acos",
                                  "sinh", "cosh", "asinh", "acosh", "atanh", "pow", "rsqrt", "sqrt", "lgamma",
                                  "digamma", "hardswish", "hardsigmoid")
                  for s in ("", "_", "_backward")}
VIEWS = {"alias", "as_strided", "chunk", "detach", "diagonal", "expand", "expand_as", "flatten", "lift_fresh",
         "movedim", "narrow", "permute", "reshape", "_reshape_alias", "select", "slice", "split",
         "split_with_sizes", "squeeze", "swapaxes", "t", "transpose", "unbind", "unflatten", "unfold", "unsqueeze",
         "view", "view_as", "_unsafe_view"}
NO_VERDICT = (
    (RNG, "random number generation: each element costs a generator step, compute that neither the FLOP count "
          "nor the bytes written describe, so there is no roofline verdict"),
    (SORTING, "sorting/selection: comparisons and data-dependent branches, no FLOPs; bytes say nothing about "
              "them, so there is no roofline verdict"),
    (ALLOCATION, "allocation: touches no data (the first writer pays the page faults), so there is no roofline "
                 "verdict"),
    (VIEWS, "a view: metadata only, no data moves (its time is per-call dispatch), so there is no roofline "
            "verdict"),
    (TRANSCENDENTAL, "a transcendental element-wise function: some 10-30 FLOPs per element that the FLOP count "
                     "does not see, so neither roof describes it: no roofline verdict"),
)


def no_verdict(name: str) -> str | None:
    """Why an operator gets no roofline verdict (see the module docstring), or None when it gets one."""
    base = name.split("::")[-1].split(".")[0]
    return next((why for names, why in NO_VERDICT if base in names), None)


def tensor_dtypes(shapes: list[Any], dtypes: list[str]) -> set[str]:
    """Dtypes of the tensor inputs with at least one dimension (a Python scalar is recorded as a 0-d double)."""
    return {d for s, d in zip(shapes or [], dtypes or []) if isinstance(s, list) and len(s) > 0}


GEMMS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "_mkl_linear", "mkldnn_linear")


def _names(*names: str) -> re.Pattern:
    return re.compile(r"^aten::(" + "|".join(names) + r")$")


MATMUL = _names(*GEMMS)  # matrix multiplies whose (M, N, K) matmul_dims reads from the input shapes
# a kernel torch.compile generated (inductor: `cpp_fused_add_gelu_0`, with the kernel profile on
# `graph_0_cpp_fused_add_gelu_0`; `triton_` on GPUs): a loop over several fused operators, recorded without shapes
COMPILED_KERNEL = re.compile(r"^(graph_\d+_)?(cpp|triton)_\w+$")
# one that draws random numbers (dropout's mask): a generator step per element, far more than its bytes cost
COMPILED_RNG = re.compile(r"^(graph_\d+_)?(cpp|triton)_\w*(dropout|bernoulli|rand|normal|uniform)\w*$")
CLASSES: list[tuple[str, re.Pattern]] = [
    ("compiled_rng", COMPILED_RNG),
    ("compiled", COMPILED_KERNEL),
    ("matmul", _names(*GEMMS, "einsum", "mkldnn_matmul")),
    # int8 GEMMs of quantised models: dynamic (quantized::linear_dynamic), static (quantized::linear), oneDNN's
    # (onednn::qlinear_pointwise); their weight packing (linear_prepack) is set-up, its own kind below
    ("quantized_matmul", re.compile(r"^(quantized|_quantized|onednn)::(q?linear|matmul)(?![\w.]*(prepack|unpack))[\w.]*$")),
    ("quantized_convolution", re.compile(r"^(quantized|_quantized|onednn)::q?conv(?![\w.]*(prepack|unpack))[\w.]*$")),
    ("weight_packing", re.compile(r"^(quantized|_quantized|onednn)::\w*(prepack|unpack)\w*$")),
    ("quantize", _names(r"quantize_per_tensor\w*", r"quantize_per_channel\w*", r"dequantize\w*",
                        r"_empty_affine_quantized", r"_empty_per_channel_affine_quantized")),
    ("attention", _names(r"_?scaled_dot_product\w*", r"_flash_attention\w*", r"_efficient_attention\w*")),
    ("convolution", _names(r"_?convolution\w*", r"conv\w*", r"mkldnn_convolution\w*", r"_slow_conv\w*",
                           r"thnn_conv\w*", r"_nnpack\w*")),
    ("rnn", _names(r"lstm\w*", r"gru\w*", r"rnn_tanh\w*", r"rnn_relu\w*", r"_thnn_fused_\w*", r"mkldnn_rnn\w*")),
    ("pooling", _names(r"max_pool\w*", r"avg_pool\w*", r"adaptive_\w*pool\w*", r"mkldnn_max_pool\w*")),
    ("batch_norm", _names(r"native_batch_norm\w*", r"batch_norm\w*", r"_batch_norm\w*",
                          r"_native_batch_norm_legit\w*")),
    ("layer_norm", _names(r"native_layer_norm\w*", r"layer_norm", r"native_group_norm\w*", r"group_norm",
                          r"rms_norm", r"_fused_rms_norm\w*")),
    ("softmax", _names(r"_?softmax", r"_?log_softmax", r"_softmax_backward_data", r"_log_softmax_backward_data")),
    ("activation", _names(r"gelu_?", r"gelu_backward", r"relu_?", r"threshold_backward", r"silu_?",
                          r"silu_backward", r"sigmoid_?", r"sigmoid_backward", r"hardswish_?", r"mish_?",
                          r"leaky_relu_?", r"elu_?", r"clamp_min_?")),
    ("activation_chain", _names(r"tanh_?", r"pow_?", r"erf_?", r"tanh_backward")),
    ("reduction", _names(r"sum", r"mean", r"std", r"var", r"std_mean", r"var_mean", r"amax", r"amin", r"norm",
                         r"linalg_vector_norm", r"logsumexp", r"prod", r"argmax", r"argmin")),
    ("sort", _names(r"sort", r"argsort", r"msort", r"topk", r"kthvalue", r"_?unique\w*", r"mode", r"median",
                    r"nanmedian")),
    ("scan", _names(r"cumsum_?", r"cumprod_?", r"cummax", r"cummin", r"nonzero\w*", r"searchsorted",
                    r"bucketize")),
    ("gather", _names(r"embedding\w*", r"_embedding_bag\w*", r"index_select", r"gather", r"take\w*",
                      r"index", r"index_add_?", r"scatter\w*", r"masked_select")),
    ("cat", _names(r"cat", r"_cat", r"stack")),
    ("copy", re.compile(r"^aten::(copy_|clone|contiguous|_to_copy|to)$")),
    ("rng", _names(*(re.escape(n) for n in sorted(RNG)))),
    ("creation", _names(r"empty\w*", r"zeros\w*", r"ones\w*", r"full\w*", r"fill_", r"zero_", r"arange",
                        r"linspace", r"new_\w+")),
    ("pad", _names(r"pad", r"constant_pad_nd", r"reflection_pad\w*", r"replication_pad\w*")),
]
# where a healthy model spends its time
COMPUTE_CLASSES = {"matmul", "attention", "convolution", "rnn", "quantized_matmul", "quantized_convolution"}
QUANTIZED_CLASSES = {"quantized_matmul", "quantized_convolution"}
# the profiler's names of the half-size float dtypes a model computes in (matmul and convolution rows)
LOW_PRECISION = {"c10::BFloat16": "bfloat16", "c10::Half": "float16"}
FLOAT32 = "float"
# one fused kernel already (an activation function, a loop torch.compile generated): part of a healthy model's
# time, though it only reads and writes its tensors
ACTIVATION_CLASSES = {"activation", "compiled"}
CHANNELS_LAST_CLASSES = {"convolution", "pooling", "batch_norm"}


def op_class(name: str) -> str:
    for cls, pattern in CLASSES:
        if pattern.match(name or ""):
            return cls
    return "view" if (name or "").split("::")[-1] in VIEWS else "elementwise"


def is_compute(name: str) -> bool:
    return op_class(name) in COMPUTE_CLASSES




def low_precision(shapes: list[Any], dtypes: list[str]) -> str | None:
    """"bfloat16" / "float16" when an operator's tensor inputs are in one (it already computes in it), else None."""
    return next((LOW_PRECISION[d] for d in sorted(tensor_dtypes(shapes, dtypes)) if d in LOW_PRECISION), None)


def weight_init(name: str, module: str | None, calls: int, steps: int | None) -> bool:
    """Weight initialisation during set-up: a random number generator filling a tensor in place (nn.init's
    normal_/uniform_, trunc_normal_'s uniform_) outside any module's forward, fewer times than the recorded steps
    (with no steps, any such call). Set-up, not the loop: never a suspect to benchmark or blame on its kernel."""
    base = name.split("::")[-1]
    if base not in RNG or not base.endswith("_") or module:
        return False
    return steps is None or calls < steps
