"""The `loop` step detector: steps are the iterations of the script's main loop (child side).

A script with no optimizer, no nn.Module and no diagnose.mark_step() (numerical
code, a functional model, a loop of tensor operations at module scope) still
has a loop that does its work. The first pass finds it and the passes after it
count its iterations:

- **Probes.** The target script is compiled from its syntax tree with a probe
  first in the body of each candidate loop (iteration start),
  `__diagnose_next__(__diagnose_loops__[3i], 0) or __diagnose_loops__[3i + 1]()`,
  and a call `__diagnose_loops__[3i + 2]()` right after it (the loop's exit). Line numbers are
  unchanged, and nothing else in the script is. Candidates are the `for` and
  `while` loops of the script file itself, at module scope or in its functions
  and methods, whose body makes a call; not the loops of a generator (a data
  source, not the work), of a function decorated or called to be compiled
  (`@torch.compile`, `torch.compile(step)`, jit.script, numba), or of a class
  deriving from a `Module` (a model's forward, which torch.compile may trace).
  A probe is C calls only while it has nothing to decide: idle, `next()` of
  an itertools.count (the iterations begun); armed, `next()` of an iterator
  that, for as many iterations as are plain boundaries
  (steps.StepClock._plain_ahead), stamps the time into the step clock's list
  (`perf_counter`, `list.append`) each iteration, or each steps.LOOP_GROUP-th
  of steps under steps.GROUP_BELOW_S (the others only count), or only counts
  after the window. Each
  gives something true; when it runs out, `next()` gives 0 and the Python
  call behind `or` does the rest (benchmarks/loop_steps.py measures both).
- **Discovery (the first pass).** If no other detector has fired, a sampling
  thread reads the main thread's stack every SAMPLE_S (backing off to
  IDLE_SAMPLE_S while no candidate loop runs). Once the loop at the
  bottom of the stack has run DISCOVER_S, it takes that loop, then descends
  to an inner loop on the stack while that inner loop holds at least
  DESCEND_SHARE of the outer one's samples, its iterations last at least
  steps.TOO_FINE_S and it runs at least EPOCH_RATIO iterations per outer
  one: an epoch loop gives way to its batch loop, but neither a step's
  per-row Python loop nor its loop over layers or repeats is taken (it
  samples for up to MAX_DISCOVER_S to count that ratio). The chosen loop's
  probes then call the step clock; its counter says how many iterations had
  begun, so step numbers count from the loop's first iteration in every
  pass. The sampler stops.
- **The passes after it** get the loop (WindowSpec.loop) and probe that loop
  only, armed from the start, and their window begins at the first pass's
  window step (session.Window.after_first).

Step i runs from the start of iteration i to the start of iteration i + 1, or
to the loop's exit; the time between an exit and the loop's next start (a
function with the loop called again) belongs to no step.
"""

from __future__ import annotations

import ast
import itertools
import operator
import os
import re
import runpy
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from diagnose.steps import TOO_FINE_S

if TYPE_CHECKING:
    from diagnose.steps import StepClock

TABLE = "__diagnose_loops__"  # the probes' table in the script's globals
NEXT = "__diagnose_next__"  # builtins.next, under a name the script cannot shadow
SAMPLE_S = 0.002  # the discovery sampler's period
IDLE_SAMPLE_S = 0.1  # ... doubling up to this while no candidate loop runs (set-up, a wait, a script of no loops)
DISCOVER_S = 0.25  # the outermost loop has run this long before the loop is chosen
DESCEND_SHARE = 0.9  # an inner loop holding this share of the outer loop's samples may be the step
EPOCH_RATIO = 20  # ... when it runs at least this many iterations per iteration of the outer loop
MAX_DISCOVER_S = 3.0  # sample at most this long to tell an epoch loop from a step loop
MIN_SAMPLES = 20  # in the outermost loop, before choosing
COMPILED = re.compile(r"compile|jit|script|trace|export|dynamo|optimize|numba", re.I)  # decorators that compile what they wrap


@dataclass(frozen=True)
class LoopSite:
    """One candidate loop of the script (its probe's entries are table[3 * index] to table[3 * index + 2])."""

    index: int
    line: int  # the `for`/`while` line
    end_line: int  # the loop's last line
    scope: tuple[str, int]  # (co_name, co_firstlineno) of the code object holding it
    header: str  # the loop's first line, stripped ("for _ in range(args.steps):")

    @property
    def key(self) -> str:
        """Names the loop across passes (WindowSpec.loop)."""
        return f"line {self.line}"


