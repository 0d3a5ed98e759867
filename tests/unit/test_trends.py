"""diagnose/trends.py: step time and call sites' inputs against the step (issue 31), on planted series."""

from __future__ import annotations

import random

from diagnose.trends import DRIFT_MIN_PCT, drift, line, site_trends


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


def test_a_growing_window_whose_later_half_a_burst_flattened_still_drifts():
    # every step costs more than the last (examples/growing_bank.py: +106% over 40 steps in a fresh clone), and a
    # burst of load stretches steps 20-28: the later half's point slope reads 0.39x the window's, under the 0.5x
    # the warm-up test asks; its interval still reaches it, so the rise is drift, as the whole window says
    rng = random.Random(1)
    ms = [(0.006 + 0.0004 * i) * (1 + rng.uniform(-0.15, 0.15)) + (0.003 if 20 <= i < 29 else 0) for i in range(40)]
    d = drift(ms)
    assert d.slope.late_per_step < 0.5 * d.slope.per_step <= d.slope.late_ci_high, d.slope
    assert d.drifts and d.change_pct > 100, d
    # a ramp of first steps, then flat ones: the later half's interval stays under half the slope (warm-up)
    ramp = drift([0.006 + 0.0008 * i for i in range(10)] + [0.0138 * (1 + rng.uniform(-0.02, 0.02)) for _ in range(30)])
    assert ramp.slope.ci_low > 0 and ramp.slope.late_ci_high < 0.5 * ramp.slope.per_step and not ramp.drifts, ramp


