"""Distributed workloads: every rank of a torchrun job, one report.

diagnose never launches ranks itself. With `--nproc-per-node N` each pass's
child is torch.distributed's own launcher,

    python -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node N -m diagnose.runner SPEC.json

(or the user's own rendezvous options from `--torchrun-args` in place of
`--standalone --nnodes 1`), so every rank runs the runner under the
environment torchrun gives it (RANK, LOCAL_RANK, GROUP_RANK, WORLD_SIZE,
OMP_NUM_THREADS=1 when unset). Each rank works in `rank<RANK>/` under the
pass's workdir and writes its own result.json there.

- launcher.py: the command line, the rank's identity and workdir, the
  start/stop markers the observers wait for (the first rank to start, the
  last local rank to stop), leftover ranks after a timeout;
- collect.py (parent side): the per-rank results of one pass merged into the
  one result the layers read (operator rows of all ranks, the slowest rank's
  wall time, the first failing rank's error), plus the per-rank results;
- view.py: `report.distributed` filled pass by pass: per-rank tables, the
  nodes; its summaries over the ranks (collectives vs compute, the
  straggler, observations) are report/distributed.py's, which `diagnose
  merge` (report/combine.py) recomputes on several nodes' ranks.
"""
