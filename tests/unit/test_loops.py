"""The loop step detector (diagnose/loops.py): which loops get probes, that a probed script runs as it
was written, how the finder picks the loop, and how the step clock counts a loop's iterations."""

from __future__ import annotations

import sys
import textwrap
import traceback

import pytest

from diagnose import loops
from diagnose.protocol import WindowSpec
from diagnose.steps import StepClock

SCRIPT = textwrap.dedent('''\
    """A docstring first: the module's code still starts at line 1."""
    import torch


    def train(n):
        for i in range(n):                 # a candidate (calls)
            step(i)
        total = 0
        for i in range(n):                 # bare arithmetic, no call: not a candidate
            total += i * 2
        return total


    def step(i):
        return torch.ones(2) * i


    def batches(n):
        for i in range(n):                 # a generator's loop: a data source, not a candidate
            yield torch.ones(2)


    @torch.compile
    def compiled(x):
        for _ in range(2):                 # inside a compiled function: not a candidate
            x = torch.sin(x)
        return x


    @torch.no_grad()
    def evaluate(n):
        for i in range(n):                 # a candidate (no_grad compiles nothing)
            step(i)


    class Model(torch.nn.Module):
        def forward(self, x):
            for _ in range(2):             # a module's forward: not a candidate
                x = torch.relu(x)
            return x


    def rolled(x):
        for _ in range(2):                 # handed to torch.compile by name below: not a candidate
            x = torch.cos(x)
        return x


    fast_rolled = torch.compile(rolled)


    class Trainer:
        def fit(self, n):
            while n > 0:                   # a plain class's method: a candidate
                n = n - len(list(batches(1)))


    train(3)
    evaluate(2)
    Trainer().fit(4)
    for x in batches(5):                   # a candidate at module scope
        step(0)
    RESULT = (__name__, __file__.endswith("script.py"), train(0))
''')


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SCRIPT.splitlines(), 1) if text in line)


CANDIDATES = [i for i, line in enumerate(SCRIPT.splitlines(), 1) if "a candidate" in line and "not a" not in line]


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return str(path)


def test_candidates_are_the_script_s_own_loops_that_make_calls(script):
    probed = loops.probe(script)
    assert [s.line for s in probed.sites] == CANDIDATES and len(CANDIDATES) == 4
    assert [s.scope for s in probed.sites] == [("train", _line("def train")), ("evaluate", _line("@torch.no_grad")),
                                               ("fit", _line("def fit")), ("<module>", 1)]
    assert probed.sites[0].header.startswith("for i in range(n):")


def test_a_probed_script_runs_as_written_and_its_idle_probes_count_iterations(script, monkeypatch):
    probed = loops.probe(script)
    monkeypatch.setattr(sys, "argv", [script])
    assert loops.run(probed)["RESULT"] == ("__main__", True, 0)
    assert [loops.started(probed, s) for s in probed.sites] == [3, 2, 4, 5]


def test_line_numbers_are_unchanged(tmp_path):
    path = tmp_path / "fails.py"
    path.write_text("import torch\nfor i in range(3):\n    x = torch.ones(1)\n    if i == 2:\n        raise ValueError(i)\n")
    probed = loops.probe(str(path), only="line 2")
    with pytest.raises(ValueError) as err:
        loops.run(probed)
    frames = [f for f in traceback.extract_tb(err.value.__traceback__) if f.filename == str(path)]
    assert frames[-1].lineno == 5 and frames[-1].line == "raise ValueError(i)"


def test_only_names_one_loop_and_a_script_without_candidates_is_not_probed(script, tmp_path):
    fit = _line("while n > 0")
    assert [s.line for s in loops.probe(script, only=f"line {fit}").sites] == [fit]
    assert loops.probe(script, only=f"line {_line('total += i * 2') - 1}") is None
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\nys = [torch.ones(1) for _ in range(3)]\n")
    assert loops.probe(str(plain)) is None
    broken = tmp_path / "broken.py"
    broken.write_text("for i in range(3)\n    pass\n")
    assert loops.probe(str(broken)) is None


def _iterate(probed: loops.Probed, index: int = 0) -> None:
    """What the probe first in a loop's body does (loops._insert)."""
    next(probed.table[3 * index], 1) and probed.table[3 * index + 1]()


def _leave(probed: loops.Probed, index: int = 0) -> None:
    """What the probe after a loop does."""
    probed.table[3 * index + 2]()


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _armed(tmp_path, text: str, window: WindowSpec, late: bool):
    path = tmp_path / "loop.py"
    path.write_text(text)
    probed = loops.probe(str(path))
    now = _Clock()
    clock = StepClock(window, clock=now)
    return probed, clock, now


def test_a_loop_armed_late_numbers_its_steps_from_its_first_iteration(tmp_path):
    probed, clock, now = _armed(tmp_path, "import time\nfor i in range(10):\n    time.sleep(0)\n",
                                WindowSpec(skip=2, steps=3, stop_after_window=False), late=True)
    site = probed.sites[0]
    for _ in range(4):  # four iterations begin while the probe is idle
        _iterate(probed)
    assert clock.arm_loop(lambda: loops.arm(probed, site, clock, late=True), seen_at=0.0)
    for k in range(5, 11):  # iterations 5..10, 10 ms each; then the loop's exit
        now.t = k * 0.01
        _iterate(probed)
    now.t = 0.11
    _leave(probed)
    seen = clock.result()
    assert seen.detector == "loop" and seen.loop == "line 2" and "loop.py:2 (for i in range(10):)" in seen.detail
    # iteration 5's start ends step 4, which began before the probe was armed: untimed; the window
    # (--skip-steps 2) begins there, at step 5
    assert seen.window_first == 5 and seen.window_steps == 3 and seen.steps_seen == 10
    assert seen.step_s == pytest.approx([0.01, 0.01, 0.01])


