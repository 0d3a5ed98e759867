"""microbench.measure / results / compare / callgrind helpers: fake clocks, in-memory results."""

from __future__ import annotations

import json
import math
import random

import pytest

torch = pytest.importorskip("torch")

from microbench import api, callgrind, results, stats  # noqa: E402
from microbench.cases import build_case, validate  # noqa: E402
from microbench.compare import compare_results, render_files  # noqa: E402
from microbench.errors import UsageError  # noqa: E402
from microbench.measure import TURN_S, Budget, interleaved, make_timer, per_measurement_time  # noqa: E402
from microbench.render import results_table  # noqa: E402


class FakeClock:
    """The timer torch's Timer reads; `work()` is the benchmarked statement and advances it by
    base * exp(N(0, sigma)) seconds, seeded."""

    def __init__(self, base_s: float, sigma: float, seed: int) -> None:
        self.now = 0.0
        self.base = base_s
        self.sigma = sigma
        self.rng = random.Random(seed)

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.now += self.base * math.exp(self.rng.gauss(0.0, self.sigma))


def test_interleaved_on_a_fake_clock_measures_every_count_in_alternating_turns():
    clock = FakeClock(base_s=1e-3, sigma=0.02, seed=0)
    seen: list[int] = []

    def work() -> None:  # which thread count each call ran at, in order
        seen.append(torch.get_num_threads())
        clock.work()

    before = torch.get_num_threads()
    [timings] = interleaved([("work()", {"work": work})], [1, 2], max_run_time=1.0, threshold=0.1, timer=clock)
    assert torch.get_num_threads() == before                  # the caller's count is restored
    assert [t.threads for t in timings] == [1, 2]
    for t in timings:
        assert t.number_per_run == 2                          # 1 ms a call: two calls make the 2 ms block
        # adaptive: every count had min(0.2, max_run_time / 2) s of fake time, then IQR/median < 10% stopped it
        assert 0.2 <= sum(t.times_s) * t.number_per_run <= 0.2 + 2 * TURN_S
        assert t.summary.median == pytest.approx(1e-3, rel=0.02)
        assert not t.summary.noisy                            # sigma 2%: IQR/median ~ 2.7%
        stats_ = torch.utils.benchmark.Measurement(1, t.times_s, make_timer("pass", {}, 1)._task_spec)
        assert t.summary.median == pytest.approx(stats_.median, rel=1e-12)  # torch's median and IQR
        assert t.summary.iqr == pytest.approx(stats_.iqr, rel=1e-12)
    # interleaved: after the warm-up, turns of ~25 ms (13 two-call blocks) alternate 1, 2, 2, 1, 1, 2, ...
    counts = [n for i, n in enumerate(seen) if i == 0 or n != seen[i - 1]]
    assert len(counts) >= 8
    assert counts[-8:] in ([1, 2] * 4, [2, 1] * 4)


def test_a_second_side_takes_its_turns_beside_the_first_at_each_count():
    clock = FakeClock(base_s=1e-3, sigma=0.02, seed=3)
    seen: list[tuple[str, int]] = []

    def side(name: str):
        def work() -> None:
            seen.append((name, torch.get_num_threads()))
            clock.work()
        return work

    case, ref = interleaved([("work()", {"work": side("case")}), ("work()", {"work": side("ref")})], [1, 2],
                            max_run_time=0.2, autorange="blocked", timer=clock)
    assert [t.threads for t in case] == [1, 2] and [t.threads for t in ref] == [1, 2]
    # the case decides: it has its allowance; the reference took the same rounds in turns a fifth as long
    assert all(sum(t.times_s) * t.number_per_run >= 0.2 for t in case)
    assert [len(t.turns_s) for t in ref] == [len(t.turns_s) for t in case]
    for c, r in zip(case, ref):
        assert sum(r.times_s) * r.number_per_run == pytest.approx(sum(c.times_s) * c.number_per_run / 5, rel=0.3)
    turns = [k for i, k in enumerate(seen) if i == 0 or k != seen[i - 1]]
    # after the warm-ups: (case, 1), (ref, 1), (case, 2), (ref, 2), then the same backwards (the last turn and the
    # first turn back are one run of calls), and again: each turn a neighbour of the one before in this order
    order = [("case", 1), ("ref", 1), ("case", 2), ("ref", 2)]
    walk = [order.index(k) for k in turns[-12:]]
    assert all(abs(a - b) == 1 for a, b in zip(walk, walk[1:])) and set(walk) == {0, 1, 2, 3}


def test_interleaved_on_a_noisy_fake_clock_is_flagged_and_stops_at_its_allowance():
    clock = FakeClock(base_s=1e-3, sigma=0.3, seed=1)      # IQR/median ~ 40%
    [timings] = interleaved([("clock.work()", {"clock": clock})], [1, 2], max_run_time=0.5, threshold=0.1,
                            timer=clock)
    for t in timings:
        assert t.summary.noisy
        # stopped by max_run_time, each count's last turn overrunning by at most a turn
        assert 0.5 <= sum(t.times_s) * t.number_per_run <= 0.5 + TURN_S + 0.01


