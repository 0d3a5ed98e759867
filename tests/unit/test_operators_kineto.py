"""The operator recorder's reduction of raw kineto events matches torch's FunctionEvents.

`reduce_kineto` rebuilds the event tree from `kineto_results.events()` instead
of calling `prof.events()` (~100 µs per event). These tests compare what it
gives with the reference computed through `prof.events()`
(`_reference_collect`): on real profiles recorded the way the runner records
them, and on hand-made events covering the corners a small workload does not
reach (same-named only children, async and hidden events, other threads,
memory records outside every op, out-of-memory records).
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from torch.autograd import DeviceType  # noqa: E402

from diagnose.config import OperatorsOptions
from diagnose.protocol import PassSpec, WindowSpec
from diagnose.layers.operators.kineto import reduce_kineto  # noqa: E402
from diagnose.layers.operators.recorder import OperatorsRecorder  # noqa: E402
from operators_reference import _reference_collect  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "tests" / "data" / "operators" / "workload.py"


def _line(text):
    """`workload.py:LINE` of the first line holding `text`, as the recorder labels it."""
    for n, line in enumerate(WORKLOAD.read_text().splitlines(), 1):
        if text in line:
            return f"tests/data/operators/workload.py:{n}"
    raise AssertionError(text)


def _key(row):
    return (row["name"], json.dumps(row["input_shapes"]), json.dumps(row["dtypes"]), row["source"], row["library"],
            row["module"], row["parent"])


def assert_equivalent(fast, ref, fast_trace: Path, ref_trace: Path):
    # same rows, in the same order (merge_rows keeps the first part's dtypes)
    assert [_key(r) for r in fast["rows"]] == [_key(r) for r in ref["rows"]]
    assert len({_key(r) for r in fast["rows"]}) == len(fast["rows"])
    for f, r in zip(fast["rows"], ref["rows"]):
        assert f["calls"] == r["calls"], _key(f)
        assert f["flops"] == r["flops"], _key(f)
        assert f["cpu_memory_bytes"] == r["cpu_memory_bytes"], _key(f)
        assert f["self_cpu_us"] == pytest.approx(r["self_cpu_us"], rel=1e-9, abs=1e-6), _key(f)
        assert f["total_cpu_us"] == pytest.approx(r["total_cpu_us"], rel=1e-9, abs=1e-6), _key(f)
        assert f["min_self_us"] == pytest.approx(r["min_self_us"], rel=1e-9, abs=1e-6), _key(f)
        assert f["max_self_us"] == pytest.approx(r["max_self_us"], rel=1e-9, abs=1e-6), _key(f)
    # torch's FunctionEvents have no counterpart of the bytes freed inside operators (test_hand_made_events_...)
    assert {k: v for k, v in fast["memory"].items() if k != "freed_in_operators_bytes"} == ref["memory"]
    assert fast["events"] == ref["events"]
    assert fast["attribution_overhead_us"] == pytest.approx(ref["attribution_overhead_us"], rel=1e-9, abs=1e-6)
    assert {k: v for k, v in fast["trace"].items() if k != "span_s"} == \
        {k: v for k, v in ref["trace"].items() if k != "span_s"}
    assert fast["trace"]["span_s"] == pytest.approx(ref["trace"]["span_s"], abs=1e-9)

    fast_doc, ref_doc = json.loads(fast_trace.read_text()), json.loads(ref_trace.read_text())
    assert fast_doc["displayTimeUnit"] == ref_doc["displayTimeUnit"] == "ms"
    fast_events, ref_events = fast_doc["traceEvents"], ref_doc["traceEvents"]
    # reduce_kineto names the recording thread's track after its Python thread (the reference writes no metadata)
    named = [e for e in fast_events if e["ph"] == "M"]
    assert all(e["name"] == "thread_name" and e["args"]["name"] == "MainThread" for e in named)
    fast_events = [e for e in fast_events if e["ph"] != "M"]
    assert len(fast_events) == len(ref_events) == fast["trace"]["events_written"]
    for f, r in zip(fast_events, ref_events):
        assert f["ts"] == pytest.approx(r["ts"], abs=1e-6)
        assert f["dur"] == pytest.approx(r["dur"], abs=1e-6)
        assert {k: v for k, v in f.items() if k not in ("ts", "dur")} == \
            {k: v for k, v in r.items() if k not in ("ts", "dur")}


def _spec(function=None, window=None, operators=OperatorsOptions()):
    return PassSpec(name="operators", layer="operators", script=str(WORKLOAD), display_script=str(WORKLOAD), argv=(),
                    function=function, cwd=str(ROOT), window=window, operators=operators)


def _record(spec, tmp_path, run):
    """Profile `run` under the recorder as the runner does; return (raw, reference)."""
    rec = OperatorsRecorder(spec)
    rec.prepare()
    rec.start()
    run(rec)
    rec.stop()
    rec.release()
    raw = rec.collect(str(tmp_path))
    assert rec.profile is not None and rec.results is not None
    ref = _reference_collect(rec.profile.events(), rec.results.events(),
                             str(tmp_path / "reference.json"), rec.max_trace_events)
    assert_equivalent(raw, ref, tmp_path / "trace.json", tmp_path / "reference.json")
    return raw


@pytest.fixture(scope="module")
def workload():
    ns = runpy.run_path(str(WORKLOAD), run_name="__diagnose_target__")
    ns["step"]()  # warm-up, as the runner's function mode does
    return ns


def test_script_mode_matches_prof_events(tmp_path, workload):
    spec = _spec()

    def run(rec):
        workload["step"]()
        workload["step"]()

    raw = _record(spec, tmp_path, run)
    rows = raw["rows"]
    # the fixture does reach what the comparison is about
    addmm = [r for r in rows if r["name"] == "aten::addmm"]
    assert addmm and all(r["flops"] > 0 and r["parent"] == "aten::linear" for r in addmm)
    assert {r["source"] for r in addmm} == {_line("model(inputs)")}
    assert any(r["source"] == _line("loss.backward()") and "Backward" in r["parent"] for r in rows)  # loss.backward()
    assert any(r["source"] == _line("out[i] =") and r["parent"] == "" for r in rows)  # the Python loop
    assert any(r["cpu_memory_bytes"] > 0 for r in rows)
    assert raw["memory"]["allocations"] > 0 and raw["attribution_overhead_us"] > 0
    assert raw["window"] is None and not raw["trace"]["truncated"]


def test_schedule_window_matches_prof_events(tmp_path, workload):
    # iters > profile_iters: the profiler schedule records a window, whose
    # results arrive through on_trace_ready; a small trace cap truncates.
    spec = _spec(function="step", window=WindowSpec(skip=0, steps=4),
                 operators=OperatorsOptions(profile_iters=2, trace_max_events=40))

    def run(rec):
        for _ in range(spec.window.steps):
            workload["step"]()
            rec.step()

    raw = _record(spec, tmp_path, run)
    assert raw["window"] and raw["recorded_iters"] == 2
    assert raw["trace"]["truncated"] and raw["trace"]["events_written"] == 40
    assert sum(r["calls"] for r in raw["rows"] if r["name"] == "aten::addmm") == 2 * 2  # two Linear, two steps


def test_nothing_recorded(tmp_path):
    rec = OperatorsRecorder(_spec())
    raw = rec.collect(str(tmp_path))
    ref = _reference_collect([], [], str(tmp_path / "reference.json"), rec.max_trace_events)
    assert_equivalent(raw, ref, tmp_path / "trace.json", tmp_path / "reference.json")
    assert raw["rows"] == [] and raw["events"] == 0
    assert (tmp_path / "trace.json").read_text() == (tmp_path / "reference.json").read_text()


# ------------------------------------------------------------ hand-made events

_DEFAULTS = {
    "overload_name": "", "concrete_inputs": [], "kwinputs": {}, "stack": [], "scope": 0, "sequence_nr": -1,
    "device_index": 0, "device_resource_id": 0, "activity_type": "cpu_op", "metadata_json": "",
    "extra_meta": {}, "flow_id": 0, "flow_type": 0, "flow_start": False, "external_id": 0,
    "linked_correlation_id": 0, "structured_input_shapes": [], "structured_input_strides": [],
    "python_id": -1, "python_parent_id": -1, "python_module_id": -1, "fwd_thread_id": 0,
    "privateuse1_elapsed_us": 0, "cuda_elapsed_us": 0,
}
BASE = 1_732_000_000_123_456_789  # kineto times are absolute nanoseconds


class FakeEvent:
    """The part of torch._C._autograd._KinetoEvent both reductions read."""

    _next_id = 1

    def __init__(self, name, start, end=None, tid=1, end_tid=None, shapes=(), dtypes=(), flops=0, nbytes=0,
                 user=False, python=False, device=DeviceType.CPU, hidden=False, is_async=False, seq=-1, fwd_tid=0):
        self._name, self._start, self._end = name, BASE + start, BASE + (start if end is None else end)
        self._tid, self._end_tid = tid, tid if end_tid is None else end_tid
        self._shapes, self._dtypes, self._flops, self._nbytes = [list(s) for s in shapes], list(dtypes), flops, nbytes
        self._user, self._python, self._device, self._hidden, self._async = user, python, device, hidden, is_async
        self._seq, self._fwd_tid = seq, fwd_tid
        self._id = FakeEvent._next_id
        FakeEvent._next_id += 1

    def name(self): return self._name
    def start_ns(self): return self._start
    def end_ns(self): return self._end
    def duration_ns(self): return self._end - self._start
    def start_thread_id(self): return self._tid
    def end_thread_id(self): return self._end_tid
    def is_async(self): return self._async
    def device_type(self): return self._device
    def is_hidden_event(self): return self._hidden
    def is_user_annotation(self): return self._user
    def is_python_function(self): return self._python
    def shapes(self): return [list(s) for s in self._shapes]
    def dtypes(self): return list(self._dtypes)
    def flops(self): return self._flops
    def nbytes(self): return self._nbytes
    def correlation_id(self): return self._id
    def sequence_nr(self): return self._seq
    def fwd_thread_id(self): return self._fwd_tid

    def __getattr__(self, attr):
        if attr in _DEFAULTS:
            return lambda: _DEFAULTS[attr]
        raise AttributeError(attr)


class FakeResults:
    def __init__(self, events, trace_start):
        self._events, self._trace_start = events, BASE + trace_start

    def events(self):
        return list(self._events)

    def trace_start_ns(self):
        return self._trace_start


def _mem(t, nbytes, device=DeviceType.CPU, tid=1):
    return FakeEvent("[memory]", t, tid=tid, nbytes=nbytes, device=device)


def _fake_results():
    E = FakeEvent
    f23 = {"shapes": [[2, 3]], "dtypes": ["float"]}
    events = [
        # another thread first, overlapping thread 1 in time
        E("aten::x", 500, 200_000, tid=2, **f23),
        E("aten::y", 50_000, 60_000, tid=2),
        E("aten::a", 55_000, 56_000, tid=2, **f23),
        _mem(25_000, 64),  # inside ops of both threads
        E("ProfilerStep#7", 0, 250_000, user=True),
        E("diagnose@f.py:1", 100, 90_000, user=True),
        # a chain of same-named only children: torch keeps the outermost
        E("aten::a", 1_000, 60_000, **f23),
        E("aten::a", 1_000, 60_000, **f23),
        E("aten::a", 2_000, 59_001, **f23),
        E("aten::b", 20_000, 30_000, shapes=[[2, 3], []], dtypes=["float", "Scalar"], flops=12),
        E("aten::c", 30_000, 50_000, **f23),  # starts where b ends: a sibling
        _mem(30_000, 16),   # on the boundary of b and c: counted in both
        _mem(40_000, -32),
        _mem(45_000, 128, device=DeviceType.MKLDNN),  # CPU memory, not in memory_totals
        _mem(46_000, 256, device=DeviceType.CUDA),
        E("[OutOfMemory]", 47_000, nbytes=1024),
        E("profiler::_record_function_enter_new", 61_000, 62_000),  # dropped by torch
        E("aten::is_leaf", 62_500, 63_000),
        E("aten::d", 70_000, 80_000, hidden=True),
        E("aten::e", 70_000, 80_000, end_tid=3),  # ends on another thread: async
        E("aten::f", 70_000, 85_000, is_async=True),
        E("aten::f2", 71_000, 72_000),
        E("diagnose@?", 86_000, 89_000, user=True),
        E("aten::g", 87_000, 88_000),
        # partial overlap: q is no child of p
        E("aten::p", 100_000, 120_000),
        E("aten::q", 110_000, 130_000),
        E("aten::zero", 140_000, 140_000),
        _mem(140_000, 8),
        # identical intervals, different names: the first is the parent
        E("aten::t1", 150_000, 160_000),
        E("aten::t2", 150_000, 160_000),
        E("script.py(3): f", 170_000, 180_000, python=True),
        E("aten::h", 171_000, 172_000),
        # a same-named child with a sibling stays
        E("aten::k", 190_000, 200_000),
        E("aten::k", 191_000, 195_000),
        E("aten::m", 196_000, 197_000),
        E("aten::gpu", 210_000, 220_000, device=DeviceType.CUDA),
        _mem(300_000, 4),   # inside no op: top-level events of their own
        _mem(300_500, -4),
        E("aten::late", 299_000, 299_500, tid=4),
    ]
    return FakeResults(events, trace_start=-12_345)


def _torch_reference(results, path, max_events):
    from torch.autograd.profiler import profile as autograd_profile
    from torch.autograd.profiler_util import EventList

    parsed = autograd_profile._parse_kineto_results(SimpleNamespace(use_device=None), results)
    events = EventList(parsed, use_device=None, profile_memory=True, with_flops=True)
    events._build_tree()
    return _reference_collect(events, results.events(), path, max_events)


@pytest.mark.parametrize("max_events", [100, 7])
def test_hand_made_events_match_torch(tmp_path, max_events):
    results = _fake_results()
    raw = reduce_kineto(results, str(tmp_path / "trace.json"), max_events)
    ref = _torch_reference(results, str(tmp_path / "reference.json"), max_events)
    assert_equivalent(raw, ref, tmp_path / "trace.json", tmp_path / "reference.json")
    assert (tmp_path / "trace.json").read_text() == (tmp_path / "reference.json").read_text()

    rows = {(r["name"], r["parent"], r["source"]): r for r in raw["rows"]}
    a = rows[("aten::a", "", "f.py:1")]
    assert a["calls"] == 1  # the chain folded into one
    assert a["self_cpu_us"] == pytest.approx(59.0 - 10.0 - 20.0)  # minus b and c, the lifted grandchildren
    assert rows[("aten::b", "aten::a", "f.py:1")]["flops"] == 12
    assert rows[("aten::a", "aten::y", None)]["calls"] == 1  # thread 2
    assert ("aten::g", "", None) in rows  # under "diagnose@?"
    assert ("aten::h", "", None) in rows  # a Python function is no operator
    assert ("aten::k", "aten::k", None) in rows  # has a sibling: kept
    assert ("aten::t2", "aten::t1", None) in rows
    assert ("aten::q", "", None) in rows  # not inside p
    assert ("aten::f2", "", "f.py:1") in rows  # async events are no parents
    assert rows[("[OutOfMemory]", "aten::c", "f.py:1")]["cpu_memory_bytes"] == 1024
    # of the 36 bytes freed, the 32 at 40_000 were freed inside aten::a, the 4 at 300_500 inside no operator
    assert raw["memory"] == {"allocations": 4, "allocated_bytes": 92, "freed_bytes": 36, "peak_live_bytes": 80,
                             "freed_in_operators_bytes": 32}


def test_autocast_entries_are_counted_at_the_user_line_that_entered_it():
    from diagnose.layers.operators.recorder import AutocastEntries
    from diagnose.usercode import UserCode

    entries = AutocastEntries(UserCode(__file__))
    entries.install()
    try:
        for i in range(3):
            with torch.inference_mode(i == 0), torch.autocast("cpu", dtype=torch.bfloat16):  # entered here, three times
                pass
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):  # casts nothing: not counted
            pass
    finally:
        entries.uninstall()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # after uninstall: not counted
        pass
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text.endswith("# entered here, three times"))
    (row,) = entries.rows()
    assert row["source"].endswith(f"test_operators_kineto.py:{line}"), row
    assert (row["device"], row["dtype"], row["entries"], row["inference_mode"]) == ("cpu", "bfloat16", 3, 1)
    assert not hasattr(torch.amp.autocast_mode.autocast.__enter__, "__wrapped__")
