"""Memory layer, child side of the operator pass: torch's live bytes per step, what the window left alive, the peak.

The operator pass records with `profile_memory=True`: every CPU allocation
and free the allocator reports while the window is recorded is an event of
the profile, with its address and size, under the operator that made it and
the recorder's label (user line, library line, module; operators/kineto.Label).
The recorder marks each step boundary of the window with a STEP_MARK range
(`OperatorsRecorder.step_boundary`). `analyse` walks the profile's event tree
once, after recording stopped:

- live bytes at each mark: allocations made in the window less those freed
  in it (what was allocated before the window is not seen; its frees count
  0 bytes), the allocator's side of the growth per step;
- allocations never freed in the window (unpaired by address), grouped by
  (user line, module, operator, size): a site whose allocations of most
  steps are still alive is kept every step; a site whose one live
  allocation was re-made bigger step after step is a grown buffer
  (`torch.cat([buf, x])`);
- who holds them, looked up once in the process (`holders`): a tensor Python
  still references whose storage is one of those addresses is held by a
  container (its list, dict or variable found by identity in the user's
  frames, and the line that puts it there found in the source); an
  allocation no Python tensor references, made by an operator that recorded
  autograd, is held through an autograd graph (a saved tensor of a backward
  that has not run);
- the peak: the allocations alive when the window's live bytes were highest,
  split into those a backward operator later freed (saved for backward, per
  module) and the rest.

Not measurable here: allocations made before the window (parameters,
optimizer state: the uninstrumented pass reads those from the tensors
themselves), memory outside torch's CPU allocator (numpy, Python objects:
the RSS slope sees them), and which Python line appended a tensor when the
container's name is not in a frame of the user's code at the window's end.
"""

from __future__ import annotations

import ast
import gc
import time
from bisect import bisect_right
from typing import Any

from diagnose.layers.memory.growth import line

STEP_MARK = "diagnose::step"
MAX_GROUPS = 20
SITE_MIN_BYTES = 64 * 1024  # allocations from this size on are followed by site (grown buffers); smaller ones only unpaired
MAX_HOLDER_GROUPS = 6  # groups whose holders are looked up (each lookup scans the Python objects once)
CANDIDATES = 3  # tensors per group whose referrers are looked at
PERSISTENT_SHARE = 0.5  # a site kept allocations of at least this share of the window's steps: kept every step


def _site(node, label: tuple[str, Any]) -> tuple[str | None, str | None, str | None, str | None, Any]:
    """(user line, library line, module, operator, operator node) of an allocation event; `label` is the
    recorder's (label prefix, parse function): operators/kineto.SOURCE_PREFIX and Label.parse, given by the
    caller so that this module does not import the operators layer."""
    prefix, parse = label
    op = op_node = None
    p = node.parent
    while p is not None:
        name = p.name
        if name.startswith(prefix):
            user, library, module = parse(name)
            return user, library, module, op, op_node
        if op is None and "::" in name and name != STEP_MARK:
            op, op_node = name, p
        p = p.parent
    return None, None, None, op, op_node


def _freed_by_backward(node) -> bool:
    p = node.parent
    while p is not None:
        if "Backward" in p.name or p.name.startswith("autograd::engine"):
            return True
        p = p.parent
    return False


def _shapes(op_node) -> list[Any]:
    try:
        return [list(getattr(i, "sizes", []) or []) if hasattr(i, "sizes") else None
                for i in op_node.extra_fields.inputs][:4]
    except Exception:  # noqa: BLE001 - shapes are a courtesy
        return []


def _records_grad(op_node, prefix: str) -> bool:
    """The operator, or one it runs inside (up to the recorder's label), made an autograd node (its sequence
    number is set)."""
    p = op_node
    while p is not None and not p.name.startswith(prefix):
        try:
            if int(p.extra_fields.sequence_number) >= 0:
                return True
        except Exception:  # noqa: BLE001 - not an operator event
            pass
        p = p.parent
    return False


