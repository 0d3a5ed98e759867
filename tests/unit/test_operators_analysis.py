"""Parent-side analysis of the operator layer on a committed real recording."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from diagnose.layers.operators.rows import merge_rows

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
