"""Targets that start processes or threads (issue 33): nothing of the runner's acts in a child it did not mean to
instrument, and every child's torch work is seen, or said not to be.

Every forked child used to inherit the runner's os._exit hook and its SIGTERM handler: `with Pool(...)` ends its
workers with SIGTERM, so each worker printed a KeyboardInterrupt traceback into the user's output and then wrote
the pass's result file from its own process. Now a forked child records itself from the fork to its end and
writes its own file (children.ChildPass); the parent merges them (layers/operators/processes.py). The cases are
the fault table's (tests/data/processes/cases.py), each run once here with the operator pass only;
benchmarks/process_faults.py runs each five times under the default layers.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, line_of, run_cli

sys.path.insert(0, str(REPO / "tests" / "data" / "processes"))
from cases import CASES, judge  # noqa: E402

BY_NAME = {case.name: case for case in CASES}
# the close/join and `with` variants of spawn and forkserver pools differ only in how the parent ends workers it
# cannot record: one of each here, both in the benchmark; the fork pool closed by `with` and the thread pool have
# tests of their own below
ONCE = [c for c in CASES if c.name not in ("Pool spawn, close/join", "Pool forkserver, with", "Pool fork, with",
                                           "ThreadPoolExecutor(4) serving a model")]


@pytest.mark.parametrize("case", ONCE, ids=[c.name for c in ONCE])
def test_each_case_of_the_fault_table_once(tmp_path, case):
    run = run_cli("--force", "--layers", "operators", *case.command, outdir=tmp_path / "r")
    report = run.report if (tmp_path / "r" / "report.json").exists() else None
    verdict = judge(case, run.code, run.stdout, run.stderr, report)
    assert verdict.ok, (verdict.why, run.stderr[-2000:])
    summary = report["operator_summary"]
    recorded = {child["role"] for child in summary["children"] if child["error"] is None}
    assert recorded == set(case.roles) - {"main"}, summary["children"]
    assert all(child["pid"] > 0 and child["ended"] in ("os._exit", "SIGTERM", "exit") for child in summary["children"])
    notes = " ".join(report["layers"]["operators"]["notes"])
    if case.not_recorded:
        assert "not recorded" in notes and "fork method" in notes, notes


def test_a_pool_closed_by_with_prints_what_the_plain_run_prints_and_its_workers_matmuls_are_in_the_table(tmp_path):
    case = BY_NAME["Pool fork, with"]
    plain = subprocess.run([sys.executable, *case.command], cwd=REPO, capture_output=True, text=True, timeout=120,
                           check=False)
    assert plain.returncode == 0 and plain.stdout.strip() == "sum 496", plain
    run = run_cli("--force", "--layers", "operators,threads", *case.command, outdir=tmp_path / "r")
    verdict = judge(case, run.code, run.stdout, run.stderr, run.report, plain=(plain.stdout, plain.stderr))
    assert verdict.ok, (verdict.why, run.stderr[-2000:])
    r = run.report
    assert r["run"]["exit_code"] == 0 and r["run"]["error"] is None
    # no pass hung: a worker whose SIGTERM an OpenMP thread took, its main thread waiting in sem_wait, outlived
    # Pool.terminate() until the operator pass stalled (60 s) in 2 of 3 clean-clone runs (children.wake_main)
    assert r["layers"]["operators"]["status"] == "ok", r["layers"]["operators"]
    assert not r.get("hangs"), r.get("hangs")
    assert "forked 4 process(es)" in " ".join(r["layers"]["operators"]["notes"])
    mm = [row for row in r["operators"] if row["name"] == "aten::mm"]
    assert sum(row["calls"] for row in mm) == 32, mm  # one 200x200 matmul per task, all in the workers
    assert {share["role"] for row in mm for share in row["processes"]} == {"pool worker"}
    assert all(row["source"] == "tests/data/processes/fork_pool.py:15" for row in mm)
    workers = r["operator_summary"]["children"]
    assert len(workers) == 4 and {w["name"] for w in workers} == {f"ForkPoolWorker-{i}" for i in range(1, 5)}
    assert len(r["threads"]["processes"]) > 1  # the threads layer sees the workers


def test_a_model_called_from_worker_threads_has_its_operators_recorded_per_thread(tmp_path):
    """torch.profiler records only the thread that started it unless told otherwise (profile_all_threads): every
    forward here runs in a ThreadPoolExecutor's thread, so the table was empty ("no torch operators"). The first
    pass sees the model called off the main thread, and the operator pass then records every thread, each row
    naming the threads it ran in, and each folded stack starting with its thread."""
    case = BY_NAME["ThreadPoolExecutor(4) serving a model"]
    # a window longer than the script (480 forwards): it runs to its end, and every forward after the skipped ones
    # is in the window (--layers operators alone does not stretch the window to 1 s, session.Plan.long_window)
    run = run_cli("--layers", "operators", "--steps", "1000", *case.command, outdir=tmp_path / "r")
    r = run.report
    verdict = judge(case, run.code, run.stdout, run.stderr, r)
    assert verdict.ok, (verdict.why, run.stderr[-2000:])
    assert r["layers"]["operators"]["status"] == "ok"
    assert any("every thread was recorded" in n for n in r["layers"]["operators"]["notes"])
    # 30 x 16 forwards, each one step: four threads that entered the first forward at once each hooked the model,
    # and every forward was counted two to four times (CI saw 1,920 steps)
    assert r["steps"]["steps_seen"] == 480, r["steps"]
    steps = r["steps"]["window_last"] - r["steps"]["window_first"] + 1  # one step per forward (outermost module)
    addmm = sum(o["calls"] for o in r["operators"] if o["name"] == "aten::addmm")
    # two Linear layers per forward; the window's edges may cut a forward or two in flight in other threads
    assert abs(addmm - 2 * steps) <= 16, (addmm, steps)
    assert any(o["source"] == "tests/data/processes/thread_pool.py:10" for o in r["operators"])
    threads = {share["thread"] for o in r["operators"] if o["name"] == "aten::addmm" for share in o["processes"]}
    assert len({t for t in threads if t and t.startswith("ThreadPoolExecutor")}) >= 2, threads
    folded = (tmp_path / "r" / "stacks.folded").read_text().splitlines()
    assert all(line.startswith(("thread ", "main thread", "an unnamed thread")) for line in folded), folded[:5]


@pytest.mark.parallel_safe  # structure only: which pool a thread is in, not how long it waited
def test_a_python_thread_the_target_starts_is_its_own_pool_not_torchs(tmp_path):
    """/proc names a thread started with Python's threading like its process, as it does OpenMP's workers: a busy
    numpy producer thread was counted in torch's intra-op pool, and an oversubscription title blamed three busy
    intra-op threads. The uninstrumented pass records the threads the target starts; the sampler's tids meet them."""
    script = REPO / "tests" / "data" / "processes" / "producer_thread.py"
    run = run_cli("--force", "--layers", "threads", str(script.relative_to(REPO)), outdir=tmp_path / "r")
    assert run.code == 0, run.stderr[-2000:]  # (the pass may end the script once its window of steps is measured)
    t = run.report["threads"]
    (started,) = t["python_threads"]
    assert started["name"].startswith("Thread-") and started["target"] == "produce"
    assert started["defined_at"] == f"tests/data/processes/producer_thread.py:{line_of(script, 'def produce(')}"
    assert started["started_at"] == f"tests/data/processes/producer_thread.py:{line_of(script, '.start()')}"
    target = t["processes"][0]
    assert target["role"] == "target" and target["pid"] == started["pid"] and target["threads"].get("python") == 1
    # it ran numpy all along: a busy thread, in its own pool (the threshold is 1% of a CPU)
    (busy,) = [b for b in t["busy_threads"] if b["tid"] == started["tid"]]
    assert busy["pool"] == "python", t["busy_threads"]
    assert f"Python thread {started['name']!r} runs produce()" in (tmp_path / "r" / "report.md").read_text()
    for f in run.report["findings"]:  # whether the threads queued is the machine's: if they did, the thread is named
        if f["kind"] == "oversubscription" and f["evidence"]["cause"] == "one_process":
            assert f["evidence"]["python_threads"][0]["name"] == started["name"], f