def analyse(results, window_steps: int, label: tuple[str, Any], usercode=None, frame=None) -> dict[str, Any]:
    """The raw memory profile of the window (module docstring), as JSON data for the parent; `label` is the
    recorder's (label prefix, parse function) that names each allocation's user line, library line, module."""
    import torch  # child side: the profile's event types

    t0 = time.perf_counter()
    allocation = torch._C._profiler._EventType.Allocation
    allocs: list[tuple[int, int, int, Any]] = []  # (time, ptr, size, node)
    marks: list[int] = []
    stack = list(results.experimental_event_tree()) if results is not None else []
    while stack:
        node = stack.pop()
        if node.tag == allocation:
            f = node.extra_fields
            if f.device.type == "cpu":
                allocs.append((node.start_time_ns, f.ptr, f.alloc_size, node))
        else:
            if node.name == STEP_MARK:
                marks.append(node.start_time_ns)
            stack.extend(node.children)
    allocs.sort(key=lambda a: a[0])
    marks.sort()
    times = [a[0] for a in allocs]
    live, cumulative = 0, []
    for a in allocs:
        live += a[2]
        cumulative.append(live)
    # at each step's end; not the window's start: a buffer made before the window and re-made in its first step
    # counts whole there (its free reports 0 bytes), which would tilt the slope
    readings = [cumulative[bisect_right(times, m) - 1] if bisect_right(times, m) else 0 for m in marks]
    # pair frees with allocations by address, in time order
    alive: dict[int, int] = {}
    freed_at: dict[int, int] = {}  # allocation index -> its free's index
    for i, (_, ptr, size, _) in enumerate(allocs):
        if size > 0:
            alive[ptr] = i
        elif size < 0:
            j = alive.pop(ptr, None)
            if j is not None:
                freed_at[j] = i
    unpaired = sorted(alive.values())
    steps = max(window_steps, len(marks), 1)

    def step_of(i: int) -> int:
        return bisect_right(marks, allocs[i][0])

    # sites: every unpaired allocation, and large ones (for buffers re-made bigger each step)
    sites: dict[int, tuple] = {}
    for i, a in enumerate(allocs):
        if a[2] >= SITE_MIN_BYTES or (a[2] > 0 and i not in freed_at):
            sites[i] = _site(a[3], label)
    history: dict[tuple, dict[int, int]] = {}  # (user, module, op) -> step -> the largest allocation there
    for i, s in sites.items():
        if allocs[i][2] >= SITE_MIN_BYTES:
            per = history.setdefault(s[:1] + s[2:4], {})
            k = step_of(i)
            per[k] = max(per.get(k, 0), allocs[i][2])
    groups: dict[tuple, dict[str, Any]] = {}
    for i in unpaired:
        user, library, module, op, op_node = sites[i]
        size = allocs[i][2]
        g = groups.get((user, module, op, size))
        if g is None:
            g = groups[(user, module, op, size)] = {
                "source": user, "library_line": library, "module": module, "op": op,
                "input_shapes": _shapes(op_node) if op_node is not None else [], "allocations": 0, "bytes": 0,
                "steps": set(), "bytes_per_step": 0.0, "grown_buffer": False, "held_by": "unknown",
                "grad_fn": None, "holder": None, "holder_line": None, "_ptrs": [],
                "_grad": op_node is not None and _records_grad(op_node, label[0])}
        g["allocations"] += 1
        g["bytes"] += size
        g["steps"].add(step_of(i))
        g["_ptrs"].append(allocs[i][1])
    for g in groups.values():
        n = len(g["steps"])
        if n >= max(2, PERSISTENT_SHARE * steps):
            g["bytes_per_step"] = round(g["bytes"] / steps, 1)
        elif g["allocations"] == 1:
            per = history.get((g["source"], g["module"], g["op"]), {})
            sizes = [per[k] for k in sorted(per)]
            fit = line(sizes) if len(sizes) >= max(4, PERSISTENT_SHARE * steps) else None
            if fit is not None and fit[1] > 0 and sizes[-1] == max(sizes):
                g["bytes_per_step"], g["grown_buffer"] = round(fit[0], 1), True
        g["steps"] = n
    kept = sorted(groups.values(), key=lambda g: (-g["bytes_per_step"], -g["bytes"]))
    growing = [g for g in kept if g["bytes_per_step"] > 0]
    scope = ("allocations made in the window and alive at its end (unpaired allocation events of the operator "
             "pass's memory profile)")
    if growing:
        try:
            scope += "; " + holders(growing, usercode, frame)
        except Exception as exc:  # noqa: BLE001 - who holds them is a bonus; the groups stand
            scope += f"; who holds them could not be read ({type(exc).__name__}: {exc})"
    for g in kept:
        g.pop("_ptrs", None)
        g.pop("_grad", None)
    peak = _peak(allocs, cumulative, freed_at, label)
    return {
        "live_bytes": readings, "marks": len(marks),
        "retained": {"allocations": len(unpaired), "bytes": sum(allocs[i][2] for i in unpaired),
                     "groups": kept[:MAX_GROUPS], "scope": scope},
        "peak": peak, "analysis_s": round(time.perf_counter() - t0, 4), "allocation_events": len(allocs),
    }


