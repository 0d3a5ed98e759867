"""Audit of the threading environment: what each setting implies on this machine.

`audit(machine, processes=1)` reads only fields of diagnose.report.model.Machine
(`threading_env`, `intra_op_threads`, `inter_op_threads`,
`default_intra_op_threads`, `parallel_backend`, `usable_cpus`,
`logical_cpus`) and returns a list of model.EnvSetting (name, value,
implication, level), level "warning" (likely to cost time here) or "info". `processes`
is the number of compute processes seen by the sampler (several processes
each with a full pool oversubscribe even when each one looks right).

Pure: no probing of the current process, so it is tested with plain Machine
objects and re-runs on a loaded report.
"""

from __future__ import annotations

import re
from typing import Any

from diagnose.report.model import EnvSetting, Machine

COUNT_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
              "VECLIB_MAXIMUM_THREADS", "TORCH_NUM_INTEROP_THREADS")
KMP_BLOCKTIME_DEFAULT_MS = 200
PRELOADS = (
    (re.compile(r"jemalloc"), "jemalloc replaces malloc: usually faster for allocation-heavy workloads; "
                              "tune with MALLOC_CONF (e.g. background_thread:true)."),
    (re.compile(r"tcmalloc"), "tcmalloc replaces malloc: usually faster for allocation-heavy workloads."),
    (re.compile(r"libiomp5|libiomp"), "Intel OpenMP is preloaded: KMP_* variables apply (KMP_BLOCKTIME, "
                                      "KMP_AFFINITY). With a torch built on GNU OpenMP two OpenMP runtimes can "
                                      "each start a pool (check the thread counts)."),
    (re.compile(r"libgomp"), "GNU OpenMP is preloaded: OMP_* and GOMP_* variables apply."),
)


def _item(name: str, value: Any, implication: str, level: str = "info") -> EnvSetting:
    return EnvSetting(name, value, implication, level)


def _count(value: str) -> int | None:
    """First number of a thread-count variable ("4" or OpenMP's nested "4,2")."""
    m = re.match(r"\s*(\d+)", value)
    return int(m.group(1)) if m else None


