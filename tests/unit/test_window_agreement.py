"""Two real gloo ranks measuring a timed window, where rank 1's clock runs 4x faster than rank 0's.

Alone, rank 1 would judge its window long enough steps before rank 0 and leave (as the runner does:
WindowComplete, then os._exit) while rank 0 waits in the next all-reduce: the DDP example failed that
way under load ("Connection closed by peer"). With the agreement both end at the step rank 0 publishes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap


from conftest import REPO

RANK = textwrap.dedent("""
    import datetime, itertools, json, os, sys
    import torch, torch.distributed as dist
    from diagnose.protocol import WindowSpec
    from diagnose.steps import StepClock, WindowComplete
    from diagnose.distributed.window import WindowAgreement

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    ticks = itertools.count()
    dt = 0.01 if rank == 0 else 0.04   # seconds per reading of the clock
    agreement = WindowAgreement(rank) if sys.argv[1] == "agree" else None
    clock = StepClock(WindowSpec(skip=1, steps=3, min_window_s=1.0), clock=lambda: next(ticks) * dt,
                      agreement=agreement)
    t = torch.ones(4)
    try:
        for step in range(400):
            dist.all_reduce(t)          # every step holds a collective, as DDP's backward does
            clock.boundary("mark_step", None)
        outcome = "script ended"
    except WindowComplete:
        outcome = "window complete"
    except RuntimeError:              # the peer left while this rank waited in the collective
        outcome = "collective failed"
    print(json.dumps({"rank": rank, "outcome": outcome, "steps": clock.window_steps}), flush=True)
    os._exit(0)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(mode: str) -> dict[int, dict]:
    port = _free_port()
    procs = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, mode], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    out = {}
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert stdout.strip(), stderr
        row = json.loads(stdout.strip().splitlines()[-1])
        out[row["rank"]] = row
    return out


def test_ranks_end_a_timed_window_at_the_step_rank_0_publishes():
    ranks = _run_ranks("agree")
    assert [ranks[r]["outcome"] for r in (0, 1)] == ["window complete"] * 2
    assert ranks[0]["steps"] == ranks[1]["steps"]
    # one clock reading per step: rank 0's window reaches 1 s after 100 steps of 0.01 s, and ends MARGIN later
    assert ranks[0]["steps"] == 100 + 2


def test_without_it_the_faster_clock_leaves_its_peer_inside_a_collective():
    ranks = _run_ranks("alone")
    assert ranks[1] == {"rank": 1, "outcome": "window complete", "steps": 25}  # 25 steps of 0.04 s
    assert ranks[0]["outcome"] == "collective failed"
