"""diagnose attach's analysis on committed py-spy recordings (tests/data/attach/*.chrometrace.json).

Recorded on this project's 2-CPU machine with
`py-spy record --pid P --native --idle --threads --subprocesses --format chrometrace -d 1 -r 50` attached to
examples/mlp.py and examples/numpy_augment.py (from the repository root, 4 s after they started), and to
tests/data/attach/sleepy.py (busy 50 ms, sleep 50 ms, from /tmp/attach_exp).
"""

from __future__ import annotations

import random

import pytest

from diagnose import findings
from diagnose.attach import process, stacks
from diagnose.report.model import Report, TargetInfo
from diagnose.tools import pyspy
from diagnose.tools.pyspy import Frame, Span
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "attach"
RATE = 50.0
RECORDED_IN = "/work/wt/attach"  # the recordings' working directory: user files are shown relative to it


def _analysed(name: str, cwd: str = RECORDED_IN):
    spans = pyspy.read_chrometrace(str(DATA / f"{name}.chrometrace.json"))
    where = stacks.Where(cwd=cwd)
    pids = {s.pid for s in spans}
    return spans, where, stacks.analyse(spans, RATE, where, stacks.ops_names(), {(p, p) for p in pids})


def test_spans_carry_the_os_thread_id_and_name():
    spans = pyspy.read_chrometrace(str(DATA / "mlp.chrometrace.json"))
    assert spans and {(s.pid, s.tid, s.thread) for s in spans} == {(spans[0].pid, spans[0].pid, "MainThread")}
    assert all(s.dur_us > 0 and s.frames for s in spans)
    assert not any(not f.file and not f.line for s in spans for f in s.frames)  # the label frames are gone


def test_spans_close_at_the_next_change_of_the_same_thread():
    def ev(ph, name, ts, tid=1, file="a.py", line=1):
        return {"ph": ph, "name": name, "ts": ts, "pid": 7, "tid": tid, "args": {"filename": file, "line": line}}

    events = [ev("B", "thread (42): MainThread", 0, file="", line=0), ev("B", "main", 0), ev("B", "f", 0, line=2),
              ev("B", "g", 0, tid=2),  # another thread between: does not close thread 1's span
              ev("E", "f", 30, line=2), ev("B", "h", 30, line=3),
              ev("E", "h", 50, line=3), ev("E", "main", 50), ev("E", "thread (42): MainThread", 50, file="", line=0),
              ev("E", "g", 60, tid=2)]
    out = pyspy.spans(events)
    one = [s for s in out if s.tid == 42]
    assert [(s.start_us, s.dur_us, [f.name for f in s.frames]) for s in one] == [
        (0, 30, ["main", "f"]), (30, 20, ["main", "h"])]
    assert one[0].thread == "MainThread"
    assert [(s.tid, s.dur_us) for s in out if s.tid != 42] == [(2, 60)]  # no label: py-spy's thread id


def test_python_and_native_frames():
    assert pyspy.Frame("step", "/x/train.py", 30).python
    assert pyspy.Frame("_find_and_load", "<frozen importlib._bootstrap>", 1176).python
    assert not pyspy.Frame("at::_ops::mm::call", "/x/torch/lib/libtorch_cpu.so", 0).python


def test_operator_struct_names_map_to_the_operator_table_names():
    names = stacks.ops_names()
    assert stacks.op_name("add__Tensor", names) == "aten::add_"
    assert stacks.op_name("sum_dim_IntList", names) == "aten::sum"
    assert stacks.op_name("threshold_backward", names) == "aten::threshold_backward"
    assert stacks.op_name("not_an_op_xyz", names) == "aten::not_an_op_xyz"  # unknown: shown as it is


def test_mlp_operators_by_sampling_at_the_users_lines():
    _, _, a = _analysed("mlp")
    ops = {o.name: o for o in a.operators}
    # the recording's own numbers: 44 of 49 busy samples inside an operator, aten::mm first (backward's matmuls)
    assert 0 < a.operator_samples <= a.samples
    assert a.operators[0].name == "aten::mm" and ops["aten::mm"].source == "examples/mlp.py:30"  # loss.backward()
    assert ops["aten::addmm"].source == "examples/mlp.py:27"  # logits = model(inputs)
    assert abs(sum(o.share_pct for o in a.operators) - 100) < 1
    assert all(not o.name.endswith(("_Tensor", "_IntList")) for o in a.operators)
    assert ops["aten::mm"].function == "step" and ops["aten::mm"].native  # a BLAS/OpenMP frame below it


