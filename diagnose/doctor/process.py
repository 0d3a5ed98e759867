"""Readings taken inside the target's process by the uninstrumented pass (diagnose/runner.py).

Around the window: the cgroup's cpu.stat at its start and end (throttling
while the steps ran). At its end, after the clock stopped (so none of this is
timed): the shared objects mapped (/proc/self/maps: allocator, OpenMP and
BLAS runtimes) and a scan for subnormal values in the tensors the steps
computed with: the parameters and buffers of the outermost module and the
tensor inputs of its last forward (diagnose/steps.py finds that module).
A tensor over SCAN_MAX_VALUES values is scanned through an evenly strided
sample of that many, so a scan costs at most a few milliseconds per tensor.

Everything here is best-effort: a reading that fails is left out, never an
error of the pass.
"""

from __future__ import annotations

import os
from typing import Any

from diagnose.doctor.environment import loaded_libraries

SCAN_MAX_VALUES = 1 << 20  # values scanned per tensor (an evenly strided sample beyond)
SCAN_MAX_TENSORS = 256  # the largest tensors, when a model has more
SCAN_MIN_VALUES = 64  # smaller tensors (biases of tiny layers) say nothing about the hot operators


def libraries() -> list[str]:
    try:
        with open("/proc/self/maps") as fh:
            return loaded_libraries(fh.read())
    except OSError:
        return []


def blas_pools(paths: list[str], forked: bool) -> dict[str, bool]:
    """For each OpenBLAS among `paths` (mapped shared objects): whether its thread pool was started in this
    process. Only known in a pass forked from diagnose's fork server (`forked`): OpenBLAS starts its pool when it is
    loaded (numpy, imported by torch, loads it in the server) and shuts it down at fork, and starts it again
    in the child only for a BLAS call that uses threads, so `blas_server_avail` (an exported variable of
    OpenBLAS) is then 1 exactly when numpy/scipy did threaded linear algebra in this run. Empty in a fresh
    process (the pool starts at load whatever runs) or when nothing can be read."""
    import ctypes

    if not forked:
        return {}
    out: dict[str, bool] = {}
    for path in paths:
        if "openblas" not in os.path.basename(path).lower():
            continue
        try:
            handle = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)  # already mapped: never loads anew
            out[path] = bool(ctypes.c_int.in_dll(handle, "blas_server_avail").value)
        except (OSError, ValueError, AttributeError):
            continue
    return out


def _tensors(root: Any, inputs: tuple, variables: list[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    import torch

    out: list[tuple[str, Any]] = []
    if root is not None:
        out += list(root.named_parameters()) + list(root.named_buffers())
    out += [(f"input {i}", t) for i, t in enumerate(inputs)]
    seen = {id(t) for _, t in out}
    out += [(n, t) for n, t in variables if id(t) not in seen and not seen.add(id(t))]
    out = [(n, t) for n, t in out if _scannable(t, torch)]
    out.sort(key=lambda nt: -nt[1].numel())
    return out[:SCAN_MAX_TENSORS]


def _scannable(t: Any, torch) -> bool:
    """A floating CPU tensor of at least SCAN_MIN_VALUES values."""
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and not t.is_complex() and t.device.type == "cpu"
            and t.numel() >= SCAN_MIN_VALUES)


def count_subnormals(t: Any) -> dict[str, Any] | None:
    """One tensor's subnormal count (a strided sample of SCAN_MAX_VALUES beyond), or None when it is not a
    floating CPU tensor of at least SCAN_MIN_VALUES values. Call under torch.no_grad()."""
    import torch

    if not _scannable(t, torch):
        return None
    flat = t.detach().reshape(-1)
    if flat.numel() > SCAN_MAX_VALUES:
        flat = flat[:: -(-flat.numel() // SCAN_MAX_VALUES)]
    a = flat.abs()
    nonzero = int(torch.count_nonzero(a))
    sub = int(torch.count_nonzero((a < torch.finfo(t.dtype).tiny) & (a > 0))) if nonzero else 0
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "scanned": int(flat.numel()),
            "nonzero": nonzero, "subnormal": sub}


def scan_subnormals(root: Any, inputs: tuple, variables: list[tuple[str, Any]] = (),
                    loop: str | None = None) -> tuple[list[dict[str, Any]], str]:
    """Subnormal counts of the outermost module's parameters, buffers and last inputs, or (no module) of the
    tensors in the step loop's variables (diagnose/loops.py); and the scope scanned."""
    import torch

    if root is None and not inputs and not variables:
        return [], ("no outermost module was seen and no loop's variables were read (function mode, or no step "
                    "found): nothing scanned")
    rows = []
    with torch.no_grad():
        for name, t in _tensors(root, inputs, variables):
            counted = count_subnormals(t)
            if counted:
                rows.append({"tensor": name, **counted})
    parts = ([f"parameters and buffers of {type(root).__name__}"] if root is not None else []) + \
        (["the tensor inputs of its last forward"] if inputs else []) + \
        ([f"the tensors in the variables of {loop or 'the step loop'}"] if variables else [])
    return rows, " and ".join(parts)
