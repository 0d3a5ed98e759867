"""The first pass's window is stretched to steps.MIN_WINDOW_S only when a layer that runs needs it."""

from __future__ import annotations

from diagnose import steps
from diagnose.config import Config
from diagnose.report.model import Report, TargetInfo
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
