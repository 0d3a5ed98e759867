"""Statistics for micro-benchmarks: pure functions, no clocks, no torch.

Contract
- `quantile` interpolates linearly between order statistics, the definition
  `torch.quantile` (and so `torch.utils.benchmark.Measurement`) uses, so our
  median and IQR equal the Measurement's for the same times.
- `summarize(times)` -> median, IQR, noise (IQR/median) and the `noisy` flag at
  IQR/median >= 10%, the threshold at which `Measurement` starts warning.
- Two saved results (`compare A.json B.json`): each side carries only its
  median and IQR, so the noise floor of the comparison is
  `max(min_floor, (IQR_A/median_A + IQR_B/median_B) / 2)`, i.e. the ratio must
  leave the band where the two interquartile boxes would still overlap
  (half an IQR on each side), and never less than `min_floor` because
  within-run spread understates the run-to-run drift of a shared machine.
  A change is real when `B/A > 1 + floor` or `B/A < 1 / (1 + floor)`.
- Interleaved A/B (`abba_summary`): each round measures A, B, B, A. The
  round's log-ratio `r = ln(B1*B2 / (A1*A2)) / 2` cancels any drift that is
  linear over the round. The estimate is `exp(median(r))`, its confidence
  interval comes from the sign test (distribution-free order statistics) or a
  seeded percentile bootstrap of the median. The noise floor is the typical
  size of a same-setting difference inside one round,
  `exp(median(|ln(A2/A1)|, |ln(B2/B1)|)) - 1`, raised to `min_effect` if lower.
  The change is real only when the interval excludes 1 AND the estimate is
  outside the noise floor.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Sequence

NOISY_THRESHOLD = 0.10       # IQR/median at which a measurement is flagged noisy
DEFAULT_MIN_FLOOR = 0.05     # saved-file comparisons: floor never below 5%
DEFAULT_MIN_EFFECT = 0.01    # interleaved comparisons: effects below 1% are not called


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (torch.quantile / numpy 'linear')."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


@dataclass(frozen=True)
class Summary:
    """Spread of one measurement's per-call times (seconds)."""
    n: int
    median: float
    p25: float
    p75: float

    @property
    def iqr(self) -> float:
        return self.p75 - self.p25

    @property
    def noise(self) -> float:
        """IQR / median (a fraction)."""
        return self.iqr / self.median if self.median > 0 else math.inf

    @property
    def noisy(self) -> bool:
        return self.noise >= NOISY_THRESHOLD


def summarize(times: Sequence[float]) -> Summary:
    return Summary(n=len(times), median=quantile(times, 0.5),
                   p25=quantile(times, 0.25), p75=quantile(times, 0.75))


# --------------------------------------------------------------------------
# Two saved files: noise floor from each side's IQR/median
# --------------------------------------------------------------------------

def two_sided_floor(noise_a: float, noise_b: float, min_floor: float = DEFAULT_MIN_FLOOR) -> float:
    """Noise floor (fraction) for comparing two medians known with IQR/median noise_a, noise_b."""
    return max(min_floor, (noise_a + noise_b) / 2.0)


def ratio_is_real(ratio: float, floor: float) -> bool:
    """A ratio is a real change when it lies outside [1/(1+floor), 1+floor]."""
    return abs(math.log(ratio)) > math.log1p(floor)


def verdict(ratio: float, real: bool, lower_is_better: bool = True) -> str:
    """'faster', 'slower' or 'same' for a B/A ratio of times."""
    if not real:
        return "same"
    return "faster" if (ratio < 1) == lower_is_better else "slower"


# --------------------------------------------------------------------------
# Interleaved ABBA rounds
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class AbbaRound:
    """Per-call times (seconds) of one A, B, B, A round."""
    a1: float
    b1: float
    b2: float
    a2: float

    @property
    def log_ratio(self) -> float:
        return 0.5 * (math.log(self.b1) + math.log(self.b2) - math.log(self.a1) - math.log(self.a2))

    @property
    def same_setting_log_ratios(self) -> tuple[float, float]:
        return (math.log(self.a2 / self.a1), math.log(self.b2 / self.b1))


def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exact."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(0, min(k, n) + 1)) / 2.0 ** n


def sign_test_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Distribution-free CI for the median: (low, high, achieved confidence).

    [x_(k), x_(n+1-k)] (1-based order statistics) covers the median with
    probability 1 - 2 P(Bin(n, 1/2) <= k-1); k is the largest index whose
    coverage is still >= `confidence`. None when n is too small (n < 6 at 95%).
    """
    xs = sorted(values)
    n = len(xs)
    alpha = 1.0 - confidence
    best = None
    for k in range(1, n // 2 + 1):
        tail = 2.0 * binom_cdf_half(k - 1, n)
        if tail <= alpha + 1e-12:
            best = (xs[k - 1], xs[n - k], 1.0 - tail)
        else:
            break
    return best


def bootstrap_median_ci(values: Sequence[float], confidence: float = 0.95, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float, float]:
    """Seeded percentile bootstrap of the median: (low, high, nominal confidence)."""
    if not values:
        raise ValueError("bootstrap of an empty sequence")
    rng = random.Random(seed)
    xs = list(values)
    n = len(xs)
    meds = [median([xs[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples)]
    alpha = 1.0 - confidence
    return quantile(meds, alpha / 2), quantile(meds, 1 - alpha / 2), confidence


def signed_rank_null(n: int) -> list[float]:
    """P(T = t), t = 0..n(n+1)/2, for Wilcoxon's signed-rank statistic T under H0 (exact, no ties)."""
    counts = [1]
    for i in range(1, n + 1):
        nxt = counts + [0] * i
        for t, c in enumerate(counts):
            nxt[t + i] += c
        counts = nxt
    total = 2.0 ** n
    return [c / total for c in counts]


