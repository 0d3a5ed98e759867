"""Parent side of a distributed pass: the ranks' result.json files, merged.

`collect(workdir, spec, returncode)` reads `rank<R>/result.json` of every
rank that ran on this node and returns (merged result, ranks):
- ranks: one RankOutcome per rank: its identity (rank, local_rank, node_rank,
  hostname, pid, OMP_NUM_THREADS it saw), status (ok, failed, stopped: torchrun
  ended it after another rank failed or on Ctrl-C/timeout; missing: it wrote
  nothing), error, and its PassResult;
- the merged result is a PassResult like a single process's, whatever the
  layer: the slowest rank's wall time, per-iteration maxima, the lowest rank's
  torch settings, thread calls and raw data, its files moved up into the
  pass's workdir (its profile.pstats, ...); and when a rank failed, that
  rank's exit code and error (the earliest failure by the ranks' clocks: the
  others fail because of it). A layer that wants every rank's data reads the
  ranks (the operators layer sums their rows: layers/operators/processes.py).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass

from diagnose import protocol
from diagnose.distributed import launcher
from diagnose.protocol import PassResult, PassSpec, RankIdentity, TorchInfo

FAILURE_KINDS = ("exception", "exit", "os_exit", "no_function")
# the rank's bookkeeping, and its trace.json, which stays for a layer that merges the ranks' traces
_NOT_ARTIFACTS = {protocol.RESULT_FILE, launcher.PID_FILE, "started", "stopped", protocol.SPEC_FILE, "trace.json"}


@dataclass
class RankOutcome:
    """One rank of one pass: who it is, how it ended, and what it measured (view.record_pass reads it)."""

    identity: RankIdentity
    status: str  # ok, failed, stopped (torchrun ended it after another rank failed, or on Ctrl-C), missing
    error: str | None = None
    result: PassResult | None = None  # None: the rank wrote nothing (missing)

    @property
    def rank(self) -> int:
        return self.identity.rank

    @property
    def torch(self) -> TorchInfo:
        return self.result.torch if self.result else TorchInfo()


def _outcome(rank: int, result: PassResult | None) -> RankOutcome:
    identity = result.rank if result and result.rank else RankIdentity(rank=rank)
    if result is None:
        return RankOutcome(identity, "missing",
                           "the rank wrote no result (killed, or it never started the runner)")
    status = "stopped" if result.error_kind == "interrupted" else "failed" if result.exit_code else "ok"
    return RankOutcome(identity, status, result.error, result)


def collect(workdir: str, spec: PassSpec, returncode: int | None) -> tuple[PassResult | None, list[RankOutcome]]:
    found = [(rank, path, protocol.read_result(os.path.join(path, protocol.RESULT_FILE)))
             for rank, path in launcher.rank_dirs(workdir)]
    ranks = [_outcome(rank, result) for rank, _, result in found]
    # local ranks torchrun was asked for that left no directory at all
    known_local = {r.identity.local_rank for r in ranks if r.identity.local_rank is not None}
    bases = {r.rank - r.identity.local_rank for r in ranks if r.identity.local_rank is not None}
    base = bases.pop() if len(bases) == 1 else None
    known = {r.rank for r in ranks}
    for r in ranks:
        if r.identity.local_rank is None and base is not None:
            r.identity = dataclasses.replace(r.identity, local_rank=r.rank - base)
    nproc = spec.distributed.nproc_per_node if spec.distributed else 0
    for local in range(nproc):
        if base is not None and local not in known_local and base + local not in known:
            missing = _outcome(base + local, None)
            missing.identity = dataclasses.replace(missing.identity, local_rank=local)
            ranks.append(missing)
    ranks.sort(key=lambda r: r.rank)
    present = [(rank, path, result) for rank, path, result in found if result is not None]
    if not present:
        return None, ranks
    merged = _merge(present, ranks, returncode)
    _adopt_files(present[0][1], workdir)
    return merged, ranks


def _merge(present: list[tuple[int, str, PassResult]], ranks: list[RankOutcome], returncode: int | None) -> PassResult:
    results = [result for _, _, result in present]
    merged = dataclasses.replace(results[0], rank=None)
    walls = [r.wall_s for r in results if r.wall_s is not None]
    merged.wall_s = max(walls) if walls else None
    series = [r.iteration_s for r in results]
    if series and all(len(s) == len(series[0]) for s in series):
        merged.iteration_s = [max(values) for values in zip(*series)]
    failures = [r for r in ranks if r.status == "failed" and r.result and r.result.error_kind in FAILURE_KINDS]
    failures.sort(key=lambda r: (r.identity.finished_at or float("inf"), r.rank))
    missing = [r for r in ranks if r.status == "missing"]
    if failures:
        root = failures[0].result
        others = [r.rank for r in ranks if r.rank != failures[0].rank and r.status != "ok"]
        merged.exit_code, merged.error_kind, merged.traceback = root.exit_code, root.error_kind, list(root.traceback)
        merged.error = (f"rank {failures[0].rank} failed: {root.error}"
                        + (f" (then rank{'s' if len(others) > 1 else ''} "
                           f"{', '.join(map(str, others))} stopped)" if others else ""))
    elif missing and returncode:
        merged.exit_code, merged.error_kind, merged.traceback = returncode if returncode > 0 else 1, "crashed", []
        merged.error = (f"rank{'s' if len(missing) > 1 else ''} {', '.join(str(r.rank) for r in missing)} "
                        f"wrote no result: killed, or crashed outside Python (torchrun exited {returncode})")
    elif not any(r.error_kind for r in results):
        merged.exit_code, merged.error, merged.error_kind, merged.traceback = 0, None, None, []
    else:  # every rank stopped (Ctrl-C or --timeout reached torchrun, which stopped them all)
        stopped = next(r for r in results if r.error_kind)
        merged.exit_code, merged.error, merged.error_kind = stopped.exit_code, stopped.error, stopped.error_kind
        merged.traceback = list(stopped.traceback)
    raw_errors = [f"rank {rank}: {res.raw_error}" for rank, _, res in present if res.raw_error]
    merged.raw_error = "; ".join(raw_errors) or None
    merged.ranks_reported = len(present)
    return merged


def _adopt_files(rank_path: str, workdir: str) -> None:
    """The lowest rank's artifacts (profile.pstats, ...) where the layer looks for them."""
    for name in os.listdir(rank_path):
        src = os.path.join(rank_path, name)
        if name in _NOT_ARTIFACTS or os.path.exists(os.path.join(workdir, name)):
            continue
        shutil.move(src, os.path.join(workdir, name))
