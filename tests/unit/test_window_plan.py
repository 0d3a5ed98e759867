"""The first pass's window is stretched to steps.MIN_WINDOW_S only when a layer that runs needs it; a re-run compared
only with re-runs measures its first steps up to steps.RERUN_WINDOW_S."""

from __future__ import annotations

from diagnose import steps
from diagnose.config import Config
from diagnose.layers import LAYERS, OPT_IN
from diagnose.layers.whatif import _pass_seconds
from diagnose.protocol import WindowSpec
from diagnose.report.model import IterationStats, Report, Run, Steps, TargetInfo
from diagnose.session import Plan, Window
from diagnose.target import Target


def _plan(**options) -> tuple[Plan, Report]:
    report = Report(target=TargetInfo(script="m.py"))
    return Plan.of(Config(**options), report), report


def test_only_a_layer_that_samples_or_re_runs_the_window_stretches_it():
    # the operator, call-graph, micro-benchmark and roofline layers read the window's steps, whatever their number
    assert not _plan(layers=("operators", "python", "microbench", "efficiency"))[0].long_window
    # the thread sampler samples it (0.5 s of samples), the doctor's and what-if's trials re-run it
    assert _plan(layers=("operators", "threads"))[0].long_window
    assert _plan(layers=("doctor",))[0].long_window
    assert _plan(layers=("operators",), what_if=("compile",))[0].long_window
    # a layer that cannot run here (perf counters on a VM without them) is skipped, and stretches nothing
    plan, report = _plan(layers=("operators", "counters"))
    assert plan.long_window == (report.layers.get("counters") is None)


def test_the_first_window_is_steps_long_unless_asked_to_last():
    target = Target(script="m.py")
    config = Config(steps=7)
    assert Window.first(target, config).spec.min_window_s == steps.MIN_WINDOW_S
    short = Window.first(target, config, long=False).spec
    assert short.min_window_s == 0.0 and short.steps == 7 and short.find_loop


def test_a_re_run_compared_only_with_re_runs_measures_about_ten_seconds_of_steps():
    window = Window(WindowSpec(5, 20), expect_steps=True)
    # a Whisper transcription loop's 1.8 s steps: 6 of the 20 (10.8 s), the window's first ones, after the same skip
    capped = window.capped(1.8)
    assert (capped.spec.skip, capped.spec.steps, capped.expect_steps) == (5, 6, True)
    assert window.capped(30.0).spec.steps == steps.RERUN_MIN_STEPS  # at least 5 steps, however long
    # steps short enough that the window lasts under 10 s: the window itself, unchanged (every gallery example)
    assert window.capped(0.5) is window and window.capped(0.1) is window
    assert window.capped(None) is window and window.capped(0.0) is window
    # the whole run (no steps), function mode: nothing to cap
    assert Window(None, expect_steps=False).capped(5.0).spec is None
    fixed = Window(WindowSpec(5, 20), fixed=True)
    assert fixed.capped(5.0) is fixed
    # which layers compare their re-runs only with each other: the doctor's trials, what-if's passes, the sweep's
    # points; --repeat's runs are set beside the first pass's median, so they measure the whole window
    assert LAYERS["doctor"].compares_reruns and OPT_IN["what_if"].compares_reruns and OPT_IN["sweep"].compares_reruns
    assert not OPT_IN["repeat"].compares_reruns


def test_what_ifs_estimate_of_a_pass_leaves_out_the_steps_a_capped_re_run_does_not_measure():
    report = Report(target=TargetInfo(script="m.py"), run=Run(wall_s=30.0, pass_s=40.0))
    report.run.iterations = IterationStats(n=30, median_s=0.84, q1_s=0.8, q3_s=0.9, min_s=0.7, max_s=1.0)
    report.steps = Steps(window_first=6, window_last=35)
    assert _pass_seconds(report) == 40.0  # the whole window
    report.steps.rerun_steps = 12  # 18 of its 30 steps of 0.84 s not measured
    assert abs(_pass_seconds(report) - (40.0 - 18 * 0.84)) < 1e-9