def test_a_burst_of_load_at_the_windows_end_is_not_drift_and_a_long_window_still_is():
    # a clean MLP's 37 steps in a loaded clean-clone run (ms): flat at ~26, the last steps stretched by a neighbour;
    # least squares read +15% with its interval above 0, the median pairwise slope reads ~+6%
    ms = [30.56, 25.65, 25.99, 25.88, 27.11, 26.03, 25.97, 25.79, 25.68, 25.87, 27.49, 26.83, 26.0, 26.23, 26.12,
          26.23, 26.44, 26.27, 29.59, 27.17, 27.82, 26.27, 26.41, 30.42, 31.1, 26.61, 26.38, 26.9, 29.66, 26.95, 26.57,
          27.76, 27.02, 30.33, 34.7, 38.11, 26.13]
    times = [m / 1e3 for m in ms]
    slope, low, _ = line(times)
    assert low > 0 and 100 * slope * (len(times) - 1) / sorted(times)[len(times) // 2] > DRIFT_MIN_PCT
    burst = drift(times)
    assert not burst.drifts and burst.change_pct < DRIFT_MIN_PCT, burst
    # 5000 steps growing 20% with 30% noise and one step in ten doubled: fitted through 64 medians, still drift
    rng = random.Random(1)
    long = [(0.010 + 0.002 * i / 5000) * (1 + rng.uniform(-0.3, 0.3)) * (2 if rng.random() < 0.1 else 1)
            for i in range(5000)]
    grows = drift(long)
    assert grows.drifts and 15 < grows.change_pct < 25, grows


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
    doubt it, even with a call site whose time grew a little inside them (examples/rng_setup.py in a CI run: two
    sites +0.5 µs a step of a 4 µs rise); rising with it, they do not."""
    from diagnose.findings.trends import step_drift
    from diagnose.report.model import OperatorSummary, Report, SiteTrend, Steps, TargetInfo, TrendSlope

    base = [0.010 + 0.0001 * i for i in range(20)]
    rise = f"{drift(base).change_pct:+.0f}%"
    small = SiteTrend(source="m.py:3", library=None, module=None, function="cat", calls=20, share_pct=2.0,
                      time_grows=True, time_slope=TrendSlope(per_step=1e-6, ci_low=5e-7, ci_high=1.5e-6, late_per_step=1e-6))
    for op_times, sites, doubted in (([0.030] * 20, [], True), ([0.030] * 20, [small], True),
                                     ([0.030 + 0.0003 * i for i in range(20)], [], False)):
        report = Report(target=TargetInfo(script="m.py"), operator_summary=OperatorSummary(trends=sites),
                        steps=Steps(window_s=base, drift=drift(base), instrumented_drift=drift(op_times)))
        (f,) = step_drift(report)
        assert bool(f.doubts) == doubted, f.doubts
        assert f.location == ("m.py:3" if sites else None)  # the growing site is still named
        if doubted:
            assert "operator pass" in f.doubts[0] and f"against {rise} here" in f.doubts[0], f.doubts


def test_a_drift_the_operator_pass_neither_contradicts_nor_replicates_is_doubted():
    """findings/trends.py step_drift: the control (examples/mlp.py) once drifted +33% in its uninstrumented pass
    while its operator pass's steps were too noisy to say (+6%, an interval from -0.26 to +0.31 ms a step): its top
    reaches the rise, so it does not contradict it, and its interval reaches 0, so it does not replicate it
    either. Not confirmed; a second pass whose own line rises beyond its noise confirms it."""
    from diagnose.findings.trends import step_drift
    from diagnose.report.model import Report, Steps, TargetInfo

    base = [0.010 + 0.00015 * i for i in range(20)]
    rng = random.Random(7)
    noisy = [0.030 + rng.uniform(-0.012, 0.012) + 0.0002 * i for i in range(20)]  # rises, but inside its noise
    op = drift(noisy)
    assert op.slope.ci_low <= 0 < op.slope.ci_high, op.slope
    high = 100 * op.slope.ci_high * 19 / op.median_s
    assert high >= 0.5 * drift(base).change_pct  # not the contradicted case above
    report = Report(target=TargetInfo(script="m.py"), steps=Steps(window_s=base, drift=drift(base),
                                                                   instrumented_drift=op))
    (f,) = step_drift(report)
    assert f.doubts and "did not rise beyond its noise" in f.doubts[0] and "not confirmed" in f.doubts[0], f.doubts
    rising = drift([0.030 + 0.0005 * i for i in range(20)])
    assert rising.slope.ci_low > 0
    report.steps.instrumented_drift = rising
    (f,) = step_drift(report)
    assert f.doubts == [], f.doubts


def test_the_same_work_running_slower_is_doubted_and_more_work_or_more_python_is_not():
    """findings/trends.py step_drift: a CI run of examples/rng_setup.py (a fixed inference batch) drifted +24% in
    both passes, every site's time rising with its calls and input bytes unchanged: the same work running slower,
    the machine's. A site whose input grows (more work), or a step whose rise is outside its calls (a Python list
    scanned each step, the calls flat), is not doubted that way."""
    from diagnose.findings.trends import step_drift
    from diagnose.report.model import Report, Steps, TargetInfo
    from diagnose.trends import step_work

    n = 30
    base = [0.010 + 0.0001 * i for i in range(n)]  # uninstrumented: +29%
    op_times = [0.012 + 0.00012 * i for i in range(n)]  # the operator pass's steps rise with it

    def site(function, seconds, nbytes, calls=1):
        return {"source": "m.py:9", "library": None, "module": None, "function": function,
                "steps": [[seconds(i), nbytes(i), calls] for i in range(n)]}

    slower = [site("linear", lambda i: 0.008 + 0.0001 * i, lambda i: 4096, 3),
              site("cat", lambda i: 0.002 + 0.00002 * i, lambda i: 1024)]
    grows = [site("linear", lambda i: 0.008 + 0.0001 * i, lambda i: 4096 + 512 * i, 3),
             site("cat", lambda i: 0.002 + 0.00002 * i, lambda i: 1024)]
    python = [site("linear", lambda i: 0.008, lambda i: 4096, 3), site("cat", lambda i: 0.002, lambda i: 1024)]
    for sites, doubted in ((slower, True), (grows, False), (python, False)):
        work = step_work(sites, op_times)
        assert work.sites == 2 and work.calls_per_step == 4 and work.outside is not None, work
        assert work.same_work == (sites is not grows), work
        report = Report(target=TargetInfo(script="m.py"), steps=Steps(
            window_s=base, drift=drift(base), instrumented_drift=drift(op_times), instrumented_work=work))
        (f,) = step_drift(report)
        assert bool(f.doubts) == doubted, (sites[0]["function"], f.doubts)
        if doubted:
            assert "same 4 calls at 2 call sites" in f.doubts[0] and "machine" in f.doubts[0], f.doubts
    # the rise outside the calls: the Python between them rose, its calls flat
    work = step_work(python, op_times)
    assert work.calls.slope.ci_low <= 0 < work.outside.change_pct, work
    short = {"source": "m.py:9", "library": None, "module": None, "function": "cat", "steps": [[0.001, 1, 1]] * 5}
    assert step_work([], op_times) is None and step_work([short], op_times[:5]) is None  # no sites; 5 steps
