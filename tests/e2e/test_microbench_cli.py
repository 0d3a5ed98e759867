"""The real `python -m microbench` in a subprocess, on real torch, small ops and small budgets.

No assertion depends on timing except where the signal is overwhelming; the
callgrind run (about two minutes under valgrind) is opt-in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "tests" / "data" / "microbench" / "report_mlp_step.json"

ROW_FIELDS = {
    "op", "input_shapes", "dtypes", "contiguous", "threads", "median_us", "iqr_us", "runs", "noise_pct", "noisy",
    "flops", "gflops_per_s", "bytes", "gbytes_per_s", "speedup_vs_1_thread", "parallel_efficiency", "source",
    "reproducer", "others_cpus", "contended",
}


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYTHONWARNINGS", "ignore")
    env.update(extra)
    return env


def mb(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "microbench", *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("microbench: error: "), lines[0]
    assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def mm_run(tmp_path_factory):
    """`microbench run aten::mm` at 1 and 2 threads, once for the module."""
    out = tmp_path_factory.mktemp("mm")
    proc = mb("run", "aten::mm", "--shapes", "[64,64],[64,64]", "--threads", "1,2", "--budget", "5",
              "--max-run-time", "0.3", "--json", str(out / "a.json"), "--reproducers", str(out / "rep"))
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_run_writes_the_rows(mm_run):
    out, proc = mm_run
    data = json.loads((out / "a.json").read_text())
    assert data["format"] == "microbench-results" and data["format_version"] == 2
    assert data["machine"]["torch_version"] and data["machine"]["cpu_model"]
    assert data["machine"]["usable_cpus"] >= 1 and data["machine"]["intra_op_threads"] >= 1
    rows = data["measurements"]
    assert [r["threads"] for r in rows] == [1, 2]
    for r in rows:
        assert ROW_FIELDS <= set(r), ROW_FIELDS - set(r)
        assert r["op"] == "aten::mm" and r["input_shapes"] == [[64, 64], [64, 64]]
        assert r["dtypes"] == ["float", "float"] and r["contiguous"] is True
        assert r["median_us"] > 0 and r["runs"] >= 1 and r["iqr_us"] >= 0
        assert r["noisy"] == (r["noise_pct"] >= 10)
        assert r["flops"] == 2 * 64 ** 3 and r["bytes"] == 3 * 64 * 64 * 4
        assert r["gflops_per_s"] == pytest.approx(r["flops"] / (r["median_us"] * 1e3), rel=1e-2)
        assert r["reproducer"] == "01_mm_64x64_64x64.py"
    assert rows[0]["speedup_vs_1_thread"] == 1.0
    assert rows[1]["parallel_efficiency"] == pytest.approx(rows[1]["speedup_vs_1_thread"] / 2, abs=1e-3)
    assert "median (us)" in proc.stdout and "aten::mm [64, 64], [64, 64] float32" in proc.stdout


def test_reproducer_runs_standalone(mm_run, tmp_path):
    out, _ = mm_run
    script = out / "rep" / "01_mm_64x64_64x64.py"
    text = script.read_text()
    assert "import microbench" not in text and "from microbench" not in text
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(script), "--threads", "1", "--max-run-time", "0.05"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "aten::mm [64, 64], [64, 64] float32" in proc.stdout
    assert "Median" in proc.stdout or " us" in proc.stdout


def test_compare_two_saved_files(mm_run, tmp_path):
    out, _ = mm_run
    a = out / "a.json"
    same = mb("compare", str(a), str(a))
    assert same.returncode == 0, same.stderr
    assert "microbench compare" in same.stdout and "B/A" in same.stdout and "noise floor" in same.stdout
    assert same.stdout.count("same (within noise)") == 2

    # the real file with a known noise (5%): whether a 2x change is outside the noise must not hang on this run's
    # IQR (a 64x64 mm measured on a busy machine once spread 104%, and its 2x was "same (within noise)")
    quiet = json.loads(a.read_text())
    for r in quiet["measurements"]:
        r["iqr_us"], r["noise_pct"], r["noisy"] = 0.05 * r["median_us"], 5.0, False
    a = tmp_path / "a.json"
    a.write_text(json.dumps(quiet))
    for r in quiet["measurements"]:
        r["median_us"] *= 2
        r["iqr_us"] *= 2
    b = tmp_path / "b.json"
    b.write_text(json.dumps(quiet))
    proc = mb("compare", str(a), str(b), "--json", str(tmp_path / "cmp.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("slower (real)") == 2 and "2.000" in proc.stdout
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert cmp["format"] == "microbench-compare" and {r["verdict"] for r in cmp["rows"]} == {"slower"}
    assert mb("compare", str(a), str(b), "--fail-on-slower", "-q").returncode == 3


def test_from_report(tmp_path):
    proc = mb("from-report", str(REPORT), "--top", "2", "--threads", "1,2", "--budget", "8",
              "--max-run-time", "0.2", "--json", str(tmp_path / "out.json"), "--reproducers", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "out.json").read_text())
    rows = data["measurements"]
    assert [(r["op"], r["input_shapes"], r["threads"]) for r in rows] == [
        ("aten::mm", [[256, 1024], [1024, 1024]], 1), ("aten::mm", [[256, 1024], [1024, 1024]], 2),
        ("aten::mm", [[1024, 256], [256, 1024]], 1), ("aten::mm", [[1024, 256], [256, 1024]], 2)]
    assert all(r["source"] == "examples/mlp.py:30" and r["self_pct"] > 5 for r in rows)
    assert all(r["layout"].startswith("contiguous (assumed") for r in rows)
    assert any("no strides" in n for n in data["notes"])
    assert data["source_report"] == str(REPORT)
    assert data["machine"]["report_machine"]["intra_op_threads"] == 2
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [
        "01_mm_256x1024_1024x1024.py", "02_mm_1024x256_256x1024.py"]
    # 2 threads on a 1024-deep matmul: an overwhelming signal, but only if this machine has 2 CPUs free
    assert all(r["speedup_vs_1_thread"] > 0 for r in rows)


def test_from_report_budget_spent_says_what_was_skipped(tmp_path):
    proc = mb("from-report", str(REPORT), "--top", "2", "--threads", "1,2", "--budget", "0.001",
              "--json", str(tmp_path / "out.json"), "-q")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["measurements"] == []
    budget_skips = [s for s in data["skipped"] if s["reason"].startswith("time budget")]
    assert [(s["op"], s["threads"]) for s in budget_skips] == [("aten::mm", 1), ("aten::mm", 2)] * 2
    assert any("ran out after 0 of 4" in n for n in data["notes"])


def test_compare_abba_run(tmp_path):
    proc = mb("compare", "--run", "aten::mm", "--shapes", "[64,64],[64,64]", "--a-threads", "1",
              "--b-threads", "2", "--rounds", "6", "--block-ms", "5", "--json", str(tmp_path / "ab.json"))
    assert proc.returncode == 0, proc.stderr
    assert "microbench A/B: aten::mm" in proc.stdout
    assert "noise floor" in proc.stdout and "CI (sign)" in proc.stdout and "6 interleaved A B B A rounds" in proc.stdout
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["mode"] == "abba" and data["a"]["threads"] == 1 and data["b"]["threads"] == 2
    res = data["result"]
    assert res["rounds"] == 6 and len(data["rounds_us"]) == 6
    assert res["noise_floor_pct"] >= res["min_effect_pct"] == 1.0
    assert res["ci_low"] <= res["ratio"] <= res["ci_high"]
    assert res["verdict"] in ("faster", "slower", "same")


@pytest.mark.parametrize("args, needle", [
    (["from-report", "/nonexistent/report.json"], "no such file"),
    (["from-report", str(REPO / "pyproject.toml")], "not valid JSON"),
    (["from-report", str(REPO / "tests" / "data" / "operators_raw_mlp_step.json")], "not a diagnose report"),
    (["run", "aten::no_such_op", "--shapes", "[2]"], "unknown operator aten::no_such_op"),
    (["run", "aten::mm", "--shapes", "[64,64"], "malformed --shapes"),
    (["run", "aten::mm", "--shapes", "[2,3],[4,5]"], "aten::mm rejected the rebuilt inputs"),
    (["run", "aten::mm", "--shapes", "[2,3],[3,4]", "--threads", "one"], "expected comma-separated integers"),
    (["run", "aten::mm", "--shapes", "[2,3],[3,4]", "--dtype", "float33"], "unknown dtype"),
    (["compare", "only_one.json"], "two results files"),
    (["run", "aten::mm", "--shapes", "[M,2],[2,2]"], "uses M: give each a --grid"),
    (["run", "aten::mm", "--shapes", "[M,2],[2,2]", "--grid", "M=x"], "malformed --grid"),
    (["run", "aten::mm", "--shapes", "[2,2],[2,2]", "--shapes", "[3,3],[3,3]", "--fuzz", "2"],
     "--fuzz draws around one shape"),
    (["run", "aten::mm", "--shapes", "[2,2],[2,2]", "--autorange", "quick"], "invalid choice"),
    (["table", "/nonexistent.json"], "no such file"),
    ([], "a command is required"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    one_line_error(mb(*args), needle)


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(not os.environ.get("MICROBENCH_CALLGRIND"),
                    reason="callgrind emulates the whole python+torch start-up: ~2 min for a tiny op here; "
                           "set MICROBENCH_CALLGRIND=1 to run it")
def test_callgrind_counts_instructions(tmp_path):
    proc = mb("run", "aten::add", "--shapes", "[8],[8],[]", "--threads", "1", "--budget", "600",
              "--max-run-time", "0.1", "--callgrind", "--json", str(tmp_path / "cg.json"), timeout=400)
    assert proc.returncode == 0, proc.stderr
    row = json.loads((tmp_path / "cg.json").read_text())["measurements"][0]
    assert row["instructions_per_call"] > 100 and row["callgrind_number"] >= 1
    (counts,) = json.loads((tmp_path / "cg.json").read_text())["callgrind"]
    assert counts["number"] == row["callgrind_number"] and len(counts["functions"]) > 10
    assert "instr/call" in proc.stdout


# -- issue 21: several shapes, the grid, fuzz, blocked autorange, callgrind A/B, planted A/B -------------------

CG_A = REPO / "tests" / "data" / "microbench" / "callgrind_add_avx2.json"
CG_B = REPO / "tests" / "data" / "microbench" / "callgrind_add_default.json"


def test_grid_of_shapes_and_threads_with_blocked_autorange(tmp_path):
    out = tmp_path / "grid.json"
    # the budget only caps the run (each measurement takes --max-run-time): 10 s ran out before the last case in
    # one loaded clean clone, which then skipped it
    proc = mb("run", "aten::mm", "--shapes", "[M,64],[64,64]", "--grid", "M=16,128", "--shapes", "[8,8],[8,8]",
              "--threads", "1,2", "--autorange", "blocked", "--max-run-time", "0.05", "--budget", "120",
              "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["settings"]["autorange"] == "blocked"
    assert [(r["input_shapes"], r["threads"]) for r in data["measurements"]] == [
        ([[16, 64], [64, 64]], 1), ([[16, 64], [64, 64]], 2), ([[128, 64], [64, 64]], 1),
        ([[128, 64], [64, 64]], 2), ([[8, 8], [8, 8]], 1), ([[8, 8], [8, 8]], 2)]
    # blocked_autorange times blocks until their sum reaches min_run_time (= --max-run-time, 0.05 s); adaptive
    # would start deciding from min(0.2, max_run_time / 2) = 0.025 s
    assert all(sum(r["times_us"]) * r["number_per_run"] >= 0.05e6 * 0.999 for r in data["measurements"])
    assert "time per call, 3 shape(s) x 2 thread count(s)" in proc.stdout
    grid_lines = [l for l in proc.stdout.splitlines() if l.startswith("  aten::mm") and l.count("|") == 2]
    assert len(grid_lines) == 3

    md = mb("table", str(out), "--format", "markdown")
    assert md.returncode == 0, md.stderr
    assert "| shape | 1 thread | 2 threads |" in md.stdout and "| `aten::mm [128, 64], [64, 64] float32` |" in md.stdout
    assert md.stdout.count("**") >= 2 * 3 + 2            # each shape's best thread count in bold, and the title
    js = mb("table", str(out), "--format", "json", "--per-work", "--colorize", "columnwise")
    assert js.returncode == 0, js.stderr
    g = json.loads(js.stdout)
    assert g["format"] == "microbench-grid" and g["per_work"] == "GFLOP" and g["threads"] == [1, 2]
    assert [r["shape"] for r in g["rows"]] == ["aten::mm [16, 64], [64, 64] float32",
                                               "aten::mm [128, 64], [64, 64] float32", "aten::mm [8, 8], [8, 8] float32"]
    for column in range(2):     # columnwise: exactly the cheapest shape per GFLOP at each thread count is "best"
        cells = [r["cells"][column] for r in g["rows"]]
        best = min(c["median"] for c in cells)
        assert {c["color"] for c in cells if c["median"] <= best * 1.01} == {"best"}
    coloured = mb("table", str(out), "--color", "always")
    assert "\033[92m" in coloured.stdout and "\033[" not in md.stdout


def _fuzz(seed: int, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return mb("run", "aten::add", "--shapes", "[256,512],[256,512],[]", "--fuzz", "4", "--seed", str(seed),
              "--threads", "1", "--max-run-time", "0.03", "--budget", "10", "--json", str(out), *extra)


def test_fuzz_is_seeded_and_says_whether_it_is_the_shape(tmp_path):
    a = _fuzz(5, tmp_path / "a.json")
    b = _fuzz(5, tmp_path / "b.json", "--budget", "0.001", "-q")       # draws the same shapes, measures none
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    da, db = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "ab")
    shapes = [r["input_shapes"] for r in da["measurements"]]
    assert shapes[0] == [[256, 512], [256, 512], []] and len(shapes) == 5
    assert da["settings"]["fuzz"]["shapes"] == db["settings"]["fuzz"]["shapes"] == [s[:2] + [[]] for s in shapes[1:]]
    assert db["measurements"] == [] and db["settings"]["fuzz"]["seed"] == 5
    for x, y, s in shapes[1:]:
        assert x == y and s == [] and 128 <= x[0] <= 512 and 256 <= x[1] <= 1024     # tied, within [d/2, 2d]
    (v,) = da["fuzz_verdicts"]
    usable = sum(1 for r in da["measurements"][1:] if not r["contended"])              # contended rows left out
    assert v["threads"] == 1 and v["unit"] == "GB" and v["fuzzed_measured"] == usable
    given = da["measurements"][0]
    if usable >= 3 and not given["contended"]:
        assert v["verdict"] in ("specific to the shape", "holds around it")
        assert v["given_us_per_unit"] == pytest.approx(given["median_us"] / given["bytes"] * 1e9, rel=1e-3)
    else:
        assert v["verdict"] == "undecided"
    assert "Fuzz (--fuzz 4 --seed 5" in a.stdout and f"1 thread: {v['verdict']}" in a.stdout
    assert "Rule: per thread count, time per unit of work" in a.stdout
    assert "~ aten::add" in a.stdout                                                   # fuzzed rows in the grid


def test_compare_callgrind_pair_gives_instruction_and_function_deltas(tmp_path):
    proc = mb("compare", str(CG_A), str(CG_B), "--top-functions", "4", "--json", str(tmp_path / "cmp.json"))
    assert proc.returncode == 0, proc.stderr
    a = json.loads(CG_A.read_text())["measurements"][0]
    b = json.loads(CG_B.read_text())["measurements"][0]
    delta = b["instructions_per_call"] - a["instructions_per_call"]
    assert f"B - A {delta:+,}" in proc.stdout
    assert "top 4 functions by |B - A| per call" in proc.stdout and "DEFAULT::vectorized_loop" in proc.stdout
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    cgd = cmp["rows"][0]["callgrind"]
    assert cgd["delta_per_call"] == delta and len(cgd["functions"]) == 4
    tops = mb("table", str(CG_A), "--top-functions", "3")
    assert tops.returncode == 0 and "top 3 functions (exclusive, per call)" in tops.stdout


def test_compare_run_detects_a_planted_double_work(tmp_path):
    proc = mb("compare", "--run", "aten::mm", "--shapes", "[64,128],[128,64]", "--b-shapes", "[64,256],[256,64]",
              "--a-threads", "1", "--b-threads", "1", "--rounds", "8", "--block-ms", "8",
              "--json", str(tmp_path / "ab.json"))
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "ab.json").read_text())
    assert data["b_input_shapes"] == [[64, 256], [256, 64]] and data["sub_blocks"] == 8
    res = data["result"]
    assert res["verdict"] == "slower" and res["real"] and 1.4 < res["ratio"] < 3.0      # 2x the FLOPs
    assert "vs B [64, 256], [256, 64]" in proc.stdout and "fastest of 8 sub-blocks" in proc.stdout