def signed_rank_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Hodges-Lehmann interval for the centre of a symmetric distribution: (low, high, achieved confidence).

    The Walsh averages (x_i + x_j) / 2, i <= j, sorted: [W_(c), W_(M+1-c)] (1-based, M = n(n+1)/2)
    covers the centre with probability 1 - 2 P(T <= c - 1), T Wilcoxon's signed-rank statistic; c is
    the largest index whose coverage is still >= `confidence`. It assumes a symmetric spread of the
    per-round log-ratios (the sign test does not), and in exchange uses their sizes, not only their signs:
    a narrower interval for the same rounds. None when n is too small (n < 6 at 95%).
    """
    xs = list(values)
    n = len(xs)
    if n == 0:
        return None
    walsh = sorted((xs[i] + xs[j]) / 2.0 for i in range(n) for j in range(i, n))
    pmf = signed_rank_null(n)
    alpha = 1.0 - confidence
    best = None
    cdf = 0.0
    for c in range(1, len(walsh) // 2 + 1):
        cdf += pmf[c - 1]                       # P(T <= c - 1)
        if 2.0 * cdf <= alpha + 1e-12:
            best = (walsh[c - 1], walsh[len(walsh) - c], 1.0 - 2.0 * cdf)
        else:
            break
    return best


def hodges_lehmann(values: Sequence[float]) -> float:
    xs = list(values)
    return median([(xs[i] + xs[j]) / 2.0 for i in range(len(xs)) for j in range(i, len(xs))])


CI_METHODS = ("sign", "bootstrap", "signed-rank")


@dataclass
class AbbaSummary:
    rounds: int
    ratio: float                 # B/A per call, exp(median log-ratio)
    ci_low: float | None         # B/A, None when too few rounds for an interval
    ci_high: float | None
    confidence: float | None     # achieved (sign test) or nominal (bootstrap)
    method: str                  # "sign" or "bootstrap"
    measured_floor: float        # exp(median |same-setting log-ratio|) - 1
    floor: float                 # max(measured_floor, min_effect)
    min_effect: float
    real: bool
    verdict: str                 # faster / slower / same
    log_ratios: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds, "ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high,
            "confidence": self.confidence, "ci_method": self.method,
            "noise_floor_pct": 100.0 * self.floor, "measured_noise_floor_pct": 100.0 * self.measured_floor,
            "min_effect_pct": 100.0 * self.min_effect, "real": self.real, "verdict": self.verdict,
            "log_ratios": self.log_ratios,
        }


def abba_summary(rounds: Sequence[AbbaRound], *, method: str = "sign", confidence: float = 0.95,
                 min_effect: float = DEFAULT_MIN_EFFECT, seed: int = 0, resamples: int = 2000,
                 measured_floor: bool = True) -> AbbaSummary:
    """`measured_floor=False`: the floor is `min_effect` alone (the interval does the rest)."""
    if not rounds:
        raise ValueError("no rounds")
    logs = [r.log_ratio for r in rounds]
    est = median(logs)
    if method == "sign":
        ci = sign_test_ci(logs, confidence)
    elif method == "bootstrap":
        ci = bootstrap_median_ci(logs, confidence, resamples=resamples, seed=seed)
    elif method == "signed-rank":
        ci = signed_rank_ci(logs, confidence)
        est = hodges_lehmann(logs)
    else:
        raise ValueError(f"unknown CI method {method!r}")
    same = [abs(x) for r in rounds for x in r.same_setting_log_ratios]
    measured = math.expm1(median(same))
    floor = max(measured, min_effect) if measured_floor else min_effect
    measured_floor = measured
    if ci is None:
        lo = hi = conf = None
        excludes_one = False
    else:
        lo, hi, conf = math.exp(ci[0]), math.exp(ci[1]), ci[2]
        excludes_one = ci[0] > 0 or ci[1] < 0
    ratio = math.exp(est)
    real = excludes_one and ratio_is_real(ratio, floor)
    return AbbaSummary(rounds=len(rounds), ratio=ratio, ci_low=lo, ci_high=hi, confidence=conf, method=method,
                       measured_floor=measured_floor, floor=floor, min_effect=min_effect, real=real,
                       verdict=verdict(ratio, real), log_ratios=logs)
