"""What an operator is, by its name: the one table the rules and the roofline read before judging it.

Random number generation, sorting, allocation, views and transcendental
functions each cost something that neither a FLOP count nor bytes describe
(layers/efficiency/roofline.py's docstring says why for each), so they get no
roofline verdict; a wrapper whose time is mostly in the operators it calls is
not a kernel. Imports nothing of diagnose's: the ground floor.
"""

from __future__ import annotations

import re
from typing import Any

WRAPPER_SELF_FRACTION = 0.5
ATEN = re.compile(r"^[a-z_][a-z0-9_]*::\w+$")
NOT_KERNELS = ("autograd", "profiler", "torch", "Optimizer")
RNG = {"bernoulli", "bernoulli_", "binomial", "cauchy", "cauchy_", "dropout", "alpha_dropout", "feature_dropout",
       "feature_alpha_dropout", "native_dropout", "_fused_dropout", "exponential", "exponential_", "geometric",
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