def test_an_exit_ends_the_step_and_a_new_run_of_the_loop_opens_one(tmp_path):
    probed, clock, now = _armed(tmp_path, "import time\nfor i in range(3):\n    time.sleep(0)\n",
                                WindowSpec(skip=0, steps=10, stop_after_window=False), late=False)
    site = probed.sites[0]
    assert clock.arm_loop(lambda: loops.arm(probed, site, clock, late=False))
    for start in (0.0, 1.0):  # the function holding the loop runs twice, 0.5 s apart
        for k in range(3):
            now.t = start + 0.1 * k
            _iterate(probed)
        now.t = start + 0.3
        _leave(probed)
    seen = clock.result()
    assert seen.window_first == 1 and seen.steps_seen == 6
    assert seen.step_s == pytest.approx([0.1] * 6)  # the gap between the loop's two runs is in no step


def test_another_detector_keeps_the_steps(tmp_path):
    probed, clock, now = _armed(tmp_path, "import time\nfor i in range(3):\n    time.sleep(0)\n",
                                WindowSpec(skip=5, steps=10, stop_after_window=False), late=False)
    clock.boundary("optimizer", None, detail="SGD.step()")
    assert not clock.arm_loop(lambda: loops.arm(probed, probed.sites[0], clock, late=False))
    assert clock.result().detector == "optimizer"


def _finder(tmp_path, text: str) -> loops.Finder:
    path = tmp_path / "nest.py"
    path.write_text(text)
    return loops.Finder(loops.probe(str(path)), StepClock(None), main_ident=0)


NEST = "import torch\nfor epoch in range(3):\n    for x in range(9):\n        torch.ones(1)\n    torch.zeros(1)\n"


def _feed(finder: loops.Finder, chain_share: float, iterations: tuple[int, int], n: int = 100) -> None:
    """n samples over 1 s: the outer loop in all, the inner one in `chain_share` of them."""
    for k in range(n):
        inner = k < chain_share * n
        finder.record(k / n, (0, 1) if inner else (0,))
    finder.record(1.0, (0, 1))
    assert finder.first_seen == {0: (0.0, 0), 1: (0.0, 0)}
    for index, begun in enumerate(iterations):
        for _ in range(begun):
            _iterate(finder.probed, index)


def test_the_finder_descends_from_an_epoch_loop_to_its_batch_loop(tmp_path):
    finder = _finder(tmp_path, NEST)
    _feed(finder, 0.97, iterations=(1, 50))  # 20 ms batches, and no epoch finished yet
    assert finder.choose(1.0).line == 3


def test_the_finder_keeps_the_outer_loop_when_the_inner_one_is_finer_than_a_step(tmp_path):
    finder = _finder(tmp_path, NEST)
    _feed(finder, 0.97, iterations=(1, 100_000))  # a per-row loop of 10 µs iterations
    assert finder.choose(1.0).line == 2


def test_the_finder_keeps_the_outer_loop_when_the_inner_one_is_part_of_the_step(tmp_path):
    finder = _finder(tmp_path, NEST)
    _feed(finder, 0.6, iterations=(20, 100))
    assert finder.choose(1.0).line == 2


def test_the_finder_keeps_a_step_whose_inner_loop_holds_its_time(tmp_path):
    # examples/allocation_churn.py: six repeats inside each step hold 95% of it, but the step loop itself
    # went round three times: six inner iterations an outer one is a step's loop, not an epoch's
    finder = _finder(tmp_path, NEST)
    _feed(finder, 0.95, iterations=(3, 18))
    assert finder.choose(1.0).line == 2


def test_the_finder_keeps_sampling_until_it_can_tell_an_epoch_from_a_step(tmp_path):
    finder = _finder(tmp_path, NEST)
    _feed(finder, 0.97, iterations=(1, 5))  # one outer iteration begun, five inner ones: not known yet
    assert finder.choose(1.0) is None
    assert finder.choose(loops.MAX_DISCOVER_S + 0.1).line == 2  # out of time: 5 a step is not an epoch


def test_the_finder_waits_until_the_loop_has_run_long_enough(tmp_path):
    finder = _finder(tmp_path, NEST)
    _feed(finder, 0.6, iterations=(20, 100))
    assert finder.choose(0.1) is None  # 0.1 s after the loop was first seen: keep sampling


def test_a_full_run_keeps_at_most_a_batch_of_stamps(tmp_path):
    from diagnose.steps import STAMP_BATCH

    probed, clock, now = _armed(tmp_path, "import time\nfor i in range(10):\n    time.sleep(0)\n",
                                WindowSpec(skip=0, steps=1 << 62, stop_after_window=False), late=False)
    assert clock.arm_loop(lambda: loops.arm(probed, probed.sites[0], clock, late=False))
    most = 0
    for k in range(3 * STAMP_BATCH):
        now.t = k * 1e-3
        _iterate(probed)
        most = max(most, len(clock.stamps))
    seen = clock.result()
    assert 0 < most <= STAMP_BATCH and seen.window_steps == 3 * STAMP_BATCH - 1
    assert seen.step_s == pytest.approx([1e-3] * (3 * STAMP_BATCH - 1))
