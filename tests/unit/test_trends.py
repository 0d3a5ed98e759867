"""diagnose/trends.py: step time and call sites' inputs against the step (issue 31), on planted series."""

from __future__ import annotations

import random

from diagnose.trends import DRIFT_MIN_PCT, drift, site_trends


def _noisy(values: list[float], spread: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [v * (1 + rng.uniform(-spread, spread)) for v in values]


def test_steps_that_grow_drift_and_steady_or_warming_steps_do_not():
    growing = drift(_noisy([0.010 + 0.0005 * i for i in range(20)], 0.05))  # +95% over the window
    assert growing.drifts and growing.slope.ci_low > 0 and growing.change_pct > DRIFT_MIN_PCT, growing
    steady = drift(_noisy([0.010] * 20, 0.2))  # 20% noise, no trend
    assert not steady.drifts and steady.verdict.startswith("no drift"), steady
    # three slow steps first (caches, allocator warm-up), then flat: the later half does not rise
    warming = drift([0.03, 0.025, 0.02] + _noisy([0.010] * 17, 0.02))
    assert not warming.drifts, warming
    # a small real slope under the 10% floor is not called drift
    small = drift([0.010 + 0.00002 * i for i in range(20)])
    assert small.slope.ci_low > 0 and small.change_pct < DRIFT_MIN_PCT and not small.drifts, small
    assert drift([0.01] * 4) is None  # too few steps


def test_a_site_whose_input_grows_is_kept_and_a_steady_one_is_not():
    cat = {"source": "t.py:9", "library": None, "module": None, "function": "cat",
           "steps": [[0.001 * (i + 1), (1 << 20) * (i + 4), 1] for i in range(20)]}
    linear = {"source": "t.py:7", "library": None, "module": "0", "function": "linear",
              "steps": [[0.005, 1 << 20, 3] for _ in range(20)]}
    (trend,) = site_trends([cat, linear])
    assert trend.function == "cat" and trend.bytes_grow and trend.time_grows, trend
    assert trend.bytes_slope.per_step == 1 << 20 and trend.calls == 20 and trend.bytes_per_step[0] == 4 << 20
    assert 0 < trend.share_pct < 100


def test_a_drift_the_operator_pass_did_not_see_is_doubted():
    """findings/trends.py step_drift: the uninstrumented pass drifts +19%; the operator pass's same steps, flat,
    doubt it (no call site grew either); rising with it, they do not."""
    from diagnose.findings.trends import step_drift
    from diagnose.report.model import Report, Steps, TargetInfo

    base = [0.010 + 0.0001 * i for i in range(20)]
    rise = f"{drift(base).change_pct:+.0f}%"
    for op_times, doubted in (([0.030] * 20, True), ([0.030 + 0.0003 * i for i in range(20)], False)):
        report = Report(target=TargetInfo(script="m.py"),
                        steps=Steps(window_s=base, drift=drift(base), instrumented_drift=drift(op_times)))
        (f,) = step_drift(report)
        assert bool(f.doubts) == doubted, f.doubts
        if doubted:
            assert "operator pass" in f.doubts[0] and f"against {rise} here" in f.doubts[0], f.doubts
