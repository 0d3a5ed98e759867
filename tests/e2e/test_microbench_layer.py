"""diagnose's microbench layer through the real CLI: sequential_operator on a planted sort.

The sort's run is examples/sequential_sort.py's whole diagnosis (every default layer), the one test_examples.py
would make for it: one run of a 4M sort (0.6 s a call, ~27 s a run) serves both, so its row is here.
"""

from __future__ import annotations

import ast

import pytest

from conftest import EXAMPLES, expected_stake, line_of, rule_findings, run_cli

from diagnose.findings import microbench

SORT = EXAMPLES / "sequential_sort.py"


@pytest.fixture(scope="module")
def sort_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sort") / "report"
    # six steps of ~0.4 s: --skip-steps 1 gives the loop detector's window five of them (the thread findings
    # need 0.5 s)
    run = run_cli("examples/sequential_sort.py", "--microbench-budget", "20", "--skip-steps", "1", outdir=out)
    assert run.code == 0, run.stderr
    return run


def test_sort_is_a_sequential_operator_at_its_line_with_measured_times(sort_run):
    r = sort_run.report
    assert r["layers"]["microbench"]["status"] == "ok"
    sort_rows = [m for m in r["microbenchmarks"] if m["op"] == "aten::sort"]
    assert sorted(m["threads"] for m in sort_rows) == [1, 2]
    assert sort_rows[0]["input_shapes"][0] == [4000000]
    # a 4M sort: tens of ms at least on any CPU
    assert all(m["median_us"] > 50_000 for m in sort_rows), sort_rows
    assert "Micro-benchmarks" in sort_run.stdout
    # a finding, or not confirmed when a neighbour's load made its measurement noisy or contended (doubted), exactly
    # when the rule makes one of the report's own numbers: how much a 4M sort gains from a second thread is this
    # machine's (the Xeon measured 1.32x, 1.20-1.45x, against the 1.25x line: some runs' intervals stay above it)
    found = [g for f in r["findings"] for g in (f, *f["also"])] + [n["finding"] for n in r["not_confirmed"]]
    found = [f for f in found if f["kind"] == "sequential_operator" and f["op"] == "aten::sort"]
    expected = [f for f in rule_findings(r, microbench.sequential_operator) if f.op == "aten::sort"]
    assert len(found) == len(expected) <= 1, (found, expected)
    if not found:
        return
    (f,) = found
    # doubted (noisy or contended in this run): not confirmed, with its doubt and the command that measures it
    # again (findings/verdict.py), the honest outcome on a shared machine
    assert all(n["finding"]["doubts"] and n["reproduce"] for n in r["not_confirmed"] if n["finding"] is f), f
    assert f["location"] == f"examples/sequential_sort.py:{line_of(SORT, 'torch.sort(')}"
    e = f["evidence"]
    # the finding follows from its numbers: the speedup's interval reaches under the 1.25x line, and a point at or
    # above the line is borderline (a fresh clone on the Xeon measured 1.32x, 1.20-1.45x: the point is not the
    # rule's, and how much a 4M sort gains from a second thread is this machine's)
    assert e["speedup"] / (1 + e["speedup_noise"]) < e["threshold_speedup"] == 1.25, e
    if e["speedup"] >= e["threshold_speedup"]:
        assert f["borderline"] and f["borderline"]["threshold"] == 1.25, f
    # the counts were timed interleaved, beside the parallel reference: the turns pair (at least 4 a count), and
    # the speedup's noise is theirs
    one, two = (next(m for m in sort_rows if m["threads"] == t) for t in (1, 2))
    assert len(one["turns_us"]) == len(two["turns_us"]) >= 4 and e["paired_turns"] == len(one["turns_us"]), e
    assert two["reference_speedup"] and e["reference_speedup"] == two["reference_speedup"], (two, e)
    assert f["severity"] in ("high", "medium", "low")
    # where it ranks follows the numbers (test_examples.py's check on every example's diagnosis): every finding
    # above the one holding it expects more time at stake (findings/stake.py rank_key)
    ranked = [i for i, g in enumerate(r["findings"]) if f in (g, *g["also"])]
    for i in ranked:  # none when doubted
        assert all(expected_stake(g) >= expected_stake(r["findings"][i]) - 0.01 for g in r["findings"][:i]), \
            r["findings"][:i + 1]


def test_reproducer_is_standalone_plain_torch(sort_run):
    rel = next(m["reproducer"] for m in sort_run.report["microbenchmarks"] if m["op"] == "aten::sort")
    path = sort_run.outdir / rel
    source = path.read_text()
    imported = {n.names[0].name.split(".")[0] for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import)}
    imported |= {n.module.split(".")[0] for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)}
    assert "torch" in imported and not imported & {"diagnose", "microbench"}
    assert "4000000" in source
    md = (sort_run.outdir / "report.md").read_text()
    assert "## Micro-benchmarks" in md and "reproducers/" in md


@pytest.mark.parallel_safe  # no micro-benchmark runs: nothing measured
def test_budget_zero_turns_the_layer_off(tmp_path):
    run = run_cli("examples/sequential_sort.py:step", "--warmup", "0", "--iters", "1",
                  "--layers", "operators,microbench", "--microbench-budget", "0", outdir=tmp_path / "r")
    assert run.code == 0, run.stderr
    layer = run.report["layers"]["microbench"]
    assert layer["status"] == "skipped" and "--microbench-budget 0" in layer["reason"]
    assert run.report["microbenchmarks"] == []


def test_attention_bmm_is_benchmarked_at_its_recorded_shapes_across_threads(tmp_path):
    run = run_cli("examples/attention.py:step", "--warmup", "1", "--iters", "4", "--layers", "operators,microbench",
                  "--microbench-budget", "20", "--microbench-top", "3", outdir=tmp_path / "r")
    assert run.code == 0, run.stderr
    r = run.report
    recorded = {repr(o["input_shapes"]) for o in r["operators"] if o["name"] == "aten::bmm"}
    bmm = [m for m in r["microbenchmarks"] if m["op"] == "aten::bmm"]
    assert bmm, [m["op"] for m in r["microbenchmarks"]]
    assert all(repr(m["input_shapes"]) in recorded for m in bmm)
    assert {m["threads"] for m in bmm} >= {1, len(__import__("os").sched_getaffinity(0))}
    one = [m for m in bmm if m["threads"] == 1]
    assert one and one[0]["gflops_per_s"] > 1 and one[0]["median_us"] > 0
    # the transposed k of q @ k^T is rebuilt with its recorded (non-contiguous) strides
    qk = [m for m in bmm if m["input_shapes"] == [[32, 512, 64], [32, 64, 512]]]
    assert qk and all(m["strides"][1] == [32768, 1, 64] and m["layout"] == "as recorded (strides)" for m in qk)
