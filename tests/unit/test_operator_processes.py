"""The operator pass of a target that forks (issue 33), without running anything: the children's files as the
children.ChildPass writes them, read back (protocol.read_children) and merged with the main process's raw data
through the operators layer, as a run analyses the pass."""

from __future__ import annotations

import json

from diagnose import protocol
from diagnose.launch import PassOutcome
from diagnose.layers.operators import OperatorsLayer
from diagnose.protocol import ChildResult, PassResult
from diagnose.render import fmt
from diagnose.report.model import Report, StartedProcess, TargetInfo


def _row(calls, us, thread="MainThread", module=None):
    return {"name": "aten::mm", "input_shapes": [[2, 2], [2, 2]], "dtypes": ["float"], "source": "t.py:3",
            "parent": "", "calls": calls, "self_cpu_us": us, "total_cpu_us": us, "flops": 16, "cpu_memory_bytes": 0,
            "thread": thread, "module": module}


def _raw(rows, pid, modules=None):
    return {"rows": rows, "memory": {"allocations": 1, "peak_live_bytes": 10 * pid}, "events": 4,
            "trace": {"events_written": 1, "events_total": 1}, "modules": modules or {}, "module_roots": [""]}


def _trace(path, pid):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 1, "dur": 1, "pid": pid,
                                                 "tid": 1}]}))


def _pass(tmp_path, children, not_recorded=()):
    main = _raw([_row(1, 5.0, module="")], 1, modules={"": {"class": "Net", "calls": 2}})
    _trace(tmp_path / "trace.json", 1)
    for child in children:
        _trace(tmp_path / protocol.CHILDREN_DIR / str(child.pid) / "trace.json", child.pid)
        protocol.write(child, protocol.child_dir(str(tmp_path), child.pid) + "/" + protocol.RESULT_FILE)
    result = PassResult(name="operators", layer="operators", raw=main, forked=3, not_recorded=list(not_recorded))
    outcome = PassOutcome(name="operators", status="ok", result=result, returncode=0, elapsed_s=1.0,
                          children=protocol.read_children(str(tmp_path)))
    report = Report(target=TargetInfo(script="t.py"))
    return OperatorsLayer().analyse(outcome, report, str(tmp_path)), report


def test_forked_workers_rows_are_summed_with_the_main_processes_each_share_saying_its_role(tmp_path):
    workers = [ChildResult(pid=pid, role=protocol.POOL_WORKER, name=f"ForkPoolWorker-{pid}", ended="SIGTERM",
                           raw=_raw([_row(4, 20.0, module="")], pid, modules={"": {"class": "Net", "calls": 4}}))
               for pid in (7, 8)]
    status, report = _pass(tmp_path, workers)
    assert status.status == "ok"
    (row,) = report.operators
    assert (row.calls, row.self_cpu_us) == (9, 45.0)
    assert [(s.role, s.thread, s.calls, s.self_cpu_us) for s in row.processes] == [
        ("pool worker", "MainThread", 8, 40.0), ("main", "MainThread", 1, 5.0)]
    summary = report.operator_summary
    assert [(c.pid, c.role, c.name, c.ended, c.self_cpu_us) for c in summary.children] == [
        (7, "pool worker", "ForkPoolWorker-7", "SIGTERM", 20.0), (8, "pool worker", "ForkPoolWorker-8", "SIGTERM", 20.0)]
    assert summary.events == 12 and summary.memory.peak_live_bytes == 80  # summed, but the largest peak
    assert [m.calls for m in report.modules.rows if m.path == ""] == [10]  # the forwards of every process
    assert report.stacks[0].frames[0] == "pool worker"  # more than one place: each stack starts with its own
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in trace if e["name"] == "process_name"} == {
        "main", "pool worker 7 (ForkPoolWorker-7)", "pool worker 8 (ForkPoolWorker-8)"}
    notes = " ".join(status.notes)
    assert "forked 3 process(es); recorded 2 pool worker(s)" in notes and "1 left no recording" in notes
    assert fmt.places(report) == "pool worker (2 processes) 89%, main thread 11%"


def test_processes_started_from_a_fresh_interpreter_are_named_never_called_absent(tmp_path):
    spawned = [StartedProcess(how="spawn", command="python -c spawn_main", pid=9)]
    status, report = _pass(tmp_path, [], not_recorded=spawned)
    assert report.operator_summary.not_recorded == spawned
    notes = " ".join(status.notes)
    assert "not recorded: 1 started by multiprocessing's spawn method" in notes and "fork method" in notes
    assert fmt.places(report) is None  # one place only: the main thread
