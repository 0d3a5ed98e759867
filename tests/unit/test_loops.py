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
    next(probed.table[3 * index], 0) or probed.table[3 * index + 1]()


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


def _run_loop(tmp_path, window: WindowSpec, times: list[float], slow: bool, exit_at: float | None = None):
    """The loop's iterations beginning at `times` (then its exit at exit_at), through the armed probe; `slow`:
    every boundary takes the clock's Python path (a per-step RSS read makes none plain)."""
    tmp_path.mkdir(exist_ok=True)
    probed, clock, now = _armed(tmp_path, "import time\nfor i in range(9):\n    time.sleep(0)\n", window, late=False)
    begun, ended = [], []
    clock.on_begin, clock.on_end = (lambda: begun.append(now.t)), (lambda: ended.append(now.t))
    if slow:
        clock.read_rss = lambda: 0
    assert clock.arm_loop(lambda: loops.arm(probed, probed.sites[0], clock, late=False))
    for t in times:
        now.t = t
        _iterate(probed)
    if exit_at is not None:
        now.t = exit_at
        _leave(probed)
    return clock.result(), begun, ended


def _same(a, b) -> None:
    for name in ("detector", "steps_seen", "window_first", "window_steps", "window_began", "window_ended",
                 "window_wall_s", "warmup_s", "data_wait_s", "loop", "loop_group"):
        assert getattr(a, name) == pytest.approx(getattr(b, name)), name
    assert a.step_s == pytest.approx(b.step_s)


def test_stamped_boundaries_replay_as_the_clock_times_each(tmp_path):
    """The fast path (stamps, replayed by StepClock._flush) gives what the clock's Python path gives at every
    boundary, callbacks included: irregular steps, a window that begins and ends inside the run, then more."""
    times = [sum(1e-3 * (1 + (k * 7919) % 13) for k in range(n)) for n in range(1, 400)]
    window = WindowSpec(skip=30, steps=250, stop_after_window=False)
    fast, begun_f, ended_f = _run_loop(tmp_path / "a", window, times, slow=False, exit_at=times[-1] + 0.01)
    slow, begun_s, ended_s = _run_loop(tmp_path / "b", window, times, slow=True, exit_at=times[-1] + 0.01)
    _same(fast, slow)
    assert begun_f == begun_s and ended_f == ended_s and fast.window_ended and fast.steps_seen == 399
    assert fast.loop_group == 1  # a later pass told no group times each step


def test_a_first_pass_times_steps_under_50_us_in_groups_of_their_mean(tmp_path):
    from diagnose.steps import GROUP_AFTER, LOOP_GROUP

    step = 16e-6
    times = [k * step for k in range(3000)]
    first = WindowSpec(skip=5, steps=2000, stop_after_window=False, find_loop=True)
    seen, _, _ = _run_loop(tmp_path / "a", first, times, slow=False, exit_at=3000 * step + step / 2)
    assert seen.loop_group == LOOP_GROUP
    # every iteration counted, the exit's unfinished group included; the window's steps are each timed, the
    # first GROUP_AFTER alone and the rest as their group's mean, so they add up to the window's time
    assert seen.steps_seen == 3000 and seen.window_steps == 2000 and len(seen.step_s) == 2000
    assert seen.step_s == pytest.approx([step] * 2000)
    assert seen.window_wall_s == pytest.approx(sum(seen.step_s))
    # the pass after it is told the group and groups from the same step; the window ends where the first's did
    later = WindowSpec(skip=seen.window_first - 1, steps=seen.window_steps, loop="line 2", loop_group=LOOP_GROUP,
                       stop_after_window=False)
    again, _, ended = _run_loop(tmp_path / "b", later, times[:2100], slow=False)
    assert again.loop_group == LOOP_GROUP and again.window_steps == 2000 and ended == [times[2005]]
    assert again.step_s == pytest.approx([step] * 2000) and GROUP_AFTER < 2000


def test_an_exit_inside_a_group_ends_the_steps_begun_since_its_last_stamp(tmp_path):
    from diagnose.steps import LOOP_GROUP

    # irregular tiny steps, the loop leaving 3 iterations into a group: each step of the unfinished group gets
    # the mean of the time since the last stamp, and every iteration is counted
    times = [k * 20e-6 + (5e-6 if k % 3 else 0.0) for k in range(2000)]
    window = WindowSpec(skip=0, steps=10_000, stop_after_window=False, loop="line 2", loop_group=LOOP_GROUP)
    # iteration 1 opens the first step; 2-17 are stamped each (GROUP_AFTER); 18 is the clock's Python path;
    # 19 on are 5 groups, each stamped at its last iteration; 3 more begin a group the exit leaves unfinished
    g = LOOP_GROUP
    last, before = 18 + 5 * g, 18 + 4 * g  # the iterations the last two stamps were taken at
    n = last + 3
    seen, _, _ = _run_loop(tmp_path, window, times[:n], slow=False, exit_at=1.0)
    assert seen.steps_seen == n and seen.window_steps == n
    assert sum(seen.step_s) == pytest.approx(1.0 - times[0])
    assert seen.step_s[-4:] == pytest.approx([(1.0 - times[last - 1]) / 4] * 4)
    assert seen.step_s[-4 - g:-4] == pytest.approx([(times[last - 1] - times[before - 1]) / g] * g)


def test_after_the_window_the_probe_only_counts(tmp_path):
    times = [k * 1e-3 for k in range(10_000)]
    window = WindowSpec(skip=2, steps=10, stop_after_window=False)
    seen, _, ended = _run_loop(tmp_path, window, times, slow=False)
    assert seen.window_ended and ended == [times[12]] and seen.steps_seen == 10_000 - 1
    assert seen.step_s == pytest.approx([1e-3] * 10)
