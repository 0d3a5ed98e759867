"""Standalone reproducer scripts: one per benchmarked case, plain torch only.

Contract: the script imports only `argparse`, `time` and `torch`; it builds
the same seeded inputs as the measurement, sets the thread count, warms up,
and times the same statement with `torch.utils.benchmark.Timer.adaptive_autorange`,
printing torch's own Measurement. `--loop S` just runs the op for S seconds
(for VTune, perf or py-spy to sample). The docstring records what microbench
measured, so a run elsewhere can be compared by eye.
"""

from __future__ import annotations

import os
import re
import textwrap

from microbench.cases import Case
from microbench.errors import UsageError

_TEMPLATE = '''\
#!/usr/bin/env python3
"""Reproducer for one micro-benchmark case, written by microbench.

Operator : {op} ({callable})
Inputs   : {inputs}
Layout   : {layout}
Assumed  : {assumed}
Source   : {source}
Measured : {measured}

Plain torch, nothing else imported. Examples:
  python {name}                           # time it at {threads_text} thread(s)
  python {name} --threads 1,4 --max-run-time 5
  python {name} --loop 20 --threads 2     # only run it for 20 s, for a sampling profiler:
  vtune -collect hotspots -- python {name} --loop 20 --threads 2
"""

import argparse
import time

import torch
from torch.utils.benchmark import Timer

STMT = {stmt!r}
LABEL = {label!r}
THREADS = {threads!r}


def build():
    """The inputs, seeded as microbench built them."""
{setup}
    return {{"torch": torch, {names}}}


def main():
    parser = argparse.ArgumentParser(description=LABEL)
    parser.add_argument("--threads", default=",".join(map(str, THREADS)), help="comma-separated, e.g. 1,2")
    parser.add_argument("--max-run-time", type=float, default=2.0, help="seconds per thread count")
    parser.add_argument("--loop", type=float, default=0.0, help="run the op for this many seconds, no timing")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    env = build()
    print(f"torch {{torch.__version__}}, {{torch.get_num_threads()}} intra-op threads by default")
    if args.loop > 0:
        torch.set_num_threads(threads[0])
        code = compile(STMT, "<stmt>", "eval")
        calls, end = 0, time.perf_counter() + args.loop
        while time.perf_counter() < end:
            eval(code, env)
            calls += 1
        print(f"{{LABEL}}: {{calls}} calls in {{args.loop:g}} s at {{threads[0]}} thread(s)")
        return
    for n in threads:
        timer = Timer(STMT, globals=env, num_threads=n, label=LABEL, description=f"{{n}} thread(s)")
        timer.timeit(number=1)  # warm-up after the thread change (2 untimed calls + 1)
        print(timer.adaptive_autorange(threshold=0.1, max_run_time=args.max_run_time))


if __name__ == "__main__":
    main()
'''


def file_name(index: int, case: Case) -> str:
    op = case.op.split("::")[-1]
    shapes = "_".join("x".join(str(d) for d in t.shape) or "scalar" for t in case.tensors)
    dts = sorted({t.dtype for t in case.tensors} - {"float32"})
    stem = f"{index:02d}_{op}_{shapes}" + (f"_{'_'.join(dts)}" if dts else "")
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", stem)[:80]
    return stem + ".py"


def render(case: Case, name: str, threads: list[int], measured: str) -> str:
    setup = textwrap.indent(case.setup_code(), "    ")
    n_tensors = len(case.tensors)
    names = ", ".join(f'"x{i}": x{i}' for i in range(n_tensors))
    inputs = ", ".join(f"{t.shape} {t.dtype}" + ("" if t.strides is None else f" strides {t.strides}")
                       for t in case.tensors)
    assumed = ", ".join(f"{k}={v}" for k, v in case.assumed_args.items()) or "(nothing)"
    return _TEMPLATE.format(
        op=case.op, callable=case.callable_expr, inputs=inputs, layout=case.layout, assumed=assumed,
        source=case.source or "(not from a report)", measured=measured or "(not measured)", name=name,
        threads_text=",".join(map(str, threads)), stmt=case.stmt(), label=case.label(), threads=threads,
        setup=setup, names=names)


def write(directory: str, index: int, case: Case, threads: list[int], measured: str) -> str:
    """Write the script; returns its file name (relative to directory)."""
    name = file_name(index, case)
    path = os.path.join(directory, name)
    try:
        os.makedirs(directory, exist_ok=True)
        with open(path, "w") as fh:
            fh.write(render(case, name, threads, measured))
        os.chmod(path, 0o755)
    except OSError as e:
        raise UsageError(f"cannot write reproducer {path}: {e.strerror or e}") from None
    return name
