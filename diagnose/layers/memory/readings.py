"""Memory layer, child side of the uninstrumented pass: what is read inside the target, and what it costs.

- `RssReader`: the process's resident set at every step boundary of the
  window (steps.StepClock calls it). One `pread` of /proc/self/statm on a
  descriptor kept open: ~2 µs a step (benchmarks/memory_overhead.py measures
  it), against steps of milliseconds.
- At the window's end (`readings`): MemAvailable (/proc/meminfo) and the
  cgroup's memory limit and use, the bytes of the outermost module's
  parameters and buffers, their gradients and the optimizers' state tensors,
  and how many steps the script will run (`script_length`: the `for` loops
  around the step's line in the user's frames, read from the source and
  evaluated only where they are `range(...)`, `len(...)`, a name or an
  attribute of one: `range(args.steps)`, `for batch in loader` x
  `for epoch in range(3)`).

Nothing here runs per torch call; everything but the RSS read runs once, after
the window's clock stopped.
"""

from __future__ import annotations

import ast
import os
import sys
from typing import Any

from diagnose.machine import own_cgroup_dirs
from diagnose.protocol import MemoryReadings

NO_LIMIT = 1 << 62  # a cgroup v1 limit at or above this is "no limit" (v1 writes 2^63 rounded to pages)


class RssReader:
    """Resident set size in bytes, read with one pread on a descriptor kept open (None where there is no /proc)."""

    def __init__(self, path: str = "/proc/self/statm"):
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.fd = os.open(path, os.O_RDONLY)

    def __call__(self) -> int:
        return int(os.pread(self.fd, 128, 0).split()[1]) * self.page

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


def rss_reader() -> RssReader | None:
    try:
        reader = RssReader()
        reader()
        return reader
    except (OSError, ValueError, IndexError):
        return None


def mem_available(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cgroup_memory(root: str = "/sys/fs/cgroup", proc_self_cgroup: str = "/proc/self/cgroup") -> tuple[int | None, int | None]:
    """(the cgroup's memory limit, its use) in bytes; the limit is None where there is none."""
    for version, folder in own_cgroup_dirs(root, proc_self_cgroup, v1_controllers=("memory",)):
        limit_file, used_file = (("memory.max", "memory.current") if version == 2
                                 else ("memory.limit_in_bytes", "memory.usage_in_bytes"))
        try:
            with open(os.path.join(folder, limit_file)) as fh:
                text = fh.read().strip()
            with open(os.path.join(folder, used_file)) as fh:
                used = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        limit = None if text == "max" else int(text)
        return (None if limit is not None and limit >= NO_LIMIT else limit), used
    return None, None


# ---------------------------------------------------------------- tensors by what they are

def _storage_bytes(tensors, seen: set[int]) -> int:
    total = 0
    for t in tensors:
        if t is None or getattr(t, "device", None) is None or t.device.type != "cpu":
            continue
        try:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
        except (RuntimeError, NotImplementedError):  # meta, sparse or functional tensors: no storage to count
            continue
        if ptr and ptr not in seen:
            seen.add(ptr)
            total += storage.nbytes()
    return total


def tensor_bytes(root, optimizers) -> tuple[int | None, int | None, int | None]:
    """(parameters and buffers of the outermost module, their .grad, optimizer state) in bytes, each storage
    counted once; None where there is no module (or optimizer) to read."""
    seen: set[int] = set()
    params = grads = state = None
    if root is not None:
        params = _storage_bytes(list(root.parameters()) + list(root.buffers()), seen)
        grads = _storage_bytes([p.grad for p in root.parameters()], seen)
    if optimizers:
        state = 0
        for opt in optimizers:
            tensors = [v for s in opt.state.values() for v in (s.values() if isinstance(s, dict) else ())
                       if hasattr(v, "untyped_storage")]
            state += _storage_bytes(tensors, seen)
            if root is None:  # the parameters through the optimizer instead
                groups = [p for g in opt.param_groups for p in g["params"]]
                params = (params or 0) + _storage_bytes(groups, seen)
                grads = (grads or 0) + _storage_bytes([p.grad for p in groups], seen)
    return params, grads, state


# ---------------------------------------------------------------- how long the script runs

_SAFE_CALLS = {"range", "len", "enumerate", "min", "max", "int", "zip"}
_SAFE_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)


class _Unsafe(Exception):
    pass