def test_mlp_steps_seen_but_not_timed_in_a_second_of_samples():
    # the recording's own numbers: 4 starts of the outermost forward, 3 gaps of 7-13 samples (a "step" of 193
    # ms, where mlp's steps take ~15 ms): too few gaps to tell steps from starts at random, so no step time
    _, where, a = _analysed("mlp")
    assert a.steps is None and a.unresolved and "give 3 step times" in a.unresolved
    assert "examples/mlp.py:27" in a.unresolved and "--duration" in a.unresolved
    b = stacks.budget(a, RATE, where)
    assert b.unit == "run" and b.step_s == a.duration_s and "could not be timed" in b.notes[0]
    assert abs(sum(s.share for s in b.slices) - 1) < 0.01
    kernels = next(s for s in b.slices if s.name == "kernels")
    assert kernels.items[0].op == "aten::mm" and kernels.items[0].location == "step at examples/mlp.py:30"


def _loop(step_s: float, forward_share: float, rate_hz: float, seconds: float, seed: int = 0) -> list[Span]:
    """A main thread's spans as py-spy at `rate_hz` records a loop of `step_s` steps whose outermost forward
    fills the first `forward_share` of each step; each sample lands at a random phase of its interval."""
    rng = random.Random(seed)
    forward = (Frame("<module>", "/w/train.py", 9), Frame("Module._call_impl", "/t/torch/nn/modules/module.py", 1),
               Frame("Linear.forward", "/t/torch/nn/modules/linear.py", 2))
    other = (Frame("<module>", "/w/train.py", 10), Frame("backward", "/t/torch/_tensor.py", 3))
    interval = 1 / rate_hz
    out = []
    for k in range(int(seconds * rate_hz)):
        t = k * interval + rng.uniform(0, interval * 0.1)
        inside = (t % step_s) < forward_share * step_s
        out.append(Span(1, 1, int(t * 1e6), int(interval * 1e6), forward if inside else other, "MainThread"))
    return out


@pytest.mark.parametrize(("step_s", "share"), [(0.015, 0.3), (0.015, 0.5), (0.015, 0.9), (0.13, 0.5)])
def test_steps_shorter_than_a_few_sample_intervals_are_not_timed(step_s, share):
    # 30 s at 5 Hz (attach's default), 150 samples: steps of 15 ms and 130 ms give starts where samples land
    spans = _loop(step_s, share, 5.0, 30.0)
    a = stacks.analyse(spans, 5.0, stacks.Where(cwd="/w"), {}, {(1, 1)})
    assert a.steps is None and a.unresolved and "--rate 20" in a.unresolved, a.unresolved
    assert stacks.budget(a, 5.0, stacks.Where(cwd="/w")).unit == "run"


@pytest.mark.parametrize(("step_s", "share"), [(1.0, 0.5), (1.5, 0.3), (3.0, 0.8)])
def test_steps_of_several_sample_intervals_are_timed(step_s, share):
    spans = _loop(step_s, share, 5.0, 30.0)
    a = stacks.analyse(spans, 5.0, stacks.Where(cwd="/w"), {}, {(1, 1)})
    assert a.unresolved is None and a.steps is not None, a.unresolved
    assert abs(a.steps.median_s - step_s) <= 0.2 + 1e-9  # one sample interval
    b = stacks.budget(a, 5.0, stacks.Where(cwd="/w"))
    assert b.unit == "step" and b.step_s == a.steps.median_s


def test_numpy_time_outside_torch_at_its_line_and_the_rule_follows():
    _, where, a = _analysed("numpy_augment")
    top = a.libraries[0]
    assert top.library == "numpy" and top.source == "examples/numpy_augment.py:23"  # np.fft.fft2(image)
    report = Report(target=TargetInfo(script="examples/numpy_augment.py", mode="attach", pid=1))
    report.step_budget = stacks.budget(a, RATE, where)
    native = next(s for s in report.step_budget.slices if s.name == "native")
    assert native.items[0].label == "numpy"
    findings.judge(report)
    found = [f for f in report.findings if f.kind == "outside_torch"]
    # the rule's own thresholds on the budget's numbers (budget.OUTSIDE_MIN_SHARE / OUTSIDE_HIGH_SHARE), judged on
    # the share's interval
    from diagnose.findings.budget import OUTSIDE_HIGH_SHARE, OUTSIDE_MIN_SHARE
    from diagnose.report import borderline

    severity, _ = borderline.grade(100 * native.items[0].share, borderline.noise(report),
                                   ((100 * OUTSIDE_HIGH_SHARE, "high"), (100 * OUTSIDE_MIN_SHARE, "medium")), "share")
    assert (len(found) == 1) == (severity is not None)
    assert (found[0].rule_severity or found[0].severity) == severity
    assert found[0].location == "examples/numpy_augment.py:23" and found[0].evidence["library"] == "numpy"