@dataclass
class Probed:
    """The script's code with its probes, and the loops they mark."""

    code: Any  # the compiled module
    path: str
    sites: list[LoopSite]
    table: list[Any]  # per loop: the iterator next() steps, the Python call when it runs out, the exit call
    counters: list[Any]  # per loop: the itertools.count of its iterations begun while idle


def probe(path: str, only: str | None = None) -> Probed | None:
    """The script compiled with probes in its candidate loops (only the loop named `only`, when given), or None
    when it cannot be parsed or has no candidate loop (the caller runs it as it is)."""
    try:
        with open(path, "rb") as f:
            source = f.read()
        tree = ast.parse(source, filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    lines = source.decode("utf-8", "replace").splitlines()
    finder = _Candidates(tree)
    chosen = [c for c in finder.found if only is None or f"line {c[0].lineno}" == only]
    if not chosen:
        return None
    sites = []
    for index, (loop, scope) in enumerate(chosen):
        sites.append(LoopSite(index, loop.lineno, loop.end_lineno or loop.lineno, scope,
                              lines[loop.lineno - 1].strip() if loop.lineno <= len(lines) else ""))
        _insert(loop, index, finder.parents)
    ast.fix_missing_locations(tree)
    try:
        code = compile(tree, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):  # pragma: no cover - a tree ast.parse made compiles
        return None
    table: list[Any] = []
    counters = [itertools.count(1) for _ in sites]
    for counter in counters:  # idle: count the iterations begun (yielding 1, 2, ...: no call is made); exit: nothing
        table += [counter, int, int]
    return Probed(code, path, sites, table, counters)


def started(probed: Probed, site: LoopSite) -> int:
    """Iterations of `site` begun while its probe was idle."""
    return _value(probed.counters[site.index])


def _value(counter: Any) -> int:
    """How many values an itertools.count(1) gave, read without advancing it."""
    match = re.match(r"count\((\d+)\)", repr(counter))
    return int(match.group(1)) - 1 if match else 0


def run(probed: Probed, run_name: str = "__main__") -> dict[str, Any]:
    """Run the probed script as runpy.run_path runs a script file (the same globals, sys.argv[0] and
    sys.modules['__main__']: run_path's own helper, given the probed code); its globals at the end."""
    return runpy._run_module_code(probed.code, {TABLE: probed.table, NEXT: next}, run_name,  # noqa: SLF001
                                  pkg_name="", script_name=probed.path)


# ------------------------------------------------------------------ arming


def arm(probed: Probed, site: LoopSite, clock: "StepClock", late: bool) -> None:
    """Make `site`'s probe count the steps on the step clock. `late`: iterations may have begun already
    (discovery); the first call reads how many from the idle counter, so step numbers count from the loop's
    first iteration."""
    table, at, counter = probed.table, 3 * site.index, probed.counters[site.index]
    detail = f"the loop at {_rel(probed.path)}:{site.line} ({site.header})"
    append, now = clock.stamps.append, clock.clock

    def stamp(n: int, group: int) -> Callable[[], int] | None:
        """The next n iterations take the fast path, in C, each given something true. Group 1: each stamps its
        start (perf_counter, then list.append; zip makes its None a true (None,)). Group 0: each only counts
        (itertools.repeat). Group g > 1: g - 1 only count, then one stamps, and so on.
        Gives how many it let through unstamped so far (None for group 1)."""
        if group == 0:
            left = itertools.repeat(1, n)
            table[at] = left
            return lambda: n - operator.length_hint(left)
        stamped = zip(map(append, iter(now, None)))
        if group == 1:
            table[at] = itertools.islice(stamped, n)
            return None
        # per group a repeat of g - 1 ones, then one stamp: built in C for the batch, so that an unstamped
        # iteration costs chain's next and repeat's; how many have run is read from the repeats left
        groups = n // group
        counts = list(map(itertools.repeat, itertools.repeat(1, groups), itertools.repeat(group - 1)))
        table[at] = itertools.chain.from_iterable(itertools.chain.from_iterable(
            zip(counts, map(itertools.islice, itertools.repeat(stamped, groups), itertools.repeat(1)))))
        return lambda: groups * (group - 1) - sum(map(operator.length_hint, counts))

    slow = clock.loop_probe(detail, site.key, (lambda: _value(counter)) if late else int, stamp)
    # the exit first: an exit before the first armed iteration then closes nothing
    table[at + 2] = clock.loop_exit
    table[at + 1] = slow
    table[at] = iter(())  # run out: the next iteration makes the Python call


def variables(frame) -> list[tuple[str, Any]]:
    """The tensors a loop's frame holds in its variables, and in its lists, tuples and dicts of them (one level
    down): what the doctor scans for subnormal values where no module holds the weights."""
    import torch

    out: list[tuple[str, Any]] = []
    for name, value in list(frame.f_locals.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, (list, tuple)):
            out += [(f"{name}[{i}]", v) for i, v in enumerate(value[:64]) if isinstance(v, torch.Tensor)]
        elif isinstance(value, dict):
            out += [(f"{name}[{k!r}]", v) for k, v in list(value.items())[:64] if isinstance(v, torch.Tensor)]
    return out


# ------------------------------------------------------------------ discovery


class Finder:
    """The first pass's sampler: picks the loop (see the module docstring), arms it, and stops."""

    def __init__(self, probed: Probed, clock: "StepClock", main_ident: int | None = None,
                 sample_s: float = SAMPLE_S, discover_s: float = DISCOVER_S, max_discover_s: float = MAX_DISCOVER_S):
        self.probed = probed
        self.clock = clock
        self.main = main_ident if main_ident is not None else threading.main_thread().ident
        self.sample_s, self.discover_s, self.max_discover_s = sample_s, discover_s, max_discover_s
        self.by_scope: dict[tuple[str, int], list[LoopSite]] = {}
        for s in probed.sites:
            self.by_scope.setdefault(s.scope, []).append(s)
        self.chain: tuple[int, ...] = ()  # the loops running at the last sample, outermost first
        # per outermost loop, in how many samples with it outermost each loop ran (kept as it goes: a sample costs
        # the same at the third second of sampling as at the first)
        self.held: dict[int, Counter[int]] = {}
        self.first_seen: dict[int, tuple[float, int]] = {}  # loop -> (time, iterations begun) when first sampled
        self.chosen: LoopSite | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="diagnose-loop-finder", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def active(self, frame) -> tuple[int, ...]:
        """The candidate loops running in the main thread's stack, outermost first."""
        found: list[int] = []
        path = self.probed.path
        while frame is not None:
            code = frame.f_code
            if code.co_filename == path:
                sites = self.by_scope.get((code.co_name, code.co_firstlineno))
                if sites:
                    line = frame.f_lineno
                    inner = [s.index for s in sites if s.line <= line <= s.end_line]
                    found = sorted(inner, key=lambda i: self.probed.sites[i].line) + found
            frame = frame.f_back
        return tuple(found)

    def _run(self) -> None:
        period = self.sample_s
        while not self._stop.wait(period):
            if self.clock.detector is not None:  # another detector found the steps
                return
            frame = sys._current_frames().get(self.main)  # noqa: SLF001 - the stack of the main thread
            if frame is None:
                return
            now = time.perf_counter()
            loops = self.active(frame)
            del frame
            if not loops:  # back off: a blocked or loop-less script must not look busy (stall.py's 2% of a CPU)
                period = min(2 * period, IDLE_SAMPLE_S)
                continue
            period = self.sample_s
            self.record(now, loops)
            site = self.choose(now)
            if site is not None:
                self.chosen = site
                self.clock.arm_loop(lambda site=site: arm(self.probed, site, self.clock, late=True),
                                    seen_at=self.first_seen[site.index][0])
                return

    def record(self, now: float, loops: tuple[int, ...]) -> None:
        """One sample: the loops running, outermost first."""
        self.chain = loops
        self.held.setdefault(loops[0], Counter()).update(loops)
        for i in loops:
            if i not in self.first_seen:
                self.first_seen[i] = (now, started(self.probed, self.probed.sites[i]))

    def choose(self, now: float) -> LoopSite | None:
        """The loop to take (None: keep sampling). The outermost running loop once it has run discover_s, or an
        inner loop of it that holds nearly all its time, has iterations of a step's length, and runs at least
        EPOCH_RATIO iterations per iteration of the outer one (an epoch's batches, not a step's layers or repeats);
        until that ratio can be told, for at most max_discover_s, it keeps sampling."""
        chain = self.chain
        outer = chain[0]
        since, _ = self.first_seen[outer]
        held = self.held[outer]  # the samples with this loop outermost, and which loops ran in them
        if now - since < self.discover_s or held[outer] < MIN_SAMPLES:
            return None
        sites = self.probed.sites
        pick = outer
        for inner in chain[1:]:
            if held[inner] < DESCEND_SHARE * held[pick]:
                break
            t0, n0 = self.first_seen[inner]
            inner_n = started(self.probed, sites[inner]) - n0
            if inner_n <= 0 or (now - t0) / inner_n < TOO_FINE_S:
                break  # finer than a step (a per-row loop), or not one iteration seen yet
            outer_n = started(self.probed, sites[pick]) - self.first_seen[pick][1]
            if outer_n < 2 and inner_n < EPOCH_RATIO and now - since < self.max_discover_s:
                return None  # neither a few outer iterations nor an epoch's worth of inner ones yet
            if inner_n < EPOCH_RATIO * max(outer_n, 1):
                break  # a loop inside each step
            pick = inner
        return sites[pick]


# ------------------------------------------------------------------ the syntax tree


class _Candidates(ast.NodeVisitor):
    """The candidate loops (module docstring), each with the (co_name, co_firstlineno) of its code object."""

    def __init__(self, tree: ast.Module):
        self.found: list[tuple[ast.For | ast.While, tuple[str, int]]] = []
        self.parents: dict[int, tuple[ast.AST, str]] = {}  # id(loop) -> (the node whose list holds it, the field)
        for node in ast.walk(tree):
            for name, value in ast.iter_fields(node):
                if isinstance(value, list):
                    for child in value:
                        if isinstance(child, (ast.For, ast.While)):
                            self.parents[id(child)] = (node, name)
        # functions the script hands to a compiler by name (`torch.compile(step)`): dynamo would trace the probe
        self.compiled = {node.args[0].id for node in ast.walk(tree) if isinstance(node, ast.Call) and node.args
                         and isinstance(node.args[0], ast.Name) and COMPILED.search(ast.unparse(node.func))}
        self._scope: list[tuple[str, int] | None] = [("<module>", 1)]
        self.visit(tree)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        skip = (self._scope[-1] is None or isinstance(node, ast.AsyncFunctionDef) or _is_generator(node)
                or node.name in self.compiled or any(COMPILED.search(ast.unparse(d)) for d in node.decorator_list))
        self._scope.append(None if skip else (node.name, first))
        self.generic_visit(node)
        self._scope.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        module = any("Module" in ast.unparse(b) for b in node.bases)
        self._scope.append(None if module else ("<class>", node.lineno))  # its methods get scopes of their own
        self.generic_visit(node)
        self._scope.pop()

    def _loop(self, node: ast.For | ast.While) -> None:
        scope = self._scope[-1]
        if scope is not None and scope[0] != "<class>" and id(node) in self.parents and _calls(node):
            self.found.append((node, scope))
        self.generic_visit(node)

    visit_For = _loop
    visit_While = _loop


def _calls(loop: ast.For | ast.While) -> bool:
    """The loop's body makes a call (a loop of bare arithmetic is never a step, and its probe would cost most)."""
    return any(isinstance(n, ast.Call) for stmt in loop.body for n in ast.walk(stmt))


def _is_generator(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def _insert(loop: ast.For | ast.While, index: int, parents: dict[int, tuple[ast.AST, str]]) -> None:
    """`__diagnose_next__(__diagnose_loops__[3i], 0) or __diagnose_loops__[3i + 1]()` first in the loop's body,
    `__diagnose_loops__[3i + 2]()` right after it, both on the loop's own line."""
    def entry(slot: int) -> ast.Subscript:
        return ast.Subscript(ast.Name(TABLE, ast.Load()), ast.Constant(slot), ast.Load())

    step = ast.BoolOp(ast.Or(), [ast.Call(ast.Name(NEXT, ast.Load()), [entry(3 * index), ast.Constant(0)], []),
                                  ast.Call(entry(3 * index + 1), [], [])])
    loop.body.insert(0, ast.copy_location(ast.Expr(step), loop))
    parent, field = parents[id(loop)]
    body = getattr(parent, field)
    body.insert(body.index(loop) + 1, ast.copy_location(ast.Expr(ast.Call(entry(3 * index + 2), [], [])), loop))


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
