"""The memory layer: the slope and its interval, warm-up against growth, the script's length from its loops, what a
real profile's unpaired allocations say about who keeps them, and the memory_growth rule on typed reports."""

from __future__ import annotations

import random
import sys
import textwrap

import pytest

from diagnose.findings.memory import memory_growth
from diagnose.layers.memory.growth import MIN_GROWTH_BYTES_PER_STEP, growth, line, projection
from diagnose.layers.memory.readings import RssReader, script_length, tensor_bytes
from diagnose.protocol import MemoryReadings
from diagnose.report.memory import per_step
from diagnose.report.model import Memory, Report, Retained, RetainedGroup, TargetInfo
from diagnose.usercode import UserCode

MIB = 1 << 20


# ------------------------------------------------------------------------------------------------ the slope

def test_the_slope_is_least_squares_with_a_t_interval():
    rng = random.Random(0)
    ys = [1000.0 + 3.0 * i + rng.gauss(0, 1) for i in range(30)]
    slope, lo, hi = line(ys)
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    ols = sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sum((i - mx) ** 2 for i in range(n))
    assert slope == pytest.approx(ols)
    assert lo < 3.0 < hi and hi - lo < 0.2  # 1-sigma noise over 30 steps: the interval is tight and holds the truth
    assert line([5.0, 5.0, 5.0, 5.0]) == (0.0, 0.0, 0.0)
    assert line([1.0, 2.0]) is None


def test_steady_growth_continues_and_warm_up_does_not():
    rng = random.Random(1)
    steady = [int(300 * MIB + 2 * MIB * i + rng.gauss(0, 100_000)) for i in range(21)]
    g = growth("rss", steady)
    assert g.continues and g.slope.bytes_per_step == pytest.approx(2 * MIB, rel=0.02), g.verdict
    # optimizer state and caches: 8 MiB a step for the first 6 steps, then flat
    warm = [int(300 * MIB + 8 * MIB * min(i, 6) + rng.gauss(0, 100_000)) for i in range(21)]
    w = growth("rss", warm)
    assert w.slope.ci_low > 0 and not w.continues and w.verdict.startswith("warm-up"), w.verdict
    flat = growth("allocator", [7 * MIB] * 21)
    assert not flat.continues and flat.verdict.startswith("no growth")
    assert not growth("rss", [1, 2, 3]).continues  # too few readings


def test_heap_noise_in_the_rss_is_not_growth_but_the_same_in_torch_bytes_is():
    # 200 KiB a step: above the allocator's floor, under the RSS's (the heap moves that much on a clean loop)
    ys = [int(100 * MIB + 200 * 1024 * i) for i in range(21)]
    assert growth("allocator", ys).continues
    assert not growth("rss", ys).continues


def test_projection_uses_the_steps_left_and_the_smaller_headroom():
    readings = MemoryReadings(rss_bytes=500 * MIB, mem_available_bytes=8 << 30, cgroup_limit_bytes=2 << 30,
                              cgroup_used_bytes=1 << 30, step_at_window_end=30, total_steps=530, total_basis="x")
    p = projection(2 * MIB, readings)
    assert p.more_bytes == 1000 * MIB and p.headroom_bytes == 1 << 30
    unknown = projection(2 * MIB, MemoryReadings(total_steps=None, total_basis="a while loop", step_at_window_end=3))
    assert unknown.more_bytes is None and unknown.basis == "a while loop"


# ------------------------------------------------------------------------------------------------ readings

def test_rss_reader_reads_the_resident_set():
    reader = RssReader()
    first = reader()
    block = bytearray(64 * MIB)
    for i in range(0, len(block), 4096):
        block[i] = 1
    assert reader() - first >= 60 * MIB
    reader.close()