def _peak(allocs, cumulative, freed_at, label) -> dict[str, Any]:
    if not cumulative:
        return {}
    k = max(range(len(cumulative)), key=cumulative.__getitem__)
    t = allocs[k][0]
    saved = temporaries = 0
    by_module: dict[str, int] = {}
    for i in range(k + 1):
        size = allocs[i][2]
        if size <= 0:
            continue
        j = freed_at.get(i)
        if j is not None and allocs[j][0] <= t:
            continue
        if j is not None and _freed_by_backward(allocs[j][3]):
            saved += size
            module = _site(allocs[i][3], label)[2]
            key = "(outside any module)" if module is None else (module or "(the outermost module)")
            by_module[key] = by_module.get(key, 0) + size
        else:
            temporaries += size
    return {"saved_for_backward_bytes": saved, "temporaries_bytes": temporaries, "window_peak_bytes": cumulative[k],
            "saved_by_module": [[m, b] for m, b in sorted(by_module.items(), key=lambda kv: -kv[1])[:10]]}


# ---------------------------------------------------------------- who holds what the window left alive

def holders(groups: list[dict[str, Any]], usercode, frame) -> str:  # noqa: C901
    """Fill each growing group's `held_by`, `grad_fn`, `holder`, `holder_line`; say what was looked at.

    A tensor found among the process's Python objects is not yet held by Python: torch keeps a tensor's
    Python object alive while C++ (an autograd graph's saved tensor) still holds the tensor. So it is held
    by a container only when something else refers to it: a list, a dict, a frame's variable."""
    import torch  # child side: which objects are tensors

    groups = groups[:MAX_HOLDER_GROUPS]
    by_ptr = {ptr: i for i, g in enumerate(groups) for ptr in g["_ptrs"]}
    found: list[list[Any]] = [[] for _ in groups]  # per group: a few tensors Python objects exist for
    t0 = time.perf_counter()
    tensor = torch.Tensor
    for obj in gc.get_objects():
        if issubclass(type(obj), tensor):  # type(), not isinstance: a deprecated proxy warns on __class__
            try:
                i = by_ptr.get(obj.untyped_storage().data_ptr())
            except Exception:  # noqa: BLE001 - tensors without storage
                continue
            if i is not None and len(found[i]) < CANDIDATES:
                found[i].append(obj)
    frames = _user_frames(usercode, frame)
    own = {id(found), id(frames), *(id(f) for f in found)}
    for g, tensors in zip(groups, found):
        for tensor in tensors:
            fn = getattr(tensor, "grad_fn", None)
            g["grad_fn"] = g["grad_fn"] or (type(fn).__name__ if fn is not None else None)
            holder, where = _holder(tensor, frames, usercode, own)
            if holder is not None and holder.startswith("variable") and g["allocations"] > 1:
                continue  # a variable holds one tensor (the last step's): not what keeps every step's
            if holder is not None:
                g["held_by"], g["holder"], g["holder_line"] = "container", holder, where
                break
        if g["held_by"] != "container":
            g["held_by"] = "autograd graph" if g["_grad"] else "unknown"
            g["grad_fn"] = None
    # a graph-held group is kept by the container holding the graph's output made at the same line
    for g in groups:
        if g["held_by"] == "autograd graph":
            root = next((o for o in groups if o["held_by"] == "container" and o["grad_fn"]
                         and o["source"] == g["source"]), None)
            if root is not None:
                g["holder"], g["holder_line"] = root["holder"], root["holder_line"]
    orphans = [g for g in groups if g["held_by"] == "autograd graph" and g["holder"] is None]
    if orphans:  # no container: the graph's root is a variable (`total += loss` without .item())
        holder = _graph_root(frames, usercode, torch, min_nodes=2 * max(g["steps"] for g in orphans))
        for g in orphans:
            g["holder"], g["holder_line"] = holder
    found.clear()
    return f"their holders looked up among the process's Python objects ({time.perf_counter() - t0:.2f} s)"


GRAPH_WALK_MAX = 100_000  # autograd nodes walked per candidate variable


def _graph_nodes(fn, limit: int = GRAPH_WALK_MAX) -> int:
    """Autograd nodes reachable from `fn` (a tensor's grad_fn), counted up to `limit`."""
    seen, stack = {id(fn)}, [fn]
    while stack and len(seen) < limit:
        for nxt, _ in stack.pop().next_functions:
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    return len(seen)


