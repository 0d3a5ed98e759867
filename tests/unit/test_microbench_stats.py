"""microbench.stats: exact values on tiny fixed samples, and verdicts on a fake timer with seeded noise."""

from __future__ import annotations

import math
import random

import pytest

from microbench import stats
from microbench.measure import Budget, abba_rounds
from microbench.stats import AbbaRound


# --------------------------------------------------------------------------
# A fake timer: per-call seconds with seeded noise, optional drift shared by A and B
# --------------------------------------------------------------------------

class Machine:
    """A shared machine: a load that drifts with every block measured (another engineer ramping up)."""

    def __init__(self, drift_per_block: float = 0.0) -> None:
        self.blocks = 0
        self.drift = drift_per_block

    def load(self) -> float:
        self.blocks += 1
        return 1.0 + self.drift * self.blocks


class FakeTimer:
    """Seconds per call = base * exp(N(0, sigma)), with a 1.5x spike in `spike_p` of the blocks."""

    def __init__(self, base_s: float, seed: int, sigma: float = 0.05, spike_p: float = 0.1,
                 machine: Machine | None = None) -> None:
        self.base = base_s
        self.rng = random.Random(seed)
        self.sigma = sigma
        self.spike_p = spike_p
        self.machine = machine or Machine()

    def __call__(self) -> float:
        t = self.base * math.exp(self.rng.gauss(0.0, self.sigma)) * self.machine.load()
        if self.rng.random() < self.spike_p:
            t *= 1.5
        return t


# --------------------------------------------------------------------------
# Quantiles, summaries
# --------------------------------------------------------------------------

def test_quantile_is_linear_interpolation():
    xs = [4.0, 1.0, 3.0, 2.0]              # sorted 1 2 3 4; positions q*(n-1)
    assert stats.quantile(xs, 0.5) == 2.5
    assert stats.quantile(xs, 0.25) == 1.75  # pos 0.75: 1 + 0.75*(2-1)
    assert stats.quantile(xs, 0.75) == 3.25  # pos 2.25: 3 + 0.25*(4-3)
    assert stats.quantile([7.0], 0.3) == 7.0


def test_quantile_matches_torch():
    torch = pytest.importorskip("torch")
    rng = random.Random(3)
    xs = [rng.lognormvariate(0, 0.3) for _ in range(37)]
    t = torch.tensor(xs, dtype=torch.float64)
    for q in (0.25, 0.5, 0.75):
        assert stats.quantile(xs, q) == pytest.approx(t.quantile(q).item(), rel=1e-12)


def test_summary_by_hand():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.median, s.p25, s.p75, s.iqr) == (3.0, 2.0, 4.0, 2.0)
    assert s.noise == pytest.approx(2 / 3)
    assert s.noisy
    quiet = stats.summarize([100.0, 101.0, 102.0, 103.0, 104.0])   # IQR 2 / median 102
    assert quiet.noise == pytest.approx(2 / 102)
    assert not quiet.noisy


def test_noisy_threshold_is_ten_percent_inclusive():
    at = stats.summarize([0.95, 0.95, 1.0, 1.05, 1.05])        # IQR 0.1, median 1.0
    assert at.noise == pytest.approx(0.10)
    assert at.noisy


# --------------------------------------------------------------------------
# Two saved files: noise floor from IQR/median
# --------------------------------------------------------------------------

def test_two_sided_floor_by_hand():
    assert stats.two_sided_floor(0.04, 0.08, min_floor=0.05) == pytest.approx(0.06)   # (4% + 8%) / 2
    assert stats.two_sided_floor(0.01, 0.02, min_floor=0.05) == 0.05                  # the minimum wins
    assert stats.two_sided_floor(0.01, 0.02, min_floor=0.0) == pytest.approx(0.015)


def test_ratio_outside_floor_is_real_both_ways():
    floor = 0.06
    assert stats.ratio_is_real(1.07, floor)
    assert stats.ratio_is_real(1 / 1.07, floor)
    assert not stats.ratio_is_real(1.05, floor)
    assert not stats.ratio_is_real(1 / 1.05, floor)
    assert stats.verdict(0.5, True) == "faster"
    assert stats.verdict(2.0, True) == "slower"
    assert stats.verdict(2.0, False) == "same"


# --------------------------------------------------------------------------
# Sign-test interval: exact order statistics
# --------------------------------------------------------------------------

def test_binomial_tail_exact():
    assert stats.binom_cdf_half(0, 6) == 1 / 64
    assert stats.binom_cdf_half(1, 6) == 7 / 64
    assert stats.binom_cdf_half(6, 6) == 1.0


@pytest.mark.parametrize("n, k, confidence", [
    (6, 1, 1 - 2 / 64),            # P(X<=0)=1/64: [x(1), x(6)]
    (8, 1, 1 - 2 / 256),           # P(X<=1)=9/256 -> 2*9/256 = 0.07 > 0.05, so k stays 1
    (10, 2, 1 - 2 * 11 / 1024),    # P(X<=1)=11/1024 -> [x(2), x(9)]
])
def test_sign_test_ci_order_statistics(n, k, confidence):
    xs = [float(i) for i in range(1, n + 1)]
    lo, hi, conf = stats.sign_test_ci(list(reversed(xs)), 0.95)
    assert (lo, hi) == (xs[k - 1], xs[n - k])
    assert conf == pytest.approx(confidence)


def test_sign_test_ci_needs_six_values_at_95():
    assert stats.sign_test_ci([1.0, 2.0, 3.0, 4.0, 5.0], 0.95) is None


# --------------------------------------------------------------------------
# ABBA on a tiny fixed sample, computed by hand
# --------------------------------------------------------------------------