def audit(machine: Machine, processes: int = 1) -> list[EnvSetting]:
    env = machine.threading_env or {}
    usable = machine.usable_cpus or 0
    processes = max(1, processes)
    items: list[EnvSetting] = []

    if usable and machine.logical_cpus and usable < machine.logical_cpus:
        items.append(_item("usable_cpus", usable,
                           f"Only {usable} of the {machine.logical_cpus} logical CPUs are usable (affinity or cgroup "
                           f"quota); thread counts should follow {usable}, not os.cpu_count()."))

    for name in COUNT_VARS:
        if name not in env:
            continue
        n = _count(env[name])
        if n is None:
            items.append(_item(name, env[name], "Not a thread count: the library ignores it and uses its default.",
                               "warning"))
        elif name == "TORCH_NUM_INTEROP_THREADS":
            items.append(_item(name, env[name], f"Inter-op pool of {n} thread(s); it only runs work for "
                                                f"torch.jit.fork and parallel graph executors."))
        elif usable and n * processes > usable:
            per = f" per process x {processes} processes" if processes > 1 else ""
            items.append(_item(name, env[name], f"{n} threads{per} on {usable} usable CPUs oversubscribes: "
                                                f"use {max(1, usable // processes)}.", "warning"))
        else:
            items.append(_item(name, env[name], f"Caps the pool at {n} thread(s)"
                                                + (f" ({usable} usable CPUs)." if usable else ".")))

    if "OMP_NUM_THREADS" not in env:
        if processes > 1:
            items.append(_item("OMP_NUM_THREADS", None,
                               f"Unset with {processes} compute processes: each starts a full pool "
                               f"(torch's default = the CPUs it sees), {processes} x that on {usable} CPUs. "
                               f"Set OMP_NUM_THREADS={max(1, usable // processes)} for each process.", "warning"))
        else:
            items.append(_item("OMP_NUM_THREADS", None,
                               "Unset: torch sizes its intra-op pool itself"
                               + (f" ({machine.default_intra_op_threads} threads by default)."
                                  if machine.default_intra_op_threads else ".")))

    intra = machine.intra_op_threads
    if intra is not None and usable:
        if intra * processes > usable:
            items.append(_item("intra_op_threads", intra,
                               f"torch runs {intra} intra-op threads" + (f" in each of {processes} processes"
                                                                         if processes > 1 else "")
                               + f" on {usable} usable CPUs: threads wait for CPUs (torch.set_num_threads("
                                 f"{max(1, usable // processes)})).", "warning"))
        elif intra < usable and processes == 1:
            items.append(_item("intra_op_threads", intra,
                               f"torch runs {intra} intra-op thread(s) on {usable} usable CPUs: CPU-bound operators "
                               f"leave {usable - intra} CPU(s) idle."))
    default = machine.default_intra_op_threads
    if default is not None and usable and default > usable:
        items.append(_item("default_intra_op_threads", default,
                           f"torch's default ({default}) counts more CPUs than are usable ({usable}): set the "
                           f"thread count explicitly.", "warning"))
    inter = machine.inter_op_threads
    if inter is not None and usable and inter > usable:
        items.append(_item("inter_op_threads", inter,
                           f"{inter} inter-op threads on {usable} usable CPUs: harmless unless torch.jit.fork or a "
                           f"parallel executor runs work in them beside the intra-op pool."))

    backend = (machine.parallel_backend or "").lower()
    if backend:
        if "openmp" in backend:
            text = "OpenMP backend: OMP_NUM_THREADS, OMP_WAIT_POLICY and GOMP_*/KMP_* variables apply."
        elif "native" in backend:
            text = "Native thread pool backend: OMP_NUM_THREADS does not size torch's pool; use torch.set_num_threads."
        elif "tbb" in backend:
            text = "TBB backend: OMP_* variables do not size torch's pool; use torch.set_num_threads."
        else:
            text = f"Parallel backend {machine.parallel_backend}."
        items.append(_item("parallel_backend", machine.parallel_backend, text))

    policy = env.get("OMP_WAIT_POLICY")
    if policy is not None:
        if policy.strip().lower() == "active":
            items.append(_item("OMP_WAIT_POLICY", policy,
                               "Idle OpenMP threads spin: CPU time that does no work, and it starves other threads "
                               "or processes sharing the CPUs. Use it only with one process and threads <= CPUs.",
                               "warning" if processes > 1 or (intra or 0) > usable else "info"))
        else:
            items.append(_item("OMP_WAIT_POLICY", policy, "Idle OpenMP threads sleep quickly: less wasted CPU when "
                                                          "sharing, slightly more latency between parallel regions."))
    if "GOMP_SPINCOUNT" in env:
        items.append(_item("GOMP_SPINCOUNT", env["GOMP_SPINCOUNT"],
                           "How long idle GNU OpenMP threads spin before sleeping: high values show as busy CPU "
                           "without work when threads outnumber CPUs."))
    if "KMP_BLOCKTIME" in env:
        ms = _count(env["KMP_BLOCKTIME"])
        spin = ms is None or ms > 1
        items.append(_item("KMP_BLOCKTIME", env["KMP_BLOCKTIME"],
                           (f"Intel OpenMP threads spin {env['KMP_BLOCKTIME']} ms after each parallel region "
                            f"(default {KMP_BLOCKTIME_DEFAULT_MS}): with several processes or DataLoader workers "
                            f"use 0 or 1.") if spin else
                           "Intel OpenMP threads sleep right after parallel regions: good when sharing CPUs.",
                           "warning" if spin and processes > 1 else "info"))
    for name in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY"):
        if name in env:
            items.append(_item(name, env[name],
                               "Pins OpenMP threads to CPUs: good for one process; several processes with the same "
                               "binding pile onto the same CPUs" + (" (this run has several)." if processes > 1
                                                                    else "."),
                               "warning" if processes > 1 else "info"))
    if "MKL_DYNAMIC" in env:
        items.append(_item("MKL_DYNAMIC", env["MKL_DYNAMIC"],
                           "FALSE lets MKL use its full thread count even inside parallel regions (nested "
                           "oversubscription)." if env["MKL_DYNAMIC"].strip().upper() in ("FALSE", "0") else
                           "MKL may lower its thread count inside parallel regions."))
    if "LD_PRELOAD" in env:
        for lib in re.split(r"[\s:]+", env["LD_PRELOAD"].strip()):
            if not lib:
                continue
            text = next((t for pattern, t in PRELOADS if pattern.search(lib)), "Preloaded library.")
            items.append(_item("LD_PRELOAD", lib, text))
    return items
