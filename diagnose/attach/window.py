"""py-spy on one pass of diagnose's own (`diagnose script.py --sample`), over the pass's measured part.

    python -m diagnose.attach.window --pid PID --out DIR --start-when F --restart-when W --stop-when S
        [--ready R] [--rate HZ]

Creates R at once (the runner waits for it before the workload begins), waits for F (the workload began:
torch is imported, so py-spy finds libtorch's symbols when it starts), then runs `py-spy record` on PID
(tools/pyspy.record_command) until S appears, the process is gone, or SIGTERM/SIGINT; then SIGINT makes
py-spy write DIR/stacks.chrometrace.json. DIR/timing.json (WindowTiming) says, in seconds since py-spy was
started (its chrometrace clock starts there: checked against a target logging time.monotonic() at each
phase, within a sample interval), when the window began (W appeared; null: no window, the whole workload
is measured) and when sampling was stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from diagnose.attach import process
from diagnose.tools import pyspy

STACKS = "stacks.chrometrace.json"
TIMING = "timing.json"
LOG = "py-spy.log"
POLL_S = 0.01
RECORD_AT_MOST_S = 24 * 3600  # py-spy wants a duration; SIGINT ends it first


@dataclass(frozen=True)
class WindowTiming:
    pid: int
    window_s: float | None = None  # seconds after py-spy's start when the window began; None: no window
    stop_s: float | None = None  # when sampling was stopped
    rate_hz: float = 0.0
    error: str | None = None  # py-spy could not start: why


def load(path: str) -> WindowTiming:
    with open(path, encoding="utf-8") as fh:
        return WindowTiming(**json.load(fh))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diagnose.attach.window")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--start-when", required=True)
    parser.add_argument("--restart-when", required=True)
    parser.add_argument("--stop-when", required=True)
    parser.add_argument("--ready")
    parser.add_argument("--rate", type=float, required=True)
    args = parser.parse_args(argv)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stopping.append(signum))
    if args.ready:
        with open(args.ready, "w"):
            pass
    while not os.path.exists(args.start_when) and process.alive(args.pid) and not stopping:
        time.sleep(POLL_S)
    timing = WindowTiming(pid=args.pid, rate_hz=args.rate)
    exe = pyspy.executable()
    if exe is None or stopping or not process.alive(args.pid):
        timing = dataclasses.replace(timing, error="py-spy is not installed" if exe is None else "the pass ended "
                                     "before its workload began")
        _write(args.out, timing)
        return 1
    with open(os.path.join(args.out, LOG), "w") as log:
        t0 = time.monotonic()
        spy = subprocess.Popen(pyspy.record_command(exe, args.pid, os.path.join(args.out, STACKS), args.rate,
                                                    RECORD_AT_MOST_S),
                               stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        window = None
        while not stopping and spy.poll() is None and process.alive(args.pid):
            if window is None and os.path.exists(args.restart_when):
                window = time.monotonic() - t0
            if os.path.exists(args.stop_when):
                break
            time.sleep(POLL_S)
        stop = time.monotonic() - t0
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)
        try:
            spy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            spy.kill()
            spy.wait()
    _write(args.out, dataclasses.replace(timing, window_s=window, stop_s=round(stop, 6)))
    return 0


def _write(folder: str, timing: WindowTiming) -> None:
    with open(os.path.join(folder, TIMING), "w", encoding="utf-8") as fh:
        json.dump(dataclasses.asdict(timing), fh)


if __name__ == "__main__":
    sys.exit(main())
