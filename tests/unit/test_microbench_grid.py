"""Issue 21: the shapes x threads grid (against torch's own Compare), --grid/--fuzz shapes, the fuzz rule,
format 2 and its reader for format 1, callgrind deltas on a committed real pair, the signed-rank interval."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils.benchmark import Compare, Measurement  # noqa: E402
from torch.utils.benchmark.utils import common  # noqa: E402

from microbench import callgrind as cg  # noqa: E402
from microbench import fuzz, grid, results, stats  # noqa: E402
from microbench.cases import expand_shapes, parse_grid  # noqa: E402
from microbench.compare import compare_files, render_files  # noqa: E402
from microbench.errors import UsageError  # noqa: E402
from microbench.measure import block_measure  # noqa: E402
from microbench.results import Results, Row  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "microbench"
CG_A = DATA / "callgrind_add_avx2.json"
CG_B = DATA / "callgrind_add_default.json"


def times(median_s: float, spread: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median_s * math.exp(rng.gauss(0.0, spread)) for _ in range(n)]


def row(shape: list[list[int]], threads: int, ts: list[float], *, flops=None, contended=False) -> Row:
    s = stats.summarize(ts)
    return Row(op="aten::mm", overload="default", input_shapes=shape, dtypes=["float"] * len(shape),
               contiguous=True, strides=None, layout="contiguous", threads=threads, median_us=s.median * 1e6,
               iqr_us=s.iqr * 1e6, runs=len(ts), number_per_run=1, noise_pct=100 * s.noise, noisy=s.noisy,
               flops=flops, bytes=1000, contended=contended, times_us=[x * 1e6 for x in ts])


# -- numbers as torch's Compare prints them --------------------------------------------------------------

@pytest.mark.parametrize("median_s, spread, n", [(2.48e-6, 0.005, 5), (3.2e-4, 0.03, 47), (1.7e-2, 0.2, 12),
                                                 (7.3e-8, 0.01, 200), (1.234567, 0.001, 9)])
def test_figures_units_and_trimming_equal_torch(median_s, spread, n):
    ts = times(median_s, spread, n, seed=n)
    m = Measurement(1, ts, common.TaskSpec("pass", "pass"))
    assert grid.significant_figures(ts, m.median) == m.significant_figures
    assert grid.select_unit(m.median) == common.select_unit(m.median)
    unit, scale = common.select_unit(m.median)
    assert grid.trim_sigfig(m.median / scale, m.significant_figures) == pytest.approx(
        common.trim_sigfig(m.median / scale, m.significant_figures), rel=1e-6)   # torch rounds in float32


def test_one_column_grid_prints_the_numbers_compare_prints():
    """Same measurements, one thread count: our cells are torch Compare's cells, digit for digit."""
    shapes = [[[64, 64], [64, 64]], [[256, 256], [256, 256]], [[1024, 64], [64, 64]]]
    series = [times(12e-6, 0.02, 40, 1), times(310e-6, 0.15, 30, 2), times(95e-6, 0.004, 60, 3)]
    res = Results(command="run", machine={}, settings={}, rows=[row(s, 1, ts) for s, ts in zip(shapes, series)])
    g = grid.Grid.from_results(res, colorize="none")
    ours = [line[0].text.strip() for line in g.cells]

    ms = [Measurement(1, ts, common.TaskSpec("pass", "pass", label="x", sub_label=f"s{i}", description="1 thread"))
          for i, ts in enumerate(series)]
    cmp = Compare(ms)
    cmp.trim_significant_figures()
    cmp.highlight_warnings()
    text = str(cmp)
    theirs = [re.split(r"\s*\|\s*", line.strip(), maxsplit=1)[1].strip() for line in text.splitlines()
              if re.match(r"\s+s\d\s", line)]
    assert ours == theirs, (ours, theirs, text)
    assert "(! " in ours[1]          # 15% spread: flagged as torch does
    assert g.unit == "us" and "Times are in microseconds (us)" in g.text()


def test_rowwise_colours_use_compare_thresholds():
    # one shape, 1/2/4 threads: 100 us, 105 us (<= 1.1x: good), 250 us (>= 2x: bad)
    rows = [row([[8]], t, [v * 1e-6] * 20) for t, v in ((1, 100.0), (2, 105.0), (4, 250.0))]
    g = grid.Grid.from_results(Results(command="run", machine={}, settings={}, rows=rows))
    assert [c.color for c in g.cells[0]] == ["best", "good", "bad"]
    coloured = g.text(color=True)
    assert grid.BEST + grid.BOLD in coloured and grid.BAD in coloured
    assert "\033[" not in g.text(color=False)
    md = g.markdown()
    assert "| `aten::mm [8] float32` | **100.0** | *105* | 250.0 ▲ |" in md   # Compare: 100 has 2 leading digits
    data = g.as_dict()
    assert [c["color"] for c in data["rows"][0]["cells"]] == ["best", "good", "bad"]
    assert data["threads"] == [1, 2, 4] and data["unit"] == "us"