def test_blocked_runs_every_count_to_its_allowance():
    clock = FakeClock(base_s=1e-3, sigma=0.02, seed=2)
    [timings] = interleaved([("clock.work()", {"clock": clock})], [1, 2], max_run_time=0.5, autorange="blocked",
                            timer=clock)
    assert all(sum(t.times_s) * t.number_per_run >= 0.5 for t in timings)
    with pytest.raises(ValueError, match="autorange"):
        interleaved([("clock.work()", {"clock": clock})], [1], max_run_time=0.5, autorange="quick", timer=clock)


def test_per_measurement_time_shares_what_is_left():
    now = [0.0]
    budget = Budget(10.0, clock=lambda: now[0])
    assert per_measurement_time(budget, left=4, cap=2.0) == 2.0        # 10/4 = 2.5, capped
    now[0] = 9.0
    assert per_measurement_time(budget, left=4, cap=2.0) == 0.25
    now[0] = 9.99
    assert per_measurement_time(budget, left=4, cap=2.0) == 0.05       # floor
    assert not budget.exhausted
    now[0] = 10.0
    assert budget.exhausted


def test_budget_stops_new_cases_and_says_which():
    add = validate(build_case("aten::add", [[16], [16], []], ["float", "float", "Scalar"]))
    mul = validate(build_case("aten::mul", [[16], [16]], ["float", "float"]))
    now = [0.0]
    budget = Budget(5.0, clock=lambda: now[0])

    def progress(msg: str) -> None:            # the first case "takes" the whole budget
        now[0] = 100.0

    rows, skipped, notes = api.benchmark([add, mul], [1, 2], budget=budget, max_run_time=0.05, progress=progress)
    assert [(r.op, r.threads) for r in rows] == [("aten::add", 1), ("aten::add", 2)]  # measured together
    assert [(s["op"], s["threads"], s["reason"]) for s in skipped] == [
        ("aten::mul", 1, "time budget of 5 s spent"), ("aten::mul", 2, "time budget of 5 s spent")]
    assert any("ran out after 2 of 4 measurements" in n for n in notes)


def test_contention_is_others_taking_the_cpus_our_threads_need():
    from microbench.machine import CpuSnapshot, others_cpus
    before = CpuSnapshot(wall_s=10.0, busy_s=100.0, own_s=5.0)
    after = CpuSnapshot(wall_s=12.0, busy_s=104.0, own_s=7.0)      # machine busy 4 CPU-s, we used 2
    assert others_cpus(before, after) == pytest.approx(1.0)
    assert others_cpus(before, CpuSnapshot(12.0, None, 7.0)) is None
    # 2 usable CPUs: 1 thread leaves one free, 2 threads leave none
    assert not api.is_contended(1.0, threads=1, usable=2)
    assert api.is_contended(1.0, threads=2, usable=2)
    assert not api.is_contended(0.1, threads=2, usable=2)        # background noise
    assert api.is_contended(1.3, threads=1, usable=2)


def test_speedup_and_efficiency():
    def row(threads, median):
        return results.Row(op="aten::mm", overload="default", input_shapes=[[2, 2], [2, 2]], dtypes=["float"] * 2,
                           contiguous=True, strides=None, layout="contiguous", threads=threads, median_us=median,
                           iqr_us=1.0, runs=10, number_per_run=1, noise_pct=1.0, noisy=False)
    rows = [row(1, 100.0), row(2, 60.0), row(4, 50.0)]
    api.fill_speedups(rows)
    assert [r.speedup_vs_1_thread for r in rows] == [1.0, pytest.approx(1.667, abs=1e-3), 2.0]
    assert [r.parallel_efficiency for r in rows] == [1.0, pytest.approx(0.833, abs=1e-3), 0.5]
    no_base = [row(2, 60.0)]
    api.fill_speedups(no_base)
    assert no_base[0].speedup_vs_1_thread is None


# --------------------------------------------------------------------------
# Results files and the two-file comparison
# --------------------------------------------------------------------------

def _row(threads, median, noise_pct, shapes=((64, 64), (64, 64))):
    return results.Row(op="aten::mm", overload="default", input_shapes=[list(s) for s in shapes],
                       dtypes=["float", "float"], contiguous=True, strides=None, layout="contiguous",
                       threads=threads, median_us=median, iqr_us=median * noise_pct / 100, runs=20,
                       number_per_run=100, noise_pct=noise_pct, noisy=noise_pct >= 10)


def _results(rows, cpu="AMD EPYC"):
    return results.Results(command="run", machine={"cpu_model": cpu, "torch_version": "2.13.0+cpu"},
                           settings={}, rows=rows)


def test_results_round_trip(tmp_path):
    res = _results([_row(1, 100.0, 4.0), _row(2, 60.0, 2.0)])
    path = tmp_path / "out" / "a.json"
    results.save(res, str(path))
    data = json.loads(path.read_text())
    assert data["format"] == "microbench-results" and data["format_version"] == 2
    back = results.load(str(path))
    assert back.rows == res.rows and back.machine == res.machine


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"),
    ('{"format": "something-else"}', "not a microbench results file"),
    ('{"format": "microbench-results", "format_version": 99}', "newer than this microbench"),
    ('{"format": "microbench-results", "format_version": 1, "measurements": [{"op": "x"}]}', "lacks one of"),
])
def test_bad_results_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        results.load(str(path))
    with pytest.raises(UsageError, match="no such file"):
        results.load(str(tmp_path / "missing.json"))


