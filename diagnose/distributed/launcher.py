"""torchrun's command line for a pass, and what a rank's runner needs to know about itself.

The spec's `distributed` is a protocol.DistributedSpec (nproc_per_node, torchrun_args).
Without torchrun args the pass is a single-node job (`--standalone --nnodes 1`:
a c10d rendezvous on a free localhost port, so concurrent runs do not clash);
with them the user's rendezvous options (`--nnodes 2 --node-rank 0
--master-addr host --master-port 29500`, or `--rdzv-backend c10d
--rdzv-endpoint host:29500 --rdzv-id job`) go to torchrun unchanged and every
node runs the same diagnose command.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time

from diagnose.errors import UsageError
from diagnose.protocol import DistributedSpec, PassSpec, RankIdentity

TORCHRUN = ("-m", "torch.distributed.run")
RANK_DIR = "rank{rank}"
PID_FILE = "pid"
# options diagnose sets itself, or that would run something other than the runner
_OWN_OPTIONS = {
    "--nproc-per-node": "give it as diagnose --nproc-per-node",
    "--nproc_per_node": "give it as diagnose --nproc-per-node",
    "-m": "diagnose runs its own runner module in each rank",
    "--module": "diagnose runs its own runner module in each rank",
    "--no-python": "diagnose runs its own runner module in each rank",
    "--no_python": "diagnose runs its own runner module in each rank",
    "--run-path": "diagnose runs its own runner module in each rank",
    "--run_path": "diagnose runs its own runner module in each rank",
}


def parse_torchrun_args(text: str | None) -> list[str]:
    """`--torchrun-args "..."` as a list; options diagnose sets itself are refused (UsageError)."""
    if not text:
        return []
    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--torchrun-args: {exc}") from None
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in _OWN_OPTIONS:
            raise UsageError(f"--torchrun-args must not hold {name}: {_OWN_OPTIONS[name]}")
    if args and not args[0].startswith("-"):
        raise UsageError(f"--torchrun-args holds options for torchrun only, not {args[0]!r}")
    return args


def command(spec_path: str, dist: DistributedSpec, python: str | None = None) -> list[str]:
    """The pass's child: torchrun running `python -u -m diagnose.runner SPEC` in every rank."""
    rendezvous = list(dist.torchrun_args) or ["--standalone", "--nnodes", "1"]
    return [python or sys.executable, *TORCHRUN, *rendezvous, "--nproc-per-node", str(dist.nproc_per_node),
            "-m", "diagnose.runner", spec_path]


def display_command(dist: DistributedSpec) -> str:
    rendezvous = list(dist.torchrun_args) or ["--standalone", "--nnodes", "1"]
    return shlex.join(["python", *TORCHRUN, *rendezvous, "--nproc-per-node", str(dist.nproc_per_node),
                       "-m", "diagnose.runner", "SPEC.json"])


def _int_env(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value and value.lstrip("-").isdigit() else None


def identity() -> RankIdentity | None:
    """This rank as torchrun describes it in the environment; None outside torchrun."""
    rank = _int_env("RANK")
    if rank is None:
        return None
    return RankIdentity(
        rank=rank, local_rank=_int_env("LOCAL_RANK"), world_size=_int_env("WORLD_SIZE"),
        local_world_size=_int_env("LOCAL_WORLD_SIZE"), node_rank=_int_env("GROUP_RANK"),
        hostname=socket.gethostname(), pid=os.getpid(), omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
        run_id=os.environ.get("TORCHELASTIC_RUN_ID"), started_at=time.time())


def enter_rank(spec: PassSpec) -> PassSpec:
    """Runner side: this rank works in <pass workdir>/rank<RANK>/; returns the spec to run.

    The pass workdir stays in `pass_workdir`, where the first rank to start
    and the last local rank to stop leave the markers the observers wait for.
    """
    me = identity()
    if me is None:
        return spec
    top = spec.workdir
    workdir = rank_dir(top, me.rank)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, PID_FILE), "w") as fh:
        fh.write(str(os.getpid()))
    return spec.with_(workdir=workdir, pass_workdir=top, rank=me)


def mark(spec: PassSpec, marker: str, started: bool) -> None:
    """Leave the pass-level marker: at the first rank's start, or once every local rank stopped."""
    top = spec.pass_workdir
    if not top:
        return
    path = os.path.join(top, marker)
    if started:
        if not os.path.exists(path):
            with open(path, "w"):
                pass
        return
    local = (spec.rank.local_world_size if spec.rank else None) or 1
    stopped = sum(1 for name in os.listdir(top)
                  if name.startswith("rank") and os.path.exists(os.path.join(top, name, marker)))
    if stopped >= local and not os.path.exists(path):
        with open(path, "w"):
            pass


def rank_dir(workdir: str, rank: int) -> str:
    """Where a rank of the pass in `workdir` works: its result.json and its layer's files."""
    return os.path.join(workdir, RANK_DIR.format(rank=rank))


def rank_dirs(workdir: str) -> list[tuple[int, str]]:
    """(rank, directory) of every rank that started in this pass, by rank."""
    out = []
    try:
        names = os.listdir(workdir)
    except OSError:
        return []
    for name in names:
        if name.startswith("rank") and name[4:].isdigit() and os.path.isdir(os.path.join(workdir, name)):
            out.append((int(name[4:]), os.path.join(workdir, name)))
    return sorted(out)


def stop_leftover_ranks(workdir: str) -> list[int]:
    """SIGKILL ranks of this pass that outlived torchrun (they run in sessions of their own).

    Only pids the ranks wrote themselves, and only while /proc says they still
    run diagnose.runner (a recycled pid belongs to someone else).
    """
    killed = []
    for _, path in rank_dirs(workdir):
        try:
            with open(os.path.join(path, PID_FILE)) as fh:
                pid = int(fh.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except (OSError, ValueError):
            continue
        if b"diagnose.runner" in cmdline:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed
