"""Copy time named by what the user wrote.

Kinds: .contiguous(), .clone(), .to(), a copying reshape, an explicit
.copy_(), autocast's cast of a GEMM's operand (LAYOUT: copies the code asks
for), indexed assignment, or a kernel's internal copy.

The profiler records each copy as a chain of ATen operators; only the leaves
that move bytes (COPY_BODIES: copy_, clone, _to_copy) have self time worth
counting. Each operator row carries `called_by` (self µs by its direct
parent; "" = called from Python) and `sources` (self µs by user line), so a
copy's origin is found by walking up the chain through the wrapper
operators (CHAIN) to the operator that was called from Python or from a
kernel. What each pattern records (torch 2.13, checked with diagnose on small
scripts):
- `x.t().contiguous()`: contiguous ("") -> clone -> copy_
- `x.clone()`: clone ("") -> copy_
- `x.to(torch.float64)`, `.float()`: to ("") -> _to_copy -> copy_
- `x.t().reshape(-1)`, `flatten`: reshape ("") -> clone -> copy_
- `buf.copy_(x)`: copy_ ("")
- `out[i] = v`, `out[:, a:b] = v`: select / slice ("") and copy_ ("") at
  the same line: indexed assignment (`out[idx] = v` with a tensor index is
  index_put_ -> _index_put_impl_, no copy_ row at all)
- a scalar operand of div_/add (`x / 3.0`): to (called by div_) -> _to_copy
  -> copy_: internal; addmm writing its broadcast bias: copy_ (called by
  addmm): internal.
- under torch.autocast: linear -> to -> _to_copy -> copy_ (a float32 weight,
  bias or input cast to bfloat16 by the GEMM's autocast kernel, every call):
  autocast. No GEMM or convolution calls `aten::to` itself outside autocast.
Rows are per (operator, shapes), with their time split by parent and by
line separately, not by both: `Origins.joint` estimates the split by (parent,
line) by giving a parent's time only to the lines where that parent operator
itself ran (a clone's `aten::contiguous` parent to the lines where
contiguous ran), in proportion to the row's time there; a call from Python
("") goes to the lines where no other parent ran (and, for copy_, where an
indexing view ran); a parent with no such line is spread over all of them.
LAYOUT kinds are copies the user's code asks for; indexed assignment moves
data the program needs, and internal copies belong to their kernel.
"""

from __future__ import annotations

from collections import defaultdict

from diagnose.opkinds import COMPUTE_CLASSES, op_class
from diagnose.report.model import AutocastEntry, OperatorRow, Report

COPY_BODIES = {"aten::copy_", "aten::clone", "aten::_to_copy"}
CHAIN = COPY_BODIES | {"aten::to", "aten::contiguous", "aten::reshape", "aten::flatten"}
TOP_KIND = {"aten::contiguous": "contiguous", "aten::clone": "clone", "aten::to": "to", "aten::_to_copy": "to",
            "aten::reshape": "reshape", "aten::flatten": "reshape"}
INDEXING = {"aten::select", "aten::slice", "aten::narrow", "aten::index"}  # views `out[...] =` goes through
# copies the code asks for: its layout changes, and autocast's casts of float32 weights and inputs
LAYOUT = ("contiguous", "clone", "to", "reshape", "copy_", "autocast")
AUTOCAST_CASTS = {"aten::to", "aten::_to_copy"}
MAX_DEPTH = 6


def _shares(row: OperatorRow) -> list[tuple[str | None, float]]:
    total = sum(s.self_cpu_us for s in row.sources)
    if total <= 0:
        return [(row.source, 1.0)]
    return [(s.location, s.self_cpu_us / total) for s in row.sources]


