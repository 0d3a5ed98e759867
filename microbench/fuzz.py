"""Shapes around a given one, drawn with torch.utils.benchmark's Fuzzer.

Contract
- `fuzzed_shapes(shapes, n, seed, spread)`: every distinct dimension size d > 1
  of the given input shapes becomes one `FuzzedParameter`, log-uniform in
  [max(2, d / spread), d * spread]. Dimensions of equal size share the
  parameter, so sizes an operator needs equal (mm's inner K, an element-wise
  op's two inputs) stay equal; sizes 0 and 1 stay (broadcasting and empty
  tensors are other benchmarks). `Fuzzer(parameters, tensors=[], seed=seed)`
  draws; shapes equal to the given one or to an earlier draw are passed over
  until there are `n` (the same seed always gives the same list). A draw the
  operator rejects is reported by the caller, not redrawn.
- Whether a behaviour is specific to the given shape, judged on the measured
  rows, is the results file's derived `fuzz_verdicts` (microbench.results).
"""

from __future__ import annotations

DEFAULT_SPREAD = 2.0


def fuzzed_shapes(shapes: list[list[int]], n: int, seed: int, spread: float = DEFAULT_SPREAD,
                  max_draws: int = 1000) -> list[list[list[int]]]:
    from torch.utils.benchmark import FuzzedParameter, Fuzzer

    if n < 1:
        return []
    if spread <= 1.0:
        raise ValueError(f"spread must be > 1, got {spread}")
    sizes = sorted({d for s in shapes for d in s if d > 1})
    if not sizes:
        return []
    params = [FuzzedParameter(f"d{d}", minval=max(2, int(round(d / spread))), maxval=int(round(d * spread)),
                              distribution="loguniform") for d in sizes]
    fuzzer = Fuzzer(parameters=params, tensors=[], seed=seed)
    seen = {json_shapes(shapes)}
    out: list[list[list[int]]] = []
    for _, _, p in fuzzer.take(max_draws):
        drawn = [[d if d <= 1 else int(p[f"d{d}"]) for d in s] for s in shapes]
        key = json_shapes(drawn)
        if key in seen:
            continue
        seen.add(key)
        out.append(drawn)
        if len(out) == n:
            break
    return out


def json_shapes(shapes: list[list[int]]) -> str:
    return ",".join("[" + ",".join(str(d) for d in s) + "]" for s in shapes)

