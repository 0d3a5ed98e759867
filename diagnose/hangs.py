"""A stalled pass's stack dumps as the report's `Hang` entries (diagnose/stall.py measured the stall)."""

from __future__ import annotations

import os
from typing import Any

from diagnose.report.model import Hang, ThreadStack
from diagnose.stall import parse

RUNNER = os.path.join("diagnose", "runner.py")
EXIT = ("the interpreter's exit, after the script ended and its results were written (a destructor waits: with "
        "torch.distributed, the process group's)")
OWN = os.path.dirname(os.path.abspath(__file__))  # diagnose's own frames (runner, fork server) are not the target's


def hangs(pass_name: str, stall: dict[str, Any], usercode) -> list[Hang]:
    """One Hang per runner that dumped (one, or one per torchrun rank)."""
    out = []
    for dump in stall.get("stacks") or []:
        threads = parse(dump.get("text") or "")
        main = next((t for t in threads if any(f[0].endswith(RUNNER) for f in t["frames"])), None)
        hang = Hang(pass_name=pass_name, idle_s=round(float(stall.get("idle_s") or 0.0), 1), rank=dump.get("rank"))
        if not threads and dump.get("finished"):  # no Python left to dump: it hung in the interpreter's exit
            hang.stuck_in = EXIT
        for t in threads:
            frames = [f for f in t["frames"] if not os.path.abspath(f[0]).startswith(OWN + os.sep)
                      and "/runpy.py" not in f[0] and not f[0].startswith("<frozen")]
            hang.threads.append(ThreadStack(thread=t["thread"], main=t is main,
                                            frames=[f"{usercode.short(f[0])}:{f[1]} in {f[2]}" for f in frames[:40]]))
            if t is main and frames:
                hang.stuck_in = hang.threads[-1].frames[0]
                user = next((f for f in frames if usercode.is_user(f[0])), None)
                hang.location = f"{usercode.display(user[0])}:{user[1]}" if user else None
        out.append(hang)
    return out
