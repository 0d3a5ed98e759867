"""Distributed runs without running anything: torchrun's command line, per-rank result merging,
the straggler and collectives summaries, and `merge` on committed per-node reports of a real
two-node job (tests/data/distributed/README.md says how they were made)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from diagnose import protocol
from diagnose.protocol import DistributedSpec, PassResult, PassSpec, RankIdentity, TorchInfo
from diagnose.distributed import collect, launcher
from diagnose.errors import UsageError
from diagnose.launch import PassOutcome
from diagnose.layers.operators import OperatorsLayer
from diagnose.layers.operators.processes import merged_raw
from diagnose.report.combine import check, combine
from diagnose.report.distributed import STRAGGLER_LOW_PCT, summarise
from diagnose.report import io as report_io
from diagnose.report.model import Distributed, RankResult, Report, TargetInfo

DATA = Path(__file__).resolve().parents[1] / "data" / "distributed"
NODES = [str(DATA / "node0" / "report.json"), str(DATA / "node1" / "report.json")]


def _spec(layer=None, workdir=""):
    return PassSpec(name="baseline", layer=layer, script="t.py", display_script="t.py", argv=(), function=None,
                    cwd=".", window=None, distributed=DistributedSpec(2), workdir=workdir)


def _load(paths=NODES):
    return [(p, report_io.load(p)) for p in paths]


# ---------------------------------------------------------------- the launcher


def test_single_node_command_is_torchruns_standalone_rendezvous_running_the_runner_module():
    cmd = launcher.command("/w/spec.json", DistributedSpec(2), python="py")
    assert cmd == ["py", "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
                   "-m", "diagnose.runner", "/w/spec.json"]


def test_torchrun_args_replace_the_standalone_rendezvous():
    args = launcher.parse_torchrun_args("--nnodes 2 --node-rank 1 --master-addr 'node 0' --master-port 29500")
    cmd = launcher.command("s.json", DistributedSpec(4, tuple(args)), python="py")
    assert "--standalone" not in cmd
    assert cmd[3:11] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "node 0", "--master-port", "29500"]
    assert cmd[-3:] == ["-m", "diagnose.runner", "s.json"]
    assert cmd[cmd.index("--nproc-per-node") + 1] == "4"


@pytest.mark.parametrize("text, needle", [
    ("--nproc-per-node 3", "diagnose --nproc-per-node"),
    ("--nproc_per_node=3", "diagnose --nproc-per-node"),
    ("--nnodes 2 -m other", "its own runner"),
    ("--no-python", "its own runner"),
    ("train.py --nnodes 2", "options for torchrun only"),
    ("--rdzv-endpoint 'host", "--torchrun-args"),
])
def test_torchrun_args_that_would_fight_diagnose_are_refused(text, needle):
    with pytest.raises(UsageError) as err:
        launcher.parse_torchrun_args(text)
    assert needle in err.value.message


def test_rank_identity_comes_from_torchruns_environment(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    assert launcher.identity() is None
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    me = launcher.identity()
    assert (me.rank, me.local_rank, me.node_rank, me.world_size) == (3, 1, 1, 4)


def test_the_last_local_rank_to_stop_leaves_the_pass_marker(tmp_path, monkeypatch):
    specs = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        specs.append(launcher.enter_rank(_spec(workdir=str(tmp_path))))
    launcher.mark(specs[0], "started", started=True)
    assert (tmp_path / "started").exists()
    for spec in specs:  # the runner writes its own marker first
        Path(spec.workdir, "stopped").touch()
        launcher.mark(spec, "stopped", started=False)
        assert (tmp_path / "stopped").exists() == (spec is specs[1])
    assert (tmp_path / "rank1" / "pid").read_text() == str(os.getpid())


# ------------------------------------------------------- per-rank results merged


def _rank_result(tmp_path, rank, *, kind=None, code=0, error=None, wall=1.0, at=0.0, raw=None):
    d = tmp_path / f"rank{rank}"
    d.mkdir()
    protocol.write(PassResult(
        name="baseline", exit_code=code, error=error, error_kind=kind, wall_s=wall, iteration_s=[wall / 2, wall / 2],
        torch=TorchInfo(intra_op_threads=1), raw=raw,
        rank=RankIdentity(rank=rank, local_rank=rank, node_rank=0, world_size=2, local_world_size=2, pid=100 + rank,
                          finished_at=at)), str(d / "result.json"))


def test_merged_result_has_the_slowest_rank_and_the_first_failure(tmp_path):
    _rank_result(tmp_path, 0, kind="exception", code=1, error="RuntimeError: Connection closed by peer", at=12.0)
    _rank_result(tmp_path, 1, kind="exception", code=1, error="ValueError: planted", wall=2.0, at=11.0)
    merged, ranks = collect.collect(str(tmp_path), _spec(), 1)
    assert merged.error == "rank 1 failed: ValueError: planted (then rank 0 stopped)"
    assert merged.exit_code == 1 and merged.error_kind == "exception"
    assert merged.wall_s == 2.0 and merged.iteration_s == [1.0, 1.0]
    assert [r.status for r in ranks] == ["failed", "failed"]


def test_a_rank_that_wrote_nothing_is_named(tmp_path):
    _rank_result(tmp_path, 0, kind="interrupted", code=130, error="interrupted (KeyboardInterrupt)")
    (tmp_path / "rank1").mkdir()  # started, then killed before writing
    merged, ranks = collect.collect(str(tmp_path), _spec(), -9)
    assert [r.status for r in ranks] == ["stopped", "missing"]
    assert merged.error.startswith("rank 1 wrote no result") and merged.exit_code == 1


def _operator_ranks(tmp_path):
    """Two ranks of an operator pass, each with its raw rows, a profile of its own and its trace.json."""
    row = {"name": "aten::mm", "input_shapes": [[2, 2], [2, 2]], "dtypes": ["float"], "source": "t.py:3",
           "parent": "", "calls": 3, "self_cpu_us": 10.0, "total_cpu_us": 10.0, "flops": 48, "cpu_memory_bytes": 0}
    for rank in (0, 1):
        _rank_result(tmp_path, rank, raw={"rows": [row], "memory": {"allocations": 2}, "events": 5,
                                          "trace": {"events_written": 5, "events_total": 5},
                                          "collectives": {"busy_us": 1.0, "by_name": []}})
        (tmp_path / f"rank{rank}" / "trace.json").write_text(json.dumps(
            {"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 1, "dur": 1, "pid": 100 + rank, "tid": 1}]}))
        (tmp_path / f"rank{rank}" / "profile.pstats").write_text(f"rank {rank}")


def test_all_ranks_ok_is_an_ok_result_with_the_lowest_ranks_data_whatever_the_layer(tmp_path):
    _operator_ranks(tmp_path)
    merged, ranks = collect.collect(str(tmp_path), _spec(layer="operators"), 0)
    assert merged.exit_code == 0 and merged.error is None and merged.ranks_reported == 2
    assert merged.raw == ranks[0].result.raw and len(merged.raw["rows"]) == 1
    assert (tmp_path / "profile.pstats").read_text() == "rank 0"  # the lowest rank's files, where layers look
    assert not (tmp_path / "trace.json").exists()  # every rank's trace.json stays for the operators layer


def test_the_operators_layer_merges_every_ranks_rows_and_trace(tmp_path):
    _operator_ranks(tmp_path)
    merged, ranks = collect.collect(str(tmp_path), _spec(layer="operators"), 0)
    raw = merged_raw(ranks, str(tmp_path))
    assert len(raw["rows"]) == 2 and raw["events"] == 10 and raw["ranks"] == [0, 1]
    assert raw["memory"] == {"allocations": 4}
    assert "collectives" not in raw  # per rank: distributed.ranks holds each rank's own
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in trace if e["name"] == "process_name"} == {"rank 0", "rank 1"}
    assert raw["trace"]["events_written"] == 10
    assert [len(r.result.raw["rows"]) for r in ranks] == [1, 1]  # the ranks' own results are not changed
    # through the layer, as a run analyses the pass: one row summed over the ranks
    report = Report(target=TargetInfo(script="t.py"))
    outcome = PassOutcome(name="operators", status="ok", result=merged, returncode=0, elapsed_s=1.0, ranks=ranks)
    status = OperatorsLayer().analyse(outcome, report, str(tmp_path))
    assert status.status == "ok" and report.artifacts["trace"] == "trace.json"
    assert [(r.name, r.calls, r.self_cpu_us) for r in report.operators] == [("aten::mm", 6, 20.0)]
    assert report.operator_summary.events == 10


# ------------------------------------------------------------ the summaries


def test_committed_node_reports_each_hold_their_own_rank():
    (_, n0), (_, n1) = _load()
    assert [e.rank for e in n0.distributed.ranks] == [0]
    assert [e.rank for e in n1.distributed.ranks] == [1]
    assert n1.distributed.ranks[0].node_rank == 1 and n0.distributed.world_size == 2
    coll = {c.name for c in n0.distributed.ranks[0].collectives}
    assert "gloo:all_reduce" in coll  # measured: gloo's collectives as they appear in torch 2.13's profiler


def test_summarise_finds_the_straggler_and_the_operators_that_make_the_difference():
    ranks = [e for _, r in _load() for e in r.distributed.ranks]
    d = summarise(Distributed(ranks=ranks))
    s = d.straggler
    assert (s.rank, s.fastest_rank, s.measure) == (1, 0, "compute_us")
    assert s.slower_pct > STRAGGLER_LOW_PCT
    top = s.operators[0]
    assert top.name == "aten::mm" and top.source == "examples/ddp_train.py:71"
    obs = {o.kind: o for o in d.observations}
    assert obs["straggler"].evidence["slow_rank"] == 1
    c = d.collectives
    assert 0 < c.share < 1 and c.collective_us == pytest.approx(sum(e.collective_us for e in ranks))


def test_no_straggler_when_ranks_compute_alike():
    ranks = [RankResult(rank=r, compute_us=1000.0 + r, collective_us=5.0) for r in range(3)]
    d = summarise(Distributed(ranks=ranks))
    assert d.straggler.slower_pct < 1 and not d.observations


# ------------------------------------------------------------------- merge


def test_merge_sums_operator_rows_over_nodes_and_keeps_every_rank():
    reports = _load()
    before = [report_io.dumps(r) for _, r in reports]
    merged = combine(reports)
    assert [report_io.dumps(r) for _, r in reports] == before  # pure: the inputs are unchanged
    assert merged.findings == [] and merged.artifacts == {}  # the caller derives and writes them
    d = merged.distributed
    assert [e.rank for e in d.ranks] == [0, 1]
    assert [n.node_rank for n in d.nodes] == [0, 1]
    assert d.straggler.rank == 1
    key = lambda r: (r.name, json.dumps(r.input_shapes))  # noqa: E731
    per_node = [{key(r): r for r in rep.operators} for _, rep in reports]
    for row in merged.operators[:10]:
        parts = [t[key(row)] for t in per_node if key(row) in t]
        assert row.calls == sum(p.calls for p in parts)
        assert row.self_cpu_us == pytest.approx(sum(p.self_cpu_us for p in parts), abs=0.01)
    assert sum(r.self_pct for r in merged.operators) == pytest.approx(100, abs=0.5)
    moved = [r for r in merged.operators if r.work and r.work.bytes]
    assert moved and all(r.bytes == r.work.bytes * r.calls for r in moved)  # bytes over all nodes' calls
    straggler_op = next(r for r in merged.operators if r.name == "aten::mm" and r.input_shapes == [[768, 768], [768, 768]])
    assert straggler_op.source == "examples/ddp_train.py:71"
    assert merged.run.wall_s == max(r.run.wall_s for _, r in reports)
    assert any("merged from 2 node reports" in n for n in d.notes)


def test_merge_refuses_reports_of_different_jobs(tmp_path):
    data = json.loads(Path(NODES[1]).read_text())
    data["target"]["argv"] = ["--steps", "9"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not the same job"):
        check(_load([NODES[0], str(other)]))
    with pytest.raises(UsageError, match="rank 0 is in both"):
        check(_load([NODES[0], NODES[0]]))
    with pytest.raises(UsageError, match="at least two"):
        check(_load(NODES[:1]))


def test_a_single_process_report_is_not_mergeable(tmp_path):
    data = json.loads(Path(NODES[1]).read_text())
    data["distributed"] = {}
    single = tmp_path / "single.json"
    single.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="not a distributed report"):
        check(_load([NODES[0], str(single)]))


def test_old_reports_without_the_field_still_load():
    data = json.loads(Path(NODES[0]).read_text())
    del data["distributed"]
    report = report_io.from_json_data(data)
    assert report.distributed is None


def test_a_v1_section_reads_into_the_typed_model():
    data = json.loads(Path(NODES[0]).read_text())
    assert data["schema_version"] == "1" and data["distributed"]["straggler"] == {}
    data["distributed"]["failed_ranks"] = [{"rank": 1, "node_rank": 0, "status": "failed", "pass": "baseline",
                                            "error": "RuntimeError: x", "failed_at": 3.5, "first": True}]
    d = report_io.from_json_data(data).distributed
    assert d.straggler is None and d.collectives.by_name[0].name == "gloo:all_reduce"
    f = d.failed_ranks[0]
    assert (f.rank, f.pass_name, f.first) == (1, "baseline", True)
    assert d.ranks[0].threads.threads == {"main": 1, "intra_op": 3, "other": 3} and d.nodes[0].threads.threads_per_rank == 2
    assert d.observations[0].kind == "collectives"