def test_compare_two_files_by_hand():
    a = _results([_row(1, 100.0, 4.0), _row(2, 60.0, 2.0), _row(1, 10.0, 1.0, shapes=((8, 8), (8, 8)))])
    b = _results([_row(1, 107.0, 8.0), _row(2, 61.0, 2.0), _row(4, 40.0, 1.0)], cpu="Other CPU")
    rows = compare_results(a, b, min_floor=0.05)
    by = {(r["threads"], str(r["input_shapes"])): r for r in rows}
    one = by[(1, "[[64, 64], [64, 64]]")]
    assert one["ratio"] == pytest.approx(1.07)
    assert one["noise_floor_pct"] == pytest.approx(6.0)     # (4% + 8%) / 2 > the 5% minimum
    assert one["real"] and one["verdict"] == "slower"
    two = by[(2, "[[64, 64], [64, 64]]")]
    assert two["noise_floor_pct"] == pytest.approx(5.0)     # (2% + 2%) / 2 < 5%: the minimum
    assert not two["real"] and two["verdict"] == "same"
    assert one["contended"] == [] and two["contended"] == []
    assert by[(1, "[[8, 8], [8, 8]]")]["verdict"] == "only in A"
    assert by[(4, "[[64, 64], [64, 64]]")]["verdict"] == "only in B"


def test_compare_table_renders_like_torch_compare(tmp_path):
    a = _results([_row(1, 100.0, 4.0), _row(2, 60.0, 2.0)])
    b = _results([_row(1, 107.0, 8.0), _row(2, 61.0, 2.0)])
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    results.save(a, str(pa))
    results.save(b, str(pb))
    from microbench.compare import compare_files
    text = render_files(compare_files(str(pa), str(pb)))
    lines = text.splitlines()
    assert lines[0].startswith("[") and "microbench compare" in lines[0] and lines[0].endswith("]")
    assert "A (us)" in lines[1] and "B/A" in lines[1] and "noise floor" in lines[1]
    assert any(l.startswith("1 thread: ---") for l in lines)
    assert any(l.startswith("2 threads: ---") for l in lines)
    assert any("1.070" in l and "±6.0%" in l and "slower (real)" in l for l in lines)
    assert any("1.017" in l and "same (within noise)" in l for l in lines)


def test_compare_marks_contended_rows(tmp_path):
    a = _results([_row(2, 60.0, 2.0)])
    b = _results([_row(2, 180.0, 2.0)])
    b.rows[0].contended = True
    rows = compare_results(a, b)
    assert rows[0]["verdict"] == "slower" and rows[0]["contended"] == ["B"]
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    results.save(a, str(pa))
    results.save(b, str(pb))
    from microbench.compare import compare_files
    text = render_files(compare_files(str(pa), str(pb)))
    assert "slower (real) [B contended]" in text and "held CPUs" in text


def test_results_table_mentions_noise_layout_and_skips():
    res = _results([_row(1, 100.0, 12.0), _row(2, 60.0, 2.0)])
    api.fill_speedups(res.rows)
    res.skipped = [{"op": "aten::cat", "input_shapes": [[], []], "self_pct": 12.5, "threads": None,
                    "reason": "a TensorList input: the report records no member shapes"}]
    text = results_table(res)
    assert "12.0 !" in text and "1.67" in text and "0.83" in text
    assert "aten::cat [[], []] (12.5%): a TensorList input" in text
    assert "Layout: contiguous." in text


# --------------------------------------------------------------------------
# callgrind helpers (the real collection is in the e2e test, opt-in)
# --------------------------------------------------------------------------

def test_callgrind_number_and_counts():
    assert callgrind.choose_number(1e-5) == 100                 # capped
    assert callgrind.choose_number(1e-3) == 10
    assert callgrind.choose_number(1.0) == 1
    assert callgrind.choose_number(None) == 10

    class Counts:
        def __init__(self, n):
            self.n = n

        def denoise(self):
            return self

        def sum(self):
            return self.n

    class Stats:
        baseline_exclusive_stats = Counts(1_000)

        def counts(self, denoise=False):
            return 51_000

    assert callgrind.instructions_per_call(Stats(), number=10) == 5_000


def test_callgrind_unavailable_names_the_missing_tools(monkeypatch):
    monkeypatch.setattr(callgrind.shutil, "which", lambda name: None if name == "valgrind" else "/usr/bin/x")
    assert callgrind.unavailable() == "valgrind not on PATH"
    monkeypatch.setattr(callgrind.shutil, "which", lambda name: "/usr/bin/x")
    assert callgrind.unavailable() is None


def test_noise_floor_constants():
    assert stats.NOISY_THRESHOLD == 0.10 and stats.DEFAULT_MIN_FLOOR == 0.05
