"""Re-create the thread-sampler recordings in this folder (real runs on this machine).

    .venv/bin/python tests/data/threads/record.py            # every scenario
    .venv/bin/python tests/data/threads/record.py threads8   # some of them

Each scenario runs a small torch workload in its own process; once the
workload prints "ready" (torch imported, warmed up) the real sampler starts
on its pid as a separate process (`python -m diagnose.layers.threads.sampler
--pid PID --out FILE --interval 0.1`), so recordings also show the sampler
attaching to a process that already runs. The workload then computes for
DURATION_S seconds and exits; the sampler stops when the tree is gone.

Scenarios (2 usable CPUs when recorded):
- healthy:    torch.set_num_threads(2), 512x512 matmul+tanh loop
- threads8:   the same loop with torch.set_num_threads(8)
- single:     the same loop with torch.set_num_threads(1) (undersubscription)
- dataloader: a DataLoader with num_workers=2 whose dataset does numpy
              matmuls (numpy's OpenBLAS pool in each worker) beside a
              training loop using torch's default pool in the main process
- mp2:        2 spawned processes, each with torch's default pool
- contended:  the healthy loop while two busy processes outside the tree
              (not descendants of the target) spin
Derived (not re-run; made from a real recording by `strip_schedstat`):
- threads8_noschedstat, healthy_noschedstat: every schedstat column
  (run_ns, wait_ns, slices) set to 0, as kernels without scheduler
  statistics print `0 0 0`; states, ticks and context switches stay real.

Recording needs a quiet machine: before each scenario the script waits until
the machine's other load is below QUIET_CPUS, and it re-records a scenario
(up to ATTEMPTS times) when other processes took more than QUIET_CPUS during
it (except `contended`, whose outside load is the point).
tests/unit/test_threads_analysis.py pins the numbers of these files
(EXPECTED, PROCESSES): update them after re-recording, on purpose.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

from diagnose import procfs
from diagnose.layers.threads import recording  # noqa: E402
from diagnose.layers.threads.analysis import analyse  # noqa: E402

DURATION_S = 3.0
INTERVAL_S = 0.1
QUIET_CPUS = 0.2
ATTEMPTS = 4

LOOP = """
import time
import torch
torch.set_num_threads({threads})
a = torch.randn(512, 512)
b = torch.randn(512, 512)
for _ in range(3):
    a = torch.tanh(a @ b)
print("ready", flush=True)
start = time.monotonic()
while time.monotonic() - start < {duration}:
    a = torch.tanh(a @ b)
"""

DATALOADER = """
import time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        x = rng.standard_normal((384, 384)).astype(np.float32)
        for _ in range(4):  # "augmentation": numpy BLAS work in the worker
            x = np.tanh(x @ x.T / 384)
        return torch.from_numpy(x[:64, :256].copy()), i % 10


model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64 * 256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
print("ready", flush=True)
start = time.monotonic()
for x, y in DataLoader(Augmented(), batch_size=8, num_workers=2):
    for _ in range(6):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if time.monotonic() - start > {duration}:
        break
"""

MP2 = """
import multiprocessing as mp
import time
import torch


def work(duration):
    a = torch.randn(512, 512)
    b = torch.randn(512, 512)
    start = time.monotonic()
    while time.monotonic() - start < duration:
        a = torch.tanh(a @ b)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    print("ready", flush=True)
    procs = [ctx.Process(target=work, args=({duration},)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
"""

SPINNER = "while True:\n    pass\n"

SCENARIOS = {
    "healthy": LOOP.replace("{threads}", "2"),
    "threads8": LOOP.replace("{threads}", "8"),
    "single": LOOP.replace("{threads}", "1"),
    "dataloader": DATALOADER,
    "mp2": MP2,
    "contended": LOOP.replace("{threads}", "2"),
}
DERIVED = {"threads8_noschedstat": "threads8", "healthy_noschedstat": "healthy"}


def strip_schedstat(recording: dict) -> dict:
    """A copy as a kernel without scheduler statistics would give it: run_ns, wait_ns, slices = 0."""
    out = json.loads(json.dumps(recording))
    rows = [r for s in out["snapshots"] for r in s["threads"]]
    rows += [th[k] for th in out["threads"] for k in ("first", "last") if th.get(k)]
    for row in rows:
        row[2:5] = [0, 0, 0]
    return out


def machine_busy_cpus(seconds: float) -> float:
    b0, _ = procfs.busy_idle_ticks(procfs.machine_cpu_ticks())
    time.sleep(seconds)
    b1, _ = procfs.busy_idle_ticks(procfs.machine_cpu_ticks())
    return (b1 - b0) / procfs.clock_ticks_per_s() / seconds


def wait_quiet(timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if machine_busy_cpus(1.0) < QUIET_CPUS:
            return
    print("  machine still busy; recording anyway", file=sys.stderr)


def record_once(name: str, workdir: Path, out: Path) -> recording.Recording:
    script = workdir / f"{name}.py"
    script.write_text(textwrap.dedent(SCENARIOS[name]).replace("{duration}", str(DURATION_S)))
    spinners = []
    if name == "contended":
        spinners = [subprocess.Popen([sys.executable, "-c", SPINNER]) for _ in range(2)]
    try:
        target = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=workdir)
        assert target.stdout.readline().strip() == "ready"
        sampler = subprocess.Popen([sys.executable, "-m", "diagnose.layers.threads.sampler", "--pid",
                                    str(target.pid), "--out", str(out), "--interval", str(INTERVAL_S)], cwd=REPO)
        target.wait(timeout=120)
        sampler.wait(timeout=30)
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    return recording.load(str(out))


def record(name: str, workdir: Path) -> None:
    out = HERE / f"{name}.json"
    for attempt in range(1, ATTEMPTS + 1):
        if name != "contended":
            wait_quiet()
        rec = record_once(name, workdir, out)
        t = analyse(rec, usable_cpus=len(os.sched_getaffinity(0)))
        print(f"{name}: {out.stat().st_size // 1024} KiB, {t.duration_s} s, mean_runnable {t.mean_runnable}, "
              f"wait_share {t.runqueue_wait_share}, cpu_used {t.cpu_used}, others {t.others_cpus}")
        if name == "contended" or (t.others_cpus or 0) < QUIET_CPUS:
            return
        print(f"  other processes took {t.others_cpus} CPUs: again (attempt {attempt})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"scenarios (default all): {', '.join([*SCENARIOS, *DERIVED])}")
    names = parser.parse_args().names or [*SCENARIOS, *DERIVED]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name in SCENARIOS:
                record(name, Path(tmp))
    for name, source in DERIVED.items():
        if name in names:
            rec = strip_schedstat(json.loads((HERE / f"{source}.json").read_text()))
            rec["derived_from"] = f"{source}.json with run_ns, wait_ns, slices set to 0 (record.py strip_schedstat)"
            (HERE / f"{name}.json").write_text(json.dumps(rec, separators=(",", ":")))
            print(f"{name}: derived from {source}.json")


if __name__ == "__main__":
    main()