def test_per_work_divides_by_flops():
    rows = [row([[8]], 1, [100e-6] * 10, flops=2_000_000_000), row([[16]], 1, [100e-6] * 10, flops=1_000_000_000)]
    g = grid.Grid.from_results(Results(command="run", machine={}, settings={}, rows=rows), per_work=True,
                               colorize="columnwise")
    assert g.per_work == "GFLOP"
    assert [line[0].median_s for line in g.cells] == pytest.approx([50e-6, 100e-6])
    assert [line[0].color for line in g.cells] == ["best", "bad"]


# -- several shapes -----------------------------------------------------------------------------------------

def test_grid_symbols_expand_to_the_product():
    g = parse_grid(["M=64,256", "N=128"])
    assert expand_shapes(["[M,32],[32,N]", "[8,8],[8,8]"], g) == [
        "[64,32],[32,128]", "[256,32],[32,128]", "[8,8],[8,8]"]
    assert expand_shapes(["[2,3]", "[2, 3]"]) == ["[2,3]"]                       # duplicates dropped
    with pytest.raises(UsageError, match="uses K"):
        expand_shapes(["[M,K]"], g)
    with pytest.raises(UsageError, match="not used"):
        expand_shapes(["[M,4]"], parse_grid(["M=1", "Q=2"]))
    for bad in ("M", "M=", "M=a", "1M=3", "M=-1"):
        with pytest.raises(UsageError, match="malformed --grid"):
            parse_grid([bad])


# -- fuzz ---------------------------------------------------------------------------------------------------

def test_fuzzed_shapes_are_seeded_tied_and_bounded():
    given = [[1, 256, 1024], [1, 1024, 64]]
    a = fuzz.fuzzed_shapes(given, 6, seed=7)
    assert a == fuzz.fuzzed_shapes(given, 6, seed=7)                    # reproducible
    assert a != fuzz.fuzzed_shapes(given, 6, seed=8)
    assert len(a) == 6 and given not in a and len({json.dumps(s) for s in a}) == 6
    for x, w in a:
        assert x[0] == 1 and w[0] == 1                                   # size-1 dims kept
        assert x[2] == w[1]                                              # the shared 1024 stays shared
        assert 128 <= x[1] <= 512 and 512 <= x[2] <= 2048 and 32 <= w[2] <= 128


def test_fuzz_rule():
    def rows(given_us: float, fuzzed_us: list[float], threads: int = 1) -> Results:
        out = [row([[8]], threads, [given_us * 1e-6] * 5, flops=1000)]
        out += [row([[9 + i]], threads, [u * 1e-6] * 5, flops=1000) for i, u in enumerate(fuzzed_us)]
        shapes = [[[9 + i]] for i in range(len(fuzzed_us))]
        return Results(command="run", machine={}, settings={"fuzz": {"shapes": shapes}}, rows=out)

    def verdicts(res: Results) -> list[dict]:
        assert [res.is_fuzzed(r) for r in res.rows] == [False] + [True] * (len(res.rows) - 1)
        return res.fuzz_verdicts()

    slow = verdicts(rows(200.0, [90.0, 100.0, 110.0, 105.0]))
    assert slow[0]["verdict"] == "specific to the shape" and "slower per GFLOP" in slow[0]["why"]
    assert slow[0]["ratio"] == pytest.approx(200 / 102.5, abs=1e-3)
    assert verdicts(rows(40.0, [90.0, 100.0, 110.0]))[0]["verdict"] == "specific to the shape"
    assert verdicts(rows(100.0, [90.0, 100.0, 110.0]))[0]["verdict"] == "holds around it"
    near = verdicts(rows(112.0, [95.0, 100.0, 105.0]))[0]                 # above all, but within 15%
    assert near["verdict"] == "holds around it" and "within 15%" in near["why"]
    assert verdicts(rows(200.0, [100.0, 100.0]))[0]["verdict"] == "undecided"
    contended = rows(200.0, [90.0, 100.0, 110.0])
    contended.rows[1].contended = True
    assert verdicts(contended)[0]["verdict"] == "undecided"              # 2 usable fuzzed rows left
    assert results.fuzz_verdicts(contended.rows, [False] * 4) == []      # nothing fuzzed: no verdict


# -- format 2, and format 1 still loads --------------------------------------------------------------------