def _evaluate(node: ast.AST, frame) -> Any:
    """The value of a loop's iterable, evaluated only for names, attributes, constants, arithmetic and
    range/len/enumerate/min/max/int/zip calls: nothing the user's code could run side effects through
    (a property aside)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in frame.f_locals:
            return frame.f_locals[node.id]
        if node.id in frame.f_globals:
            return frame.f_globals[node.id]
        import builtins

        if node.id in _SAFE_CALLS:
            return getattr(builtins, node.id)
        raise _Unsafe(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_evaluate(node.value, frame), node.attr)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _SAFE_BINOPS):
        a, b = _evaluate(node.left, frame), _evaluate(node.right, frame)
        if not (isinstance(a, int) and isinstance(b, int)):
            raise _Unsafe("arithmetic on non-integers")
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b, ast.FloorDiv: a // b if b else 0}[type(node.op)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SAFE_CALLS
            and not node.keywords):
        import builtins

        return getattr(builtins, node.func.id)(*[_evaluate(a, frame) for a in node.args])
    raise _Unsafe(type(node).__name__)


def _length(node: ast.AST, frame) -> tuple[int | None, str]:
    """(iterations of a `for` loop's iterable, how it was read) or (None, why not)."""
    text = ast.unparse(node)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "enumerate"
            and node.args):
        return _length(node.args[0], frame)
    try:
        value = _evaluate(node, frame)
    except _Unsafe:
        return None, f"`{text}` is not a range, a name or an attribute diagnose evaluates"
    except Exception as exc:  # noqa: BLE001 - the user's objects: any failure means unknown
        return None, f"`{text}` could not be read ({type(exc).__name__})"
    try:
        return len(value), f"{text} = {len(value)}"
    except TypeError:
        return None, f"`{text}` has no length (a generator or an iterator)"


_TREES: dict[str, ast.AST | None] = {}


def _tree(path: str) -> ast.AST | None:
    if path not in _TREES:
        try:
            with open(path, encoding="utf-8") as fh:
                _TREES[path] = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            _TREES[path] = None
    return _TREES[path]


def _scope(tree: ast.AST, code) -> ast.AST | None:
    """The AST of a frame's function (its first line is the def's, or its first decorator's), or the module."""
    if code.co_name == "<module>":
        return tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name and \
                code.co_firstlineno in [node.lineno] + [d.lineno for d in node.decorator_list]:
            return node
    return None


def _enclosing_loops(scope: ast.AST, line: int) -> list[ast.AST]:
    """The loops whose body holds `line`, outermost first, not looking into nested functions or classes."""
    out: list[ast.AST] = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            if isinstance(child, (ast.For, ast.While)) and child.body and \
                    child.body[0].lineno <= line <= child.body[-1].end_lineno:
                out.append(child)
            visit(child)

    visit(scope)
    return out


def script_length(frame, usercode) -> tuple[int | None, str]:
    """(the script's total steps, how that was read): the product of the `for` loops around the step's line in
    every user frame from `frame` outwards, one step per iteration of the innermost; (None, why) when a loop's
    length cannot be read or there is no loop."""
    loops: list[tuple[str, ast.AST, Any]] = []
    while frame is not None:
        code = frame.f_code
        if usercode.is_user(code.co_filename):
            tree = _tree(code.co_filename)
            scope = _scope(tree, code) if tree is not None else None
            if scope is not None:
                where = f"{usercode.display(code.co_filename)}:"
                loops = [(where, node, frame) for node in _enclosing_loops(scope, frame.f_lineno)] + loops
        frame = frame.f_back
    if not loops:
        return None, "no for loop around the step's line in your code"
    total, parts = 1, []
    for where, node, f in loops:
        if isinstance(node, ast.While):
            return None, f"a while loop at {where}{node.lineno}: its length is not known before it ends"
        n, how = _length(node.iter, f)
        if n is None:
            return None, f"{how} (the loop at {where}{node.lineno})"
        total *= n
        parts.append(f"{how} at {where}{node.lineno}")
    return total, " x ".join(parts) + " (one step per iteration of the innermost loop)"


def loops(usercode) -> tuple[int | None, str]:
    """script_length from the innermost user frame on this thread's stack (the runner calls it when the window
    begins: at a step boundary, inside the script's loop, whether or not the script ends inside the window)."""
    try:
        frame = user_frame(usercode)
        return script_length(frame, usercode) if frame is not None else (None, "no frame of your code on the stack")
    except Exception as exc:  # noqa: BLE001 - the user's objects: any failure means unknown
        return None, f"reading the loops failed: {type(exc).__name__}: {exc}"


def readings(length: tuple[int | None, str] | None, root, optimizers, steps_seen: int | None,
             rss: int | None) -> MemoryReadings:
    """Everything the memory layer reads once at the uninstrumented pass's window end; `length` is `loops`'s
    reading from the window's start."""
    out = MemoryReadings(rss_bytes=rss, mem_available_bytes=mem_available(), step_at_window_end=steps_seen)
    out.cgroup_limit_bytes, out.cgroup_used_bytes = cgroup_memory()
    try:
        out.parameters_bytes, out.gradients_bytes, out.optimizer_state_bytes = tensor_bytes(root, optimizers)
    except Exception as exc:  # noqa: BLE001 - the user's module: say what failed, keep the rest
        out.errors.append(f"tensor sizes: {type(exc).__name__}: {exc}")
    out.total_steps, out.total_basis = length or (None, "the window did not begin inside the script's loop")
    if out.total_steps is not None and steps_seen is not None and out.total_steps < steps_seen:
        out.total_basis = (f"{out.total_basis}: fewer than the {steps_seen} steps already run, so a step is not one "
                           "iteration of that loop; unknown")
        out.total_steps = None
    return out


def user_frame(usercode) -> Any:
    """The innermost frame of the user's code on this thread's stack, or None."""
    frame = sys._getframe(1)  # noqa: SLF001
    while frame is not None and not usercode.is_user(frame.f_code.co_filename):
        frame = frame.f_back
    return frame
