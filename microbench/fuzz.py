"""Shapes around a given one, drawn with torch.utils.benchmark's Fuzzer, and whether a behaviour is specific to it.

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
- `verdicts(rows, fuzzed_flags)`: the rule that says whether a behaviour is specific to the
  given shape. For each thread count, the cost per unit of work (median time
  / FLOPs when torch counts FLOPs for every shape, else / bytes touched) of
  the given shape is compared with the fuzzed shapes' costs. It is
  **specific to the shape** when it lies outside the fuzzed range (below the
  cheapest or above the dearest) AND more than `MARGIN` (15%) from their
  median; otherwise it **holds around it**. At least `MIN_FUZZED` (3) fuzzed
  shapes must have been measured at that thread count, else "undecided".
  Contended rows are left out (they measure the busy machine).
"""

from __future__ import annotations

import math

from microbench.results import Row
from microbench.stats import median

MARGIN = 0.15
MIN_FUZZED = 3
DEFAULT_SPREAD = 2.0
PER_G = 1e9          # us per FLOP (byte) -> us per GFLOP (GB)
RULE = (f"per thread count, time per unit of work (FLOP, else byte) of the given shape against the fuzzed "
        f"shapes': specific to the shape when outside their range and more than {MARGIN:.0%} from their "
        f"median; else it holds around it (>= {MIN_FUZZED} fuzzed shapes measured, contended rows left out)")


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


def _cost(r: Row, unit: str) -> float | None:
    work = r.flops if unit == "flop" else r.bytes
    if not work or r.median_us <= 0 or r.contended:
        return None
    return r.median_us / work


def verdicts(rows: list[Row], fuzzed_flags: list[bool]) -> list[dict]:
    """One verdict per thread count (see the module docstring for the rule); `fuzzed_flags[i]` says
    whether rows[i] is at a fuzzed shape."""
    given = [r for r, f in zip(rows, fuzzed_flags) if not f]
    fuzzed = [r for r, f in zip(rows, fuzzed_flags) if f]
    if not given or not fuzzed:
        return []
    unit = "flop" if all(r.flops for r in rows) else "byte"
    per = "GFLOP" if unit == "flop" else "GB"
    out = []
    for t in sorted({r.threads for r in given}):
        g = next((r for r in given if r.threads == t), None)
        mine = _cost(g, unit) if g else None
        costs = [c for c in (_cost(r, unit) for r in fuzzed if r.threads == t) if c is not None]
        item = {"threads": t, "unit": per, "fuzzed_measured": len(costs),
                "given_us_per_unit": None if mine is None else round(mine * PER_G, 4),
                "fuzzed_median_us_per_unit": None, "fuzzed_min_us_per_unit": None,
                "fuzzed_max_us_per_unit": None, "ratio": None, "verdict": "undecided", "why": ""}
        if mine is None or len(costs) < MIN_FUZZED:
            item["why"] = (f"only {len(costs)} fuzzed shape(s) measured (need {MIN_FUZZED})" if mine is not None
                           else "the given shape has no usable measurement here")
            out.append(item)
            continue
        mid, lo, hi = median(costs), min(costs), max(costs)
        ratio = mine / mid
        item.update(fuzzed_median_us_per_unit=round(mid * PER_G, 4), fuzzed_min_us_per_unit=round(lo * PER_G, 4),
                    fuzzed_max_us_per_unit=round(hi * PER_G, 4), ratio=round(ratio, 3))
        outside = mine < lo or mine > hi
        if outside and abs(math.log(ratio)) > math.log1p(MARGIN):
            dearer = mine > hi
            item["verdict"] = "specific to the shape"
            item["why"] = (f"{'slower' if dearer else 'faster'} per {per} than all {len(costs)} shapes around it "
                           f"({ratio:.2f}x their median)")
        else:
            item["verdict"] = "holds around it"
            if outside:
                where = (f"{'below' if mine < lo else 'above'} all {len(costs)} shapes around it but within "
                         f"{MARGIN:.0%} of their median")
            else:
                where = f"inside the range of {len(costs)} shapes around it"
            item["why"] = f"{where}: {ratio:.2f}x their median (range {lo / mid:.2f}x-{hi / mid:.2f}x)"
        out.append(item)
    return out