def test_format_1_file_loads_through_the_migration(tmp_path):
    v1 = {"format": "microbench-results", "format_version": 1, "command": "run", "machine": {},
          "settings": {"threads": [1]}, "measurements": [
              {"op": "aten::mm", "input_shapes": [[2, 2], [2, 2]], "threads": 1, "median_us": 5.0, "iqr_us": 0.1,
               "instructions_per_call": 900, "callgrind_number": 10}], "skipped": [], "notes": []}
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(v1))
    res = results.load(str(p))
    assert res.settings["autorange"] == "adaptive" and res.settings["fuzz"] is None
    r = res.rows[0]
    assert r.instructions_per_call == 900 and res.callgrind_of(r) is None and not res.is_fuzzed(r)
    saved = tmp_path / "v2.json"
    results.save(res, str(saved))
    assert json.loads(saved.read_text())["format_version"] == results.FORMAT_VERSION == 2
    for bad in (0, 3):
        p.write_text(json.dumps({**v1, "format_version": bad}))
        with pytest.raises(UsageError, match="format version"):
            results.load(str(p))


# -- callgrind A/B on the committed real pair (aten::add [4096] at 1 thread; B with ATEN_CPU_CAPABILITY=default)

def test_committed_callgrind_pair_is_real():
    for path in (CG_A, CG_B):
        data = json.loads(path.read_text())
        assert data["format_version"] == 2 and data["settings"]["callgrind"] is True
        r, (c,) = data["measurements"][0], data["callgrind"]
        assert c["op"] == r["op"] and c["input_shapes"] == r["input_shapes"] and c["threads"] == r["threads"] == 1
        assert c["number"] == r["callgrind_number"] >= 1 and len(c["functions"]) == cg.TOP_FUNCTIONS
        assert c["total"] >= sum(n for n, _ in c["functions"]) > 0
        assert r["instructions_per_call"] * c["number"] < c["total"]      # the total still holds the loop baseline


def test_function_delta_names_the_kernels_that_changed():
    ra, rb = results.load(str(CG_A)), results.load(str(CG_B))
    a, b = ra.callgrind_of(ra.rows[0]), rb.callgrind_of(rb.rows[0])
    delta = cg.function_delta(a["functions"], a["number"], b["functions"], b["number"])
    (top_c, top_f), (second_c, second_f) = delta[0], delta[1]
    assert top_c > 0 and "DEFAULT::vectorized_loop" in top_f and "add_kernel" in top_f     # B's scalar-ISA kernel
    assert second_c < 0 and "AVX2" in second_f                                             # A's AVX2 kernel
    assert not any(n in f for _, f in delta for n in cg.NOISY_FUNCTIONS)                  # denoised
    # torch's own arithmetic agrees: FunctionCounts subtraction of the same per-call counts
    fa = cg.function_counts(a["functions"], a["number"])
    fb = cg.function_counts(b["functions"], b["number"])
    raw = {f: c for c, f in (fb - fa)}
    assert raw[top_f] == pytest.approx(top_c)


def test_compare_files_reports_the_callgrind_delta():
    out = compare_files(str(CG_A), str(CG_B), top_functions=5)
    (r,) = out["rows"]
    c = r["callgrind"]
    a, b = results.load(str(CG_A)).rows[0], results.load(str(CG_B)).rows[0]
    assert c["delta_per_call"] == b.instructions_per_call - a.instructions_per_call > 0
    assert len(c["functions"]) == 5 and c["functions"][0]["delta_per_call"] > 0
    text = render_files(out)
    assert f"B - A {c['delta_per_call']:+,}" in text and "top 5 functions by |B - A|" in text


# -- the signed-rank interval and sub-blocks ----------------------------------------------------------------

def test_signed_rank_ci_matches_the_table_and_covers():
    # n = 20, two-sided 5%: the critical T is 52, so the interval is [W_(53), W_(158)] of 210 Walsh averages
    xs = [float(i) for i in range(1, 21)]
    walsh = sorted((xs[i] + xs[j]) / 2 for i in range(20) for j in range(i, 20))
    lo, hi, conf = stats.signed_rank_ci(xs)
    assert (lo, hi) == (walsh[52], walsh[210 - 53]) and 0.95 <= conf < 0.96
    assert stats.signed_rank_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None          # n = 5 cannot reach 95%
    rng = random.Random(3)
    misses = 0
    for _ in range(400):
        lo, hi, _ = stats.signed_rank_ci([rng.gauss(0.0, 1.0) for _ in range(15)])
        misses += not lo <= 0.0 <= hi
    assert misses / 400 <= 0.08                                              # nominal 5%


def test_sub_blocks_take_the_fastest_and_run_every_call():
    calls = []
    clock = iter([0.0, 5.0, 5.0, 6.0, 6.0, 9.0])   # three sub-blocks of 2 calls: 5 s, 1 s, 3 s

    def f():
        calls.append(1)

    measure = block_measure("f()", {"f": f}, threads=torch.get_num_threads(), number=6, sub_blocks=3,
                            timer=lambda: next(clock))
    assert measure() == pytest.approx(0.5)           # 1 s / 2 calls, the fastest sub-block
    assert len(calls) == 6