def _graph_root(frames, usercode, torch, min_nodes: int) -> tuple[str | None, str | None]:
    """("variable NAME", the line that assigns it in a loop) for the variable of the user's frames whose tensor
    holds the largest autograd graph, when that graph spans the window's steps (>= min_nodes nodes); else
    (None, None)."""
    best = (0, None, None)
    for f in frames:
        for scope in (f.f_locals, f.f_globals):
            for name, v in scope.items():
                fn = getattr(v, "grad_fn", None) if issubclass(type(v), torch.Tensor) else None
                if fn is not None:
                    n = _graph_nodes(fn)
                    if n > best[0]:
                        best = (n, name, f)
    n, name, f = best
    if name is None or n < min_nodes:
        return None, None
    return f"variable {name} (its graph: {n} autograd nodes)", _put_line(name, f, usercode, assign=True)


def _user_frames(usercode, frame) -> list:
    out = []
    while frame is not None and usercode is not None:
        if usercode.is_user(frame.f_code.co_filename):
            out.append(frame)
        frame = frame.f_back
    return out


def _holder(tensor, frames, usercode, own: set[int]) -> tuple[str | None, str | None]:
    """(what holds `tensor`: "list outputs", "dict cache", "variable buf"; the line that puts it there), or
    (None, None) when nothing but diagnose's own lists refers to it."""
    anonymous = None
    for ref in gc.get_referrers(tensor):
        if id(ref) in own:
            continue
        if type(ref).__name__ == "frame":
            name = next((k for k, v in ref.f_locals.items() if v is tensor), None)
            if name and usercode is not None and usercode.is_user(ref.f_code.co_filename):
                return f"variable {name}", _put_line(name, ref, usercode, assign=True)
            continue
        if isinstance(ref, dict):
            for f in frames:  # a module's variable (module globals are a dict)
                if ref is f.f_globals:
                    name = next((k for k, v in ref.items() if v is tensor), None)
                    if name:
                        return f"variable {name}", _put_line(name, f, usercode, assign=True)
        if isinstance(ref, (list, dict, set)):
            for f in frames:
                for scope in (f.f_locals, f.f_globals):
                    name = next((k for k, v in scope.items() if v is ref), None) or _attribute(scope, ref)
                    if name:
                        return f"{type(ref).__name__} {name}", _put_line(name, f, usercode)
            anonymous = anonymous or f"a {type(ref).__name__} (not a variable of your code's frames)"
        elif isinstance(ref, tuple):
            anonymous = anonymous or "a tuple"
    return anonymous, None


_PUTS = {"append", "extend", "insert", "setdefault", "update", "add", "appendleft"}


def _attribute(scope: dict, ref) -> str | None:
    """`obj.attr` when an object that is a variable of `scope` holds `ref` as an attribute (self.cache)."""
    for k, v in scope.items():
        attrs = getattr(v, "__dict__", None)
        if isinstance(attrs, dict) and not isinstance(v, type) and type(v).__name__ != "module":
            attr = next((a for a, x in attrs.items() if x is ref), None)
            if attr:
                return f"{k}.{attr}"
    return None


def _put_line(name: str, frame, usercode, assign: bool = False) -> str | None:
    """The first statement of the frame's function (or module) that puts a tensor into `name`: `name.append(...)`
    (extend, insert, setdefault, update, add), `name[...] = ...`, `name += ...`, or, for a variable
    (`assign`), `name = ...` inside a loop. Read from the source's syntax tree, so comments and strings that
    mention the name do not count."""
    path = frame.f_code.co_filename
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    scope = tree
    if frame.f_code.co_name != "<module>":
        scope = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.name == frame.f_code.co_name and n.lineno <= frame.f_lineno <= n.end_lineno), tree)
    loops = [n for n in ast.walk(scope) if isinstance(n, (ast.For, ast.While))]

    def named(node) -> bool:  # `name`, or `obj.attr` for an attribute holder
        return isinstance(node, (ast.Name, ast.Attribute)) and ast.unparse(node) == name

    hits = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PUTS \
                and named(node.func.value):
            hits.append(node.lineno)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and named(t.value) for t in node.targets):
            hits.append(node.lineno)
        elif isinstance(node, ast.AugAssign) and named(node.target):
            hits.append(node.lineno)
        elif assign and isinstance(node, ast.Assign) and any(named(t) for t in node.targets) \
                and any(l.lineno < node.lineno <= l.end_lineno for l in loops):
            hits.append(node.lineno)
    return f"{usercode.display(path)}:{min(hits)}" if hits else None


def mark(torch) -> None:
    """A STEP_MARK range in the profile, now (OperatorsRecorder.step_boundary)."""
    with torch.profiler.record_function(STEP_MARK):
        pass

