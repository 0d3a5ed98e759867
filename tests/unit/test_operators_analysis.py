"""Parent-side analysis of the operator layer on a committed real recording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose.layers.operators.rows import merge_rows
from diagnose.report.model import SourceShare
from diagnose.report.rows import TIE_SHARE, sum_rows, tie_share, tied_first, undisturbed

DATA = Path(__file__).resolve().parents[1] / "data" / "operators_raw_mlp_step.json"


@pytest.fixture(scope="module")
def raw():
    return json.loads(DATA.read_text())["raw"]


def test_one_row_per_operator_and_shape(raw):
    rows = merge_rows(raw["rows"])
    keys = [(r.name, json.dumps(r.input_shapes)) for r in rows]
    assert len(keys) == len(set(keys))
    assert sum(r.calls for r in rows) == sum(r["calls"] for r in raw["rows"])
    assert sum(r.self_pct for r in rows) == pytest.approx(100, abs=0.01)
    assert [r.self_cpu_us for r in rows] == sorted((r.self_cpu_us for r in rows), reverse=True)


def test_sources_and_flops(raw):
    rows = merge_rows(raw["rows"])
    addmm = [r for r in rows if r.name == "aten::addmm"]
    assert len(addmm) == 3  # the three Linear layers, each at its own shape
    for r in addmm:
        assert r.source == "examples/mlp.py:27"
        assert r.calls == 3 and r.flops > 0
        assert r.gflops_per_s == pytest.approx(r.flops / (r.total_cpu_us * 1e3), rel=1e-3)
    mm = [r for r in rows if r.name == "aten::mm"]
    assert mm and {r.source for r in mm} == {"examples/mlp.py:30"}
    # the copy inside addmm (bias broadcast) is known to be called by addmm, not by Python
    copies = [r for r in rows if r.name == "aten::copy_"]
    assert any("aten::addmm" in r.called_by for r in copies)


def test_source_is_the_dominant_line():
    raw_rows = [
        {"name": "aten::add", "input_shapes": [[4], [4]], "dtypes": ["float", "float"], "source": "a.py:1",
         "parent": "", "calls": 1, "self_cpu_us": 10.0, "total_cpu_us": 10.0, "flops": 0, "cpu_memory_bytes": 16},
        {"name": "aten::add", "input_shapes": [[4], [4]], "dtypes": ["float", "float"], "source": "a.py:9",
         "parent": "", "calls": 5, "self_cpu_us": 30.0, "total_cpu_us": 30.0, "flops": 0, "cpu_memory_bytes": 80},
        {"name": "aten::add", "input_shapes": [[8], [8]], "dtypes": ["float", "float"], "source": None,
         "parent": "", "calls": 1, "self_cpu_us": 60.0, "total_cpu_us": 60.0, "flops": 0, "cpu_memory_bytes": 0},
    ]
    rows = merge_rows(raw_rows)
    assert [(r.input_shapes, r.source, r.calls, r.self_pct) for r in rows] == [
        ([[8], [8]], None, 1, 60.0),
        ([[4], [4]], "a.py:9", 6, 40.0),
    ]
    assert [(s.location, s.calls) for s in rows[1].sources] == [("a.py:9", 5), ("a.py:1", 1)]
    assert rows[1].gflops_per_s is None and rows[1].flops is None


def test_lines_doing_equal_work_give_the_same_source_in_every_run():
    """Two .contiguous() calls of one shape (examples/contiguous_copies.py) measure a few percent apart, either
    way round: within report.rows.TIE_SHARE of the first, the lines come in source order, so the row's source
    (and every finding placed at it) is the same run after run; a line clearly ahead keeps its place."""
    def raw(line: int, us: float) -> dict:
        return {"name": "aten::copy_", "input_shapes": [[64, 64], [64, 64]], "dtypes": ["float", "float"],
                "source": f"b.py:{line}", "parent": "aten::clone", "calls": 8, "self_cpu_us": us,
                "total_cpu_us": us, "flops": 0, "cpu_memory_bytes": 0}

    for first, second in ((100.0, 97.0), (97.0, 100.0)):
        (row,) = merge_rows([raw(19, first), raw(15, second), raw(30, 20.0)])
        assert [s.location for s in row.sources] == ["b.py:15", "b.py:19", "b.py:30"] and row.source == "b.py:15"
    (row,) = merge_rows([raw(19, 100.0), raw(15, 80.0)])
    assert row.source == "b.py:19"
    # the tie's width follows the row's per-call spread: contiguous_copies.py's copies took 5.2-16.5 ms a call,
    # 16 calls a line, and measured 184 and 161 ms (14%): within 18%, tied; 2,000 calls of a steady kernel, 10%
    assert tie_share(5233.0, 16496.0, 10769.0, 16) == pytest.approx(0.185, abs=0.002)
    assert tie_share(90.0, 110.0, 100.0, 2000) == TIE_SHARE and tie_share(None, None, 1.0, 1) == TIE_SHARE


def _by_key(rows):
    return {(r.name, json.dumps(r.input_shapes)): r for r in rows}


def test_tables_summed_again_give_the_table_of_all_their_raw_rows(raw):
    # two ranks' (or nodes') tables summed by `diagnose merge` agree with one table of both ranks' raw rows:
    # report/rows.py's sum_rows does both
    halves = [raw["rows"][0::2], raw["rows"][1::2]]
    summed = _by_key(sum_rows(row for h in halves for row in merge_rows(h)))
    whole = _by_key(merge_rows(raw["rows"]))
    assert summed.keys() == whole.keys()
    for key, row in whole.items():
        got = summed[key]
        assert (got.calls, got.flops, got.source, got.cpu_memory_bytes) == (row.calls, row.flops, row.source,
                                                                            row.cpu_memory_bytes)
        assert got.self_cpu_us == pytest.approx(row.self_cpu_us, abs=0.002)
        assert got.self_pct == pytest.approx(row.self_pct, abs=0.002)
        assert [(s.location, s.calls) for s in got.sources] == [(s.location, s.calls) for s in row.sources]
        assert got.called_by.keys() == row.called_by.keys()


def test_summed_rows_keep_every_part_of_modules_bytes_and_call_times():
    def raw_row(module, calls, lo, hi):
        return {"name": "aten::mm", "input_shapes": [[2, 3], [3, 4]], "dtypes": ["float", "float"],
                "source": "t.py:5", "parent": "", "module": module, "library": None, "calls": calls,
                "self_cpu_us": 10.0 * calls, "total_cpu_us": 10.0 * calls, "min_self_us": lo, "max_self_us": hi,
                "flops": 48 * calls, "cpu_memory_bytes": 0, "input_strides": [[3, 1], [4, 1]],
                "work": {"flops": 48, "bytes": 100}}

    node0 = merge_rows([raw_row("0", 2, 4.0, 12.0)], {"0": "Linear"})
    node1 = merge_rows([raw_row("1", 3, 6.0, 30.0)], {"1": "Linear"})
    (row,) = sum_rows(node0 + node1)
    assert (row.calls, row.self_cpu_us, row.self_pct, row.bytes) == (5, 50.0, 100.0, 500)
    assert (row.min_self_us, row.max_self_us) == (4.0, 30.0)
    assert [(m.module, m.module_class, m.calls) for m in row.modules] == [("1", "Linear", 3), ("0", "Linear", 2)]
    assert (row.module, row.contiguous) == ("1", [True, True])
    assert node0[0].calls == 2 and node0[0].bytes == 200  # the inputs are not changed


def test_lines_doing_the_same_undisturbed_work_are_tied_whatever_their_times():
    # contiguous_copies: 16 copies a line, fastest calls 12.2 and 13.2 ms, summed 252 and 195 ms in one run (page
    # faults on one line's outputs, which line depends on the allocator's state): tied, in source order
    a = SourceShare("m.py:19", 16, 252000.0, min_self_us=12200.0)
    b = SourceShare("m.py:15", 16, 195000.0, min_self_us=13200.0)
    ranked = [a, b]
    assert tied_first(ranked, lambda s: s.self_cpu_us, lambda s: s.location)[0] is a  # by time alone: 23% apart
    assert tied_first(ranked, lambda s: s.self_cpu_us, lambda s: s.location, work=undisturbed)[0] is b
    # a line whose fastest call is twice as long does other work (a transposed read): not tied
    c = SourceShare("m.py:15", 16, 195000.0, min_self_us=6000.0)
    assert tied_first([a, c], lambda s: s.self_cpu_us, lambda s: s.location, work=undisturbed)[0] is a
    # unknown fastest calls (an older report): the times decide
    d = SourceShare("m.py:15", 16, 195000.0)
    assert undisturbed(d) is None
    assert tied_first([a, d], lambda s: s.self_cpu_us, lambda s: s.location, work=undisturbed)[0] is a