def test_waiting_is_left_out_of_the_shares_and_is_its_own_slice():
    spans, where, a = _analysed("sleepy", cwd="/tmp/attach_exp")
    total = sum(s.dur_us for s in spans) * RATE / 1e6
    assert a.samples < total  # the sleeping half is not busy
    assert a.libraries and a.libraries[0].library == "your code" and a.libraries[0].source == "sleepy.py:4"
    b = stacks.budget(a, RATE, where)
    shares = {s.name: s.share for s in b.slices}
    assert set(shares) == {"python", "waiting"}
    # busy 50 ms, asleep 50 ms: each half of the samples within 20 points (about 46 samples in all)
    assert abs(shares["waiting"] - 0.5) < 0.2 and abs(shares["python"] - 0.5) < 0.2


@pytest.mark.parametrize("text, kind", [
    ("Error: Permission Denied (os error 13)", "permission"),
    ("Error: Operation not permitted (os error 1)", "permission"),
    ("Error: No such process (os error 3)", "gone"),
    ("Error: Failed to find python version from target process", "not_python"),
    ("py-spy> Stopped sampling because process exited", None),
])
def test_pyspy_failures_are_classified(text, kind):
    assert pyspy.failure(text) == kind


@pytest.mark.parametrize("cmdline, script, args", [
    (["python", "train.py", "--lr", "1"], "train.py", ["--lr", "1"]),
    (["/usr/bin/python3", "-u", "-X", "dev", "train.py"], "train.py", []),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"], "-m torch.distributed.run",
     ["--nproc-per-node", "2", "train.py"]),
    (["python"], "python", []),
])
def test_the_script_from_a_command_line(cmdline, script, args):
    assert process._script(cmdline) == (script, args)


def test_rss_and_liveness_of_this_process():
    import os

    assert process.alive(os.getpid()) and process.is_python(os.getpid())
    assert process.rss_bytes([os.getpid()]) > 0 and process.rss_bytes([2 ** 22 + 12345]) is None


def test_sampled_shares_beside_the_operator_pass_and_the_distortion_rule():
    from diagnose.findings.sampled import (
        MIN_OPERATOR_SAMPLES,
        instrumentation_distortion,
    )
    from diagnose.report.model import OperatorRow, Sampled, SampledOperator
    from diagnose.report.sampled import DISTORTION_POINTS, beside

    def row(name, pct):
        return OperatorRow(name=name, input_shapes=[], dtypes=[], calls=1, self_cpu_us=pct, total_cpu_us=pct,
                           self_pct=pct, source="t.py:1")

    report = Report(target=TargetInfo(script="t.py"))
    # aten::add_ at two shapes: 10 + 15 = 25% in the operator pass against 10% sampled: 15 points apart
    report.operators = [row("aten::mm", 50.0), row("aten::add_", 10.0), row("aten::add_", 15.0), row("aten::t", 25.0)]
    report.sampled = Sampled(sampler="py-spy", rate_hz=50, duration_s=5, samples=300, operator_samples=250,
                             operators=[SampledOperator("aten::mm", 150, 60.0, 50.0, source="t.py:3"),
                                        SampledOperator("aten::add_", 25, 10.0, 8.3, source="t.py:4"),
                                        SampledOperator("aten::t", 75, 30.0, 25.0)])
    pairs = {p.op: p for p in beside(report)}
    assert (pairs["aten::add_"].traced_pct, pairs["aten::add_"].sampled_pct) == (25.0, 10.0)
    assert [op for op, p in pairs.items() if p.distorted] == ["aten::add_"]  # mm: exactly 10 points, not more
    found = instrumentation_distortion(report)
    assert [(f.kind, f.op, f.location, f.severity, f.observation) for f in found] == [
        ("instrumentation_distortion", "aten::add_", "t.py:4", "low", True)]
    assert found[0].evidence["difference_points"] == -15.0 and DISTORTION_POINTS == 10.0
    report.sampled.operator_samples = MIN_OPERATOR_SAMPLES - 1  # too few samples to tell 10 points from noise
    assert instrumentation_distortion(report) == []


def test_torchrun_ranks_are_found_below_the_launcher_by_their_rank():
    import os
    import subprocess
    import sys
    import time

    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"], env={**os.environ, "RANK": r})
                for r in ("1", "0")]
    plain = subprocess.Popen(["sleep", "20"], env={**os.environ, "RANK": "5"})  # not Python: not a rank
    try:
        # until a child has exec'd, /proc shows the fork of this process, with this process's environment (a
        # loaded clean clone once looked before the second child had: found {first: 1} only)
        def exec_d(pid: int) -> bool:
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    return any(v.startswith(b"RANK=") for v in fh.read().split(b"\0"))
            except OSError:
                return False

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(exec_d(p.pid) for p in (*children, plain)):
            time.sleep(0.01)
        found = process.ranks(os.getpid())
        assert {children[0].pid: 1, children[1].pid: 0}.items() <= found.items()
        assert plain.pid not in found
    finally:
        for p in (*children, plain):
            p.kill()
            p.wait()