class Origins:
    """Copy self time of one report by (kind, location, via), via = the operator the chain ends at."""

    def __init__(self, report: Report):
        self.by_name: dict[str, list[OperatorRow]] = defaultdict(list)
        self.ran_at: dict[str, set[str | None]] = defaultdict(set)  # operator -> lines it ran at
        self.indexing_at: set[str | None] = set()
        for r in report.operators:
            self.by_name[r.name].append(r)
            self.ran_at[r.name].update(loc for loc, _ in _shares(r))
            if r.name in INDEXING and r.called_by.get("", 0) > 0:
                self.indexing_at.update(loc for loc, _ in _shares(r))
        self._parents: dict[tuple, dict[str, float]] = {}

    def joint(self, row: OperatorRow) -> dict[tuple[str, str | None], float]:
        """The row's self µs by (parent, line), estimated from its two marginals (module docstring)."""
        shares = dict(_shares(row))
        plausible = {p: {loc for loc in shares if loc in self.ran_at.get(p, ())} for p in row.called_by if p}
        taken = set().union(*plausible.values()) if plausible else set()
        if "" in row.called_by:
            plausible[""] = {loc for loc in shares if loc not in taken
                             or (row.name == "aten::copy_" and loc in self.indexing_at)}
        out: dict[tuple[str, str | None], float] = {}
        for p, us in row.called_by.items():
            locs = plausible.get(p) or set(shares)
            weight = sum(shares[loc] for loc in locs) or 1.0
            for loc in locs:
                out[(p, loc)] = out.get((p, loc), 0.0) + us * shares[loc] / weight
        return out

    def parents(self, name: str, loc: str | None) -> dict[str, float]:
        """Self µs of `name` by its parent, at `loc` when it ran there, else everywhere."""
        key = (name, loc)
        if key not in self._parents:
            here: dict[str, float] = defaultdict(float)
            for r in self.by_name.get(name, []):
                for (p, at), us in self.joint(r).items():
                    if at == loc:
                        here[p] += us
            if not any(here.values()):
                for r in self.by_name.get(name, []):
                    for p, us in r.called_by.items():
                        here[p] += us
            self._parents[key] = dict(here)
        return self._parents[key]

    def origin(self, name: str, parent: str, loc: str | None, depth: int = 0) -> list[tuple[str, float, str]]:
        """[(kind, fraction, via)] for self time of `name` called by `parent` at `loc`."""
        if parent == "":
            if name == "aten::copy_":
                return [("indexed assignment" if loc in self.indexing_at else "copy_", 1.0, name)]
            return [(TOP_KIND.get(name, "internal"), 1.0, name)]
        if parent not in CHAIN and name in AUTOCAST_CASTS and op_class(parent) in COMPUTE_CLASSES:
            return [("autocast", 1.0, parent)]  # the GEMM's own dtype cast: autocast's (module docstring)
        if parent not in CHAIN or depth >= MAX_DEPTH:
            return [("internal", 1.0, parent)]
        up = {p: us for p, us in self.parents(parent, loc).items() if us > 0}
        total = sum(up.values())
        if not total:  # the wrapper has no row of its own: take it as called from Python
            return self.origin(parent, "", loc, depth + 1)
        return [(kind, frac * us / total, via) for p, us in up.items()
                for kind, frac, via in self.origin(parent, p, loc, depth + 1)]

    def of_row(self, row: OperatorRow) -> dict[tuple[str, str | None, str], float]:
        """A copy-chain row's self time by (kind, location, via)."""
        out: dict[tuple[str, str | None, str], float] = defaultdict(float)
        if row.name not in CHAIN:
            return out
        for (parent, loc), us in self.joint(row).items():
            for kind, frac, via in self.origin(row.name, parent, loc):
                out[(kind, loc, via)] += us * frac
        return out


def by_origin(report: Report) -> dict[tuple[str, str | None, str], float]:
    """All copy self time of the report by (kind, location, via)."""
    origins = Origins(report)
    out: dict[tuple[str, str | None, str], float] = defaultdict(float)
    for row in report.operators:
        if row.name in COPY_BODIES:
            for key, us in origins.of_row(row).items():
                out[key] += us
    return dict(out)


def row_kind(report: Report, name: str, input_shapes) -> tuple[str, str | None]:
    """(kind, via) that holds most of one copy-chain row's time (without the row: the kind its name implies)."""
    origins = Origins(report)
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for row in report.operators:
        if row.name == name and row.input_shapes == input_shapes:
            for (kind, _, via), us in origins.of_row(row).items():
                totals[(kind, via)] += us
    if totals:
        return max(totals, key=lambda k: totals[k])
    return TOP_KIND.get(name, "copy_" if name == "aten::copy_" else "internal"), None


def autocast_entry(report: Report) -> AutocastEntry | None:
    """Where the target entered torch.autocast most often (the operator pass's record), at a user line: where the
    change that ends autocast's casts goes; None when no entry was recorded at a user line."""
    summary = report.operator_summary
    entries = [e for e in (summary.autocast_entries if summary else []) if e.source]
    return max(entries, key=lambda e: e.entries) if entries else None


def internal(report: Report, name: str, input_shapes) -> bool:
    """Whether a copy-chain row's time is mostly a kernel's own internal copy (addmm writing its broadcast
    bias, a scalar operand converted for div_): that kernel's cost, judged with its row, not a copy the user's
    code makes."""
    return name in CHAIN and row_kind(report, name, input_shapes)[0] == "internal"