# (A1, B1, B2, A2) per round. Per-round log-ratio r = ln(B1*B2/(A1*A2))/2:
#   R1 ln(2*2.1/(1*1.05))/2 = ln(4)/2 = ln 2      R2 ln(1.9*2.09/(1*1.1))/2 = ln(3.61)/2 = ln 1.9
#   R3 ln(2.04^2/1.02^2)/2 = ln 2                 R4 ln(2*2.04/(1*1.02))/2 = ln 2
#   R5 ln(2.1*2/(1.05*1))/2 = ln 2                R6 ln(2.2^2/1)/2 = ln 2.2
# Same-setting |ln(A2/A1)|, |ln(B2/B1)|: R1 ln1.05 ln1.05, R2 ln1.1 ln1.1, R3 0 0, R4 ln1.02 ln1.02,
#   R5 ln1.05 ln1.05, R6 0 0 -> sorted: 0 0 0 0 ln1.02 ln1.02 ln1.05 x4 ln1.1 x2; median = mean of the
#   6th and 7th = (ln1.02 + ln1.05)/2, so the measured floor is sqrt(1.02*1.05) - 1.
ROUNDS = [
    AbbaRound(1.00, 2.00, 2.10, 1.05),
    AbbaRound(1.00, 1.90, 2.09, 1.10),
    AbbaRound(1.02, 2.04, 2.04, 1.02),
    AbbaRound(1.00, 2.00, 2.04, 1.02),
    AbbaRound(1.05, 2.10, 2.00, 1.00),
    AbbaRound(1.00, 2.20, 2.20, 1.00),
]


def test_abba_by_hand():
    s = stats.abba_summary(ROUNDS, method="sign", confidence=0.95, min_effect=0.01)
    assert sorted(s.log_ratios) == pytest.approx(sorted([math.log(2)] * 4 + [math.log(1.9), math.log(2.2)]))
    assert s.ratio == pytest.approx(2.0)                      # median of {ln1.9, ln2 x4, ln2.2} = ln 2
    assert (s.ci_low, s.ci_high) == (pytest.approx(1.9), pytest.approx(2.2))   # [x(1), x(6)] for n = 6
    assert s.confidence == pytest.approx(1 - 2 / 64)
    assert s.measured_floor == pytest.approx(math.sqrt(1.02 * 1.05) - 1)      # 3.489%
    assert s.floor == pytest.approx(math.sqrt(1.02 * 1.05) - 1)
    assert s.real and s.verdict == "slower"


def test_abba_minimum_effect_raises_the_floor():
    s = stats.abba_summary(ROUNDS, min_effect=0.5)
    assert s.floor == 0.5
    assert s.real                                             # ln 2 > ln 1.5
    s = stats.abba_summary(ROUNDS, min_effect=1.5)            # floor 150%: 2x is inside 1/2.5 .. 2.5
    assert not s.real and s.verdict == "same"


def test_abba_too_few_rounds_is_never_real():
    s = stats.abba_summary(ROUNDS[:5])
    assert s.ci_low is None and not s.real


def test_bootstrap_ci_is_seeded_and_brackets_the_median():
    logs = [r.log_ratio for r in ROUNDS]
    first = stats.bootstrap_median_ci(logs, 0.95, resamples=500, seed=7)
    assert first == stats.bootstrap_median_ci(logs, 0.95, resamples=500, seed=7)
    lo, hi, conf = first
    assert min(logs) <= lo <= stats.median(logs) <= hi <= max(logs)
    assert conf == 0.95


# --------------------------------------------------------------------------
# Verdicts on the fake timer
# --------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["sign", "bootstrap"])
def test_aa_is_not_real(method):
    for seed in range(20):
        a = FakeTimer(1e-3, seed=2 * seed)
        b = FakeTimer(1e-3, seed=2 * seed + 1)
        s = stats.abba_summary(abba_rounds(a, b, 20), method=method, seed=seed)
        assert not s.real, (seed, s)
        assert s.verdict == "same"


@pytest.mark.parametrize("method", ["sign", "bootstrap"])
def test_two_x_is_real(method):
    for seed in range(20):
        a = FakeTimer(1e-3, seed=2 * seed)
        b = FakeTimer(2e-3, seed=2 * seed + 1)
        s = stats.abba_summary(abba_rounds(a, b, 20), method=method, seed=seed)
        assert s.real, (seed, s)
        assert s.verdict == "slower"
        assert s.ratio == pytest.approx(2.0, rel=0.1)
        assert s.ci_low < 2.0 * 1.1 and s.ci_high > 2.0 / 1.1


def test_abba_cancels_linear_drift():
    """Load rising 2% per block: A then B alone would show B 'slower'; ABBA rounds do not."""
    machine = Machine(drift_per_block=0.02)
    a = FakeTimer(1e-3, seed=1, sigma=0.0, spike_p=0.0, machine=machine)
    b = FakeTimer(1e-3, seed=2, sigma=0.0, spike_p=0.0, machine=machine)
    s = stats.abba_summary(abba_rounds(a, b, 12))
    assert s.ratio == pytest.approx(1.0, abs=0.002)
    assert not s.real


def test_abba_rounds_stop_when_the_budget_is_spent():
    now = [0.0]
    budget = Budget(1.0, clock=lambda: now[0])

    def a():
        now[0] += 0.1
        return 1e-3

    rounds = abba_rounds(a, a, rounds=50, budget=budget)
    # each round costs 0.4 s of fake time: rounds start at 0, 0.4, 0.8; at 1.2 the budget is spent
    assert len(rounds) == 3
