"""`diagnose --nproc-per-node 2` through the real CLI and the real torchrun (gloo, 2 ranks), and
`diagnose merge` on committed per-node reports.

One run per setting (module-scoped): each rank at all usable CPUs (the planted oversubscription,
operators + threads), each rank at its fair share (threads only), a rank that fails. Runs are
short. The planted run takes 30 DDP steps: at 8, the rendezvous and DDP's start-up broadcast (one
thread per rank) fill most of the sampled window and the mean runnable threads measured 2.3-2.5 on
2 CPUs, a hair above the rule's gate (one CI run fell under it); at 30 they measured 3.3-3.7. The
fair-share run keeps 8 steps: it measured 1.3-1.4 runnable there (1.7-1.9 at 30, where gloo's
threads overlap the backward pass).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import DIAGNOSE, EXAMPLES, REPO, CliRun, assert_one_line_error, line_of, run_cli

USABLE = len(os.sched_getaffinity(0))
DDP = "examples/ddp_train.py"
NODES = [str(REPO / "tests" / "data" / "distributed" / f"node{n}" / "report.json") for n in (0, 1)]


def _merge(*args: str, outdir: Path) -> CliRun:
    proc = subprocess.run([*DIAGNOSE, "merge", "-q", "-o", str(outdir), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, outdir)


def _kinds(report: dict) -> dict[str, dict]:
    return {f["kind"]: f for f in report["findings"]}


@pytest.fixture(scope="module")
def all_cpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_all") / "report"
    run = run_cli("--nproc-per-node", "2", "--layers", "operators,threads", "--timeout", "120", DDP,
                  "--", "--steps", "30", "--threads", "all", outdir=out)
    assert run.code == 0, run.stderr
    return run


@pytest.fixture(scope="module")
def fair(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp_fair") / "report"
    run = run_cli("threads", "--nproc-per-node", "2", "--timeout", "120", DDP, "--", "--steps", "8",
                  "--threads", "fair", outdir=out)
    assert run.code == 0, run.stderr
    return run


def test_every_rank_has_its_operator_table_and_collectives(all_cpus):
    r = all_cpus.report
    d = r["distributed"]
    assert d["world_size"] == 2 and d["backend"] == "gloo"
    assert "torch.distributed.run --standalone --nnodes 1 --nproc-per-node 2" in d["launcher"]
    assert [e["rank"] for e in d["ranks"]] == [0, 1]
    for e in d["ranks"]:
        assert e["status"] == "ok" and e["passes"] == {"baseline": "ok", "operators": "ok"}
        assert e["omp_num_threads"] == "1"  # torchrun's default, which the script overrides
        assert e["intra_op_threads"] == USABLE
        names = {o["name"] for o in e["operators"]}
        assert "aten::addmm" in names
        allreduce = next(c for c in e["collectives"] if c["name"] == "gloo:all_reduce")
        assert allreduce["calls"] >= 8  # DDP's gradient bucket, once per step (and a broadcast at wrap time)
        assert 0 < e["collective_share"] < 1 and e["compute_us"] > 0
    c = d["collectives"]
    assert 0 < c["share"] < 1 and c["by_name"][0]["name"].startswith("gloo:")
    assert d["straggler"]["rank"] in (0, 1) and d["straggler"]["measure"] == "compute_us"


def test_the_report_operators_merge_the_ranks(all_cpus):
    r = all_cpus.report
    ranks = r["distributed"]["ranks"]
    assert r["operator_summary"]["ranks"] == [0, 1]
    row = next(o for o in r["operators"] if o["name"] == "aten::addmm")
    per_rank = [next(o for o in e["operators"] if o["name"] == "aten::addmm" and o["input_shapes"] == row["input_shapes"])
                for e in ranks]
    assert row["calls"] == sum(p["calls"] for p in per_rank)
    assert row["self_cpu_us"] == pytest.approx(sum(p["self_cpu_us"] for p in per_rank), abs=0.01)
    assert any("merge ranks 0, 1" in n for n in r["layers"]["operators"]["notes"])
    trace = json.loads((all_cpus.outdir / "trace.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in trace if e.get("name") == "process_name"} == {"rank 0", "rank 1"}


def test_ranks_at_all_cpus_oversubscribe_the_node_with_a_per_rank_fix(all_cpus):
    r = all_cpus.report
    procs = {p["pid"]: p for p in r["threads"]["processes"]}
    for e in r["distributed"]["ranks"]:  # the sampler watched every rank as a compute process of the tree
        assert procs[e["pid"]]["compute"] and procs[e["pid"]]["rank"] == e["rank"]
    f = _kinds(r)["oversubscription"]
    ev = f["evidence"]
    fair = max(1, USABLE // 2)
    assert ev["cause"] == "several_processes" and ev["ranks"] == [0, 1]
    assert ev["recommended_threads"] == fair and ev["runqueue_wait_share"] >= 0.2
    assert f"OMP_NUM_THREADS={fair}" in f["suggestion"] and f"torch.set_num_threads({fair})" in f["suggestion"]
    assert f["location"] == f"{DDP}:{line_of(EXAMPLES / 'ddp_train.py', 'torch.set_num_threads(usable_cpus())')}"
    assert "Ranks (world size 2" in all_cpus.stdout
    md = (all_cpus.outdir / "report.md").read_text()
    assert "## Ranks (world size 2" in md and "| 1 | 0 | ok |" in md


@pytest.mark.skipif(USABLE < 2, reason="one CPU cannot hold two ranks without queueing")
def test_ranks_at_their_fair_share_do_not_oversubscribe(fair):
    r = fair.report
    assert set(r["layers"]) == {"threads"}
    assert [e["intra_op_threads"] for e in r["distributed"]["ranks"]] == [USABLE // 2] * 2
    assert "oversubscription" not in _kinds(r), _kinds(r).get("oversubscription")
    assert r["threads"]["compute_processes"] == 2


# the exit code, the failed rank and its error: nothing here depends on how busy the CPUs are
@pytest.mark.parallel_safe
def test_a_failing_rank_is_named_and_the_report_is_still_written(tmp_path):
    run = run_cli("threads", "--nproc-per-node", "2", "--timeout", "120", DDP, "--", "--steps", "8",
                  "--threads", "fair", "--fail-rank", "1", outdir=tmp_path / "r")
    assert run.code == 3, run.stderr
    r = run.report
    assert r["run"]["error"].startswith("rank 1 failed: RuntimeError: planted failure on rank 1")
    failed = {f["rank"]: f for f in r["distributed"]["failed_ranks"]}
    assert failed[1].get("first") and failed[1]["error"] == "RuntimeError: planted failure on rank 1"
    assert r["layers"]["threads"]["status"] == "ok"  # what the node measured is kept
    assert "rank 1 failed first" in run.stdout


# rejected before anything runs
@pytest.mark.parallel_safe
@pytest.mark.parametrize("args, needle", [
    (["--nproc-per-node", "0", DDP], "--nproc-per-node wants a number of ranks >= 1"),
    (["--torchrun-args", "--nnodes 2", DDP], "--torchrun-args goes with --nproc-per-node"),
    (["--nproc-per-node", "2", "--torchrun-args", "--nproc-per-node 4", DDP], "give it as diagnose --nproc-per-node"),
])
def test_bad_distributed_options_are_one_line_errors(args, needle, tmp_path):
    run = run_cli(*args, outdir=tmp_path / "r")
    assert_one_line_error(run, 2, needle)
    assert not (tmp_path / "r").exists()


# committed reports: nothing runs
@pytest.mark.parallel_safe
def test_merge_combines_per_node_reports(tmp_path):
    run = _merge(*NODES, outdir=tmp_path / "m")
    assert run.code == 0, run.stderr
    r = run.report
    d = r["distributed"]
    assert [e["rank"] for e in d["ranks"]] == [0, 1] and [n["node_rank"] for n in d["nodes"]] == [0, 1]
    assert d["straggler"]["rank"] == 1 and d["straggler"]["operators"][0]["name"] == "aten::mm"
    assert [m["report"] for m in d["merged_from"]] == NODES
    assert "## Ranks (world size 2, 2 nodes" in (tmp_path / "m" / "report.md").read_text()
    again = _merge(*NODES, outdir=tmp_path / "m")  # never replaces a report without --force
    assert_one_line_error(again, 2, "--force")


@pytest.mark.parallel_safe
def test_merge_of_different_jobs_is_a_one_line_error(tmp_path):
    data = json.loads(Path(NODES[1]).read_text())
    data["target"]["script"] = "examples/other.py"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    run = _merge(NODES[0], str(other), outdir=tmp_path / "m")
    assert_one_line_error(run, 2, "not the same job")
    assert not (tmp_path / "m").exists()