def test_the_script_length_is_the_product_of_its_loops(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import sys

        class Args:
            epochs = 3

        args = Args()
        loader = list(range(40))
        seen = []

        def step(hook):
            seen.append(hook(sys._getframe()))

        def train(hook):
            for epoch in range(args.epochs):
                for i, batch in enumerate(loader):
                    step(hook)

        def forever(hook):
            while True:
                step(hook)
                return
    """))
    namespace: dict = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    usercode = UserCode(str(script), cwd=str(tmp_path))
    namespace["train"](lambda f: script_length(f, usercode))
    total, basis = namespace["seen"][0]
    assert total == 120, basis
    assert "range(args.epochs) = 3 at train.py:14" in basis and "loader = 40 at train.py:15" in basis
    namespace["forever"](lambda f: script_length(f, usercode))
    assert namespace["seen"][-1][0] is None and "while loop" in namespace["seen"][-1][1]


def test_tensor_bytes_by_what_they_are():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(256, 256)  # 256*256 + 256 floats
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 256)).sum().backward()
    opt.step()
    params, grads, state = tensor_bytes(model, [opt])
    assert params == grads == (256 * 256 + 256) * 4
    assert state >= 2 * params  # exp_avg and exp_avg_sq (and the step counters)


# ------------------------------------------------------------------------------ a real profile: who keeps what

def _profile(body, steps: int = 12):
    """Run `body(i)` steps times under the operator pass's profiler settings, marking each step as the recorder
    does; the memory layer's reading of it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from diagnose.layers.memory import retained
    from diagnose.layers.operators.kineto import SOURCE_PREFIX, Label

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof:
        for i in range(steps):
            with torch.profiler.record_function(Label.text("here.py:1", None, None)):
                body(i)
            retained.mark(torch)
    usercode = UserCode(__file__)
    return retained.analyse(prof.profiler.kineto_results, steps, (SOURCE_PREFIX, Label.parse), usercode,
                            sys._getframe(1))


def test_outputs_kept_with_their_graph_are_held_by_the_list_and_the_graph():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    x = torch.randn(128, 512)
    kept = []
    data = _profile(lambda i: kept.append(model(x)))
    per_out = 128 * 512 * 4
    assert len(data["live_bytes"]) == 12 and data["live_bytes"][-1] - data["live_bytes"][0] == 11 * 2 * per_out
    groups = [g for g in data["retained"]["groups"] if g["bytes_per_step"] > 0]
    container = [g for g in groups if g["held_by"] == "container"]
    graph = [g for g in groups if g["held_by"] == "autograd graph"]
    assert container and container[0]["holder"] == "list kept" and container[0]["grad_fn"] == "AddmmBackward0"
    assert container[0]["bytes_per_step"] == per_out
    assert graph and sum(g["bytes_per_step"] for g in graph) == per_out  # the ReLU output, saved for backward
    assert graph[0]["holder"] == "list kept"


def test_a_torch_cat_buffer_is_a_grown_buffer_and_a_dict_a_container():
    torch = pytest.importorskip("torch")
    state = {"buf": torch.zeros(0, 256)}
    cache = {}

    def body(i):
        piece = torch.randn(512, 256)
        state["buf"] = torch.cat([state["buf"], piece])
        cache[i] = piece * 2

    data = _profile(body)
    groups = [g for g in data["retained"]["groups"] if g["bytes_per_step"] > 0]
    buffer = next(g for g in groups if g["grown_buffer"])
    assert buffer["op"] == "aten::cat" and buffer["bytes_per_step"] == pytest.approx(512 * 256 * 4, rel=0.01)
    held = next(g for g in groups if g["op"] == "aten::mul")
    assert held["held_by"] == "container" and held["holder"] == "dict cache" and held["grad_fn"] is None
    assert held["bytes_per_step"] == 512 * 256 * 4


# ------------------------------------------------------------------------------------------------ the rule

def _report(allocator_rate: float | None, rss_rate: float, more: float | None, room: int | None,
            groups: list[RetainedGroup] = ()) -> Report:
    r = Report(target=TargetInfo(script="t.py"))
    mem = r.memory = Memory()
    mem.rss = growth("rss", [int(100 * MIB + rss_rate * i) for i in range(21)])
    if allocator_rate is not None:
        mem.allocator = growth("allocator", [int(allocator_rate * i) for i in range(21)])
    readings = MemoryReadings(mem_available_bytes=room, step_at_window_end=25,
                              total_steps=None if more is None else 25 + int(more / rss_rate), total_basis="b")
    mem.projection = projection(rss_rate, readings)
    mem.retained = Retained(groups=list(groups))
    return r


def test_memory_growth_at_the_holders_line_with_severity_from_the_projection():
    kept = RetainedGroup(source="t.py:9", library_line=None, module=None, op="aten::addmm", bytes_per_step=2 * MIB,
                         held_by="container", grad_fn="AddmmBackward0", holder="list outputs", holder_line="t.py:10")
    low = memory_growth(_report(2 * MIB, 3 * MIB, more=300 * MIB, room=20 << 30, groups=[kept]))
    assert [f.severity for f in low] == ["low"] and low[0].location == "t.py:10"
    assert low[0].evidence["growth_per_step_bytes"] == 2 * MIB and ".detach()" in low[0].suggestion
    assert memory_growth(_report(2 * MIB, 3 * MIB, more=6 << 30, room=20 << 30))[0].severity == "medium"
    assert memory_growth(_report(2 * MIB, 3 * MIB, more=30 << 30, room=20 << 30))[0].severity == "high"
    assert memory_growth(_report(2 * MIB, 3 * MIB, more=None, room=20 << 30))[0].severity == "medium"
    # the window ran to the script's last step (examples/growing_cache.py, 400 steps): nothing more is to come, and
    # the title says what the run's steps kept at this rate, not "by step 400, 0.00 MiB more"
    (end,) = memory_growth(_report(2 * MIB, 3 * MIB, more=0, room=20 << 30))
    assert end.severity == "low" and end.evidence["projected_more_bytes"] == 0
    assert "0.00 MiB more" not in end.title and "over the run's 25 steps at this rate" in end.title, end.title


def test_heap_growth_with_torch_bytes_flat_is_raised_and_says_so():
    # a GPT-2 loop appending `out.loss` to a list: RSS +50 MiB a step, torch's live bytes flat, the list the one
    # thing kept from step to step (its losses, 4 bytes a step, with their graph); plainly it held 7.2 GiB at step 200
    kept = RetainedGroup(source="t.py:18", library_line=None, module="", op="aten::nll_loss_forward",
                         bytes_per_step=4.0, held_by="container", grad_fn="NllLossBackward0", holder="list losses",
                         holder_line="t.py:22")
    (f,) = memory_growth(_report(0.0, 50 * MIB, more=70 << 30, room=20 << 30, groups=[kept]))
    assert f.severity == "high" and f.location == "t.py:22" and f.evidence["torch_bytes_flat"] is True
    assert "the heap grows, not tensors torch keeps" in f.title and "list losses (at t.py:22)" in f.title, f.title
    assert "NllLossBackward0" in f.title and ".item()" in f.suggestion
    # projected past the memory left, the run does not finish: all its time at stake, as a hang's, so it ranks first
    assert f.stake.pct == 100.0 and "run out" in f.stake.basis
    (bare,) = memory_growth(_report(0.0, 3 * MIB, more=None, room=None))  # nothing kept: no line, still said
    assert bare.location is None and "the heap grows" in bare.title and bare.severity == "medium"


def test_no_memory_growth_when_nothing_grows():
    assert memory_growth(_report(None, 0.0, more=None, room=None)) == []
    rss_only = _report(None, 3 * MIB, more=None, room=None)  # no operator pass: the RSS decides
    assert per_step(rss_only.memory) == (pytest.approx(3 * MIB), "rss") and memory_growth(rss_only)
    assert MIN_GROWTH_BYTES_PER_STEP["rss"] <= MIB // 2  # 1 MiB a step is always above the floor


# ------------------------------------------------------------------------------ a recorded report, re-rendered

RECORDED = __import__("pathlib").Path(__file__).parents[1] / "data" / "memory" / "keep_graph.report.json"


def test_a_recorded_report_re_derives_its_finding_and_renders_the_section(tmp_path):
    """tests/data/memory/keep_graph.report.json: `diagnose --layers operators examples/keep_graph.py`."""
    import json

    from diagnose import findings
    from diagnose.render import html, markdown, plots, terminal
    from diagnose.report import io as report_io

    report = report_io.from_json_data(json.loads(RECORDED.read_text()))
    found = [f for f in findings.derive(report) if f.kind == "memory_growth"]
    assert len(found) == 1 and found[0].location == "examples/keep_graph.py:36"
    assert found[0].evidence["growth_per_step_bytes"] == 2 * MIB
    text = terminal.render(report)
    assert "Memory (per step of the window)" in text and "kept 1.00 MiB/step" in text
    md = markdown.render(report)
    assert "## Memory" in md and "list outputs" in md
    page = html.render(report)
    assert 'id="memory"' in page and "Alive at the window's end, by site" in page
    assert plots.memory_png(report, str(tmp_path / "memory.png")) is None
    assert (tmp_path / "memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_container_held_as_an_attribute_is_named_with_its_object():
    torch = pytest.importorskip("torch")

    class Memo:
        def __init__(self):
            self.cache = {}

        def remember(self, i, t):
            self.cache[i] = t

    memo = Memo()
    data = _profile(lambda i: memo.remember(i, torch.randn(256, 256) * 2))
    held = next(g for g in data["retained"]["groups"] if g["bytes_per_step"] > 0 and g["held_by"] == "container")
    assert held["holder"] == "dict memo.cache", held
    # the line is looked for in the frames on the stack: `self.cache[i] = t` ran in a method that returned
    assert held["holder_line"] is None


def test_a_running_total_without_item_keeps_every_graph_and_is_named():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
    x = torch.randn(128, 256)
    state = {"total": torch.zeros(())}

    def body(i):
        global total
        total = state["total"] = state["total"] + model(x).sum()

    data = _profile(body)
    graph = [g for g in data["retained"]["groups"] if g["bytes_per_step"] > 0 and g["held_by"] == "autograd graph"]
    assert sum(g["bytes_per_step"] for g in graph) == 128 * 512 * 4  # the ReLU output, saved for backward
    assert graph[0]["holder"].startswith("variable total (its graph: "), graph[0]


def test_a_later_half_slowed_by_a_neighbour_still_continues_if_its_interval_reaches_half():
    # a list growing by the step, attached: the target's pace fell in the later half (a neighbour's load), so the
    # later half grows at 47% of the whole by its point, and its interval reaches past half (the fresh clone's case)
    rng = random.Random(4)
    fast = [100 * MIB + 24 * MIB * i for i in range(10)]
    slow = [fast[-1] + 7.5 * MIB * i for i in range(1, 11)]
    g = growth("rss", [int(x + rng.gauss(0, MIB)) for x in fast + slow], interval_s=0.25)
    s = g.slope
    assert s.late_bytes_per_step < 0.5 * s.bytes_per_step <= s.late_ci_high, s
    assert g.continues, g.verdict
    # a later half whose whole interval lies under half the window's slope is warm-up that is settling
    settling = [100 * MIB + 24 * MIB * i for i in range(10)] + [316 * MIB + 2 * MIB * i for i in range(1, 11)]
    w = growth("rss", [int(x + rng.gauss(0, 200_000)) for x in settling], interval_s=0.25)
    assert w.slope.late_ci_high < 0.5 * w.slope.bytes_per_step and not w.continues, w.verdict
