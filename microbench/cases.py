"""Benchmark cases: report rows or command-line specs -> a runnable aten call.

Contract
- A case is one operator overload at one set of input shapes, dtypes and
  layouts. It is described by two strings of plain torch code: `setup_code()`
  builds the inputs (seeded), `stmt()` calls the operator, e.g.
  `torch.ops.aten.mm.default(x0, x1)`. The same strings drive the timer, the
  FLOP count, callgrind and the standalone reproducer, so all four measure the
  same thing.
- Operator names: `aten::mm` (profiler), `aten::mm.default`, `aten.mm`,
  `torch.ops.aten.mm` or bare `mm`. The profiler records no overload, so the
  overload is chosen by matching what was recorded for each input (a tensor
  dtype, `Scalar`, `ScalarList`, `TensorList` or `""` for None) against each
  overload's schema. An `out=` overload is tried only after every other
  fails: the profiler records an out tensor as the call's last input, so a
  row whose inputs only an `out=` overload takes was such a call (a compiled
  graph's `aten::addmm.out`, `aten::sum.IntList_out` inside `aten::std`).
  Its out tensor is written, not read (`ArgSpec.out`).
- Non-tensor arguments: the report records their kind, not their value. A
  value comes from, in order: the row's optional `concrete_inputs` (or a
  `--arg name=value` on the command line), the schema default, a conventional
  guess by argument name (`dim=-1`, `threshold=0`, `reduction=1`, conv
  `stride=[1,..]`, `padding=[0,..]`, ...), else the row cannot be rebuilt.
  Every guessed value is listed in `assumed_args`.
- Layout: rows without strides are built contiguous and the
  case says so (`layout`). An optional `strides` (list per input) or
  `contiguous` (bool, or list per input) field is honoured: recorded strides
  are rebuilt exactly with `as_strided`; `contiguous: false` without strides
  is rebuilt as the common non-contiguous case, last two dims transposed.
- Input values: floating/complex `randn`, integer `randint(0, 2)` (valid as
  class indices and gather/index positions for any dimension >= 2), bool
  random. Values rarely change a kernel's speed; indices must stay valid.
- `validate(case)` runs the call once, counting FLOPs with
  `torch.utils.flop_counter.FlopCounterMode` (None when torch has no formula
  for the op) and bytes = inputs + outputs (a lower bound on memory traffic:
  each tensor touched once). A call that raises makes the row unusable; the
  reason is kept.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from microbench.errors import UsageError

# Profiler dtype names (caffe2 TypeMeta) -> torch attribute names.
PROFILER_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8",
    "unsigned char": "uint8", "bool": "bool", "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
}
TORCH_TO_PROFILER = {v: k for k, v in PROFILER_DTYPES.items()}
_ALIASES = {
    "float32": "float32", "fp32": "float32", "f32": "float32", "float": "float32",
    "float64": "float64", "fp64": "float64", "double": "float64",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
    "int16": "int16", "short": "int16", "int8": "int8", "uint8": "uint8",
    "bool": "bool", "complex64": "complex64", "complex128": "complex128",
}
NON_TENSOR_KINDS = {"Scalar": "scalar", "ScalarList": "list", "": "none", "TensorList": "tensorlist"}

_SCALAR_TYPES = {"number", "Scalar", "int", "SymInt", "float", "bool", "ScalarType", "MemoryFormat", "Layout"}
# c10::ScalarType codes, as the profiler records a dtype argument's value.
_SCALAR_TYPE_CODES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                      7: "float64", 8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16"}


class Code(str):
    """A value written as code (e.g. torch.float32); JSON shows the text."""
_LIST_ITEMS = {"int", "SymInt", "float", "bool"}
_NONE_OK_TYPES = {"str", "Device", "Layout", "MemoryFormat", "Generator", "ScalarType"}

# Conventional values for arguments the profiler records without a value.
_SCALAR_GUESSES = {
    "dim": -1, "threshold": 0, "min": 0, "reduction": 1, "ignore_index": -100, "half_to_float": False,
    "groups": 1, "transposed": False, "eps": 1e-5, "momentum": 0.1,
}


def _spatial(first_shape: list[int]) -> int:
    return max(1, len(first_shape) - 2)


_LIST_GUESSES = {
    "dim": lambda shape: [0],
    "stride": lambda shape: [1] * _spatial(shape),
    "padding": lambda shape: [0] * _spatial(shape),
    "dilation": lambda shape: [1] * _spatial(shape),
    "output_padding": lambda shape: [0] * _spatial(shape),
    "normalized_shape": lambda shape: [shape[-1]] if shape else None,
}


class CannotRebuild(Exception):
    """This row or spec cannot be turned into a runnable call; str() says why."""


def torch_dtype_name(name: str) -> str | None:
    """'float' (profiler) or 'float32'/'fp32'/'torch.float32' -> 'float32'; None if not a tensor dtype."""
    name = name.strip()
    if name in PROFILER_DTYPES:
        return PROFILER_DTYPES[name]
    key = name[6:] if name.startswith("torch.") else name
    return _ALIASES.get(key.lower())


def profiler_dtype_name(torch_name: str) -> str:
    return TORCH_TO_PROFILER.get(torch_name, torch_name)


# --------------------------------------------------------------------------
# Operator names
# --------------------------------------------------------------------------

def split_op_name(name: str) -> tuple[str, str, str | None]:
    """'aten::mm' / 'aten::mm.default' / 'torch.ops.aten.mm' / 'mm' -> (namespace, op, overload or None)."""
    s = name.strip()
    if s.startswith("torch.ops."):
        s = s[len("torch.ops."):]
        ns, _, rest = s.partition(".")
    elif "::" in s:
        ns, _, rest = s.partition("::")
    elif s.count(".") >= 1 and s.split(".", 1)[0] in ("aten", "prims", "quantized"):
        ns, _, rest = s.partition(".")
    else:
        ns, rest = "aten", s
    op, _, overload = rest.partition(".")
    if not ns.isidentifier() or not op.isidentifier() or (overload and not overload.isidentifier()):
        raise CannotRebuild(f"not an operator name: {name!r}")
    return ns, op, overload or None


def resolve_packet(ns: str, op: str):
    """torch.ops.<ns>.<op> or None."""
    import torch

    try:
        namespace = getattr(torch.ops, ns)
        packet = getattr(namespace, op)
    except (AttributeError, RuntimeError):
        return None
    return packet if hasattr(packet, "overloads") else None


# --------------------------------------------------------------------------
# The case
# --------------------------------------------------------------------------

@dataclass
class TensorSpec:
    shape: list[int]
    dtype: str                       # torch name, e.g. "float32"
    strides: list[int] | None = None  # None: contiguous


@dataclass
class ArgSpec:
    name: str
    kwarg_only: bool
    tensor: TensorSpec | None = None
    value: Any = None
    assumed: bool = False
    out: bool = False                # an out= tensor: the call writes it and does not read it


@dataclass
class Case:
    op: str                          # "aten::mm"
    overload: str                    # "default"
    input_shapes: list[list[int]]    # as recorded / given
    dtypes: list[str]                # profiler vocabulary, aligned with input_shapes
    args: list[ArgSpec]
    layout: str                      # how inputs are laid out and whether that was recorded
    source: str | None = None
    self_pct: float | None = None
    calls: int | None = None
    flops: int | None = None         # filled by validate()
    bytes: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def callable_expr(self) -> str:
        ns, _, op = self.op.partition("::")
        return f"torch.ops.{ns}.{op}.{self.overload}"

    @property
    def tensors(self) -> list[TensorSpec]:
        return [a.tensor for a in self.args if a.tensor is not None]

    @property
    def read(self) -> list[bool]:
        """Per tensor input (x0, x1, ...): does the call read it? An out= tensor it only writes."""
        return [not a.out for a in self.args if a.tensor is not None]

    @property
    def contiguous(self) -> bool:
        return all(t.strides is None for t in self.tensors)

    @property
    def strides(self) -> list[list[int] | None] | None:
        """Per tensor input, None when all are contiguous."""
        return None if self.contiguous else [t.strides for t in self.tensors]

    @property
    def assumed_args(self) -> dict[str, Any]:
        return {a.name: a.value for a in self.args if a.assumed}

    @property
    def key(self) -> tuple:
        return (self.op, json_key(self.input_shapes), json_key(self.dtypes), self.layout_key)

    @property
    def layout_key(self) -> str:
        return "contiguous" if self.contiguous else json_key([t.strides for t in self.tensors])

    def label(self) -> str:
        shapes = ", ".join(
            f"{list(a.tensor.shape)}{'' if a.tensor.strides is None else '*'}" for a in self.args if a.tensor)
        dts = sorted({a.tensor.dtype for a in self.args if a.tensor})
        return f"{self.op} {shapes} {'/'.join(dts)}".strip()

    def setup_code(self, seed: int = 0) -> str:
        lines = [f"torch.manual_seed({seed})"]
        i = 0
        for a in self.args:
            if a.tensor is not None:
                lines.append(f"x{i} = {_tensor_expr(a.tensor)}")
                i += 1
        return "\n".join(lines)

    def stmt(self) -> str:
        pos, kw = [], []
        i = 0
        for a in self.args:
            if a.tensor is not None:
                expr = f"x{i}"
                i += 1
            else:
                expr = literal(a.value)
            (kw.append(f"{a.name}={expr}") if a.kwarg_only else pos.append(expr))
        return f"{self.callable_expr}({', '.join(pos + kw)})"


def json_key(x: Any) -> str:
    import json
    return json.dumps(x, separators=(",", ":"))


def literal(value: Any) -> str:
    """Python source for a schema value (numbers, bools, None, str, lists, torch enums)."""
    if isinstance(value, Code):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    text = repr(value)
    if text.startswith("torch."):
        return text
    raise CannotRebuild(f"cannot write value {text} as code")


def _tensor_expr(t: TensorSpec) -> str:
    dt = f"torch.{t.dtype}"
    if t.strides is None:
        size = list(t.shape)
    else:
        size = [0 if any(s == 0 for s in t.shape)
                else 1 + sum((s - 1) * st for s, st in zip(t.shape, t.strides))]
    if t.dtype == "bool":
        base = f"(torch.rand({size}) < 0.5)"
    elif t.dtype.startswith(("int", "uint")):
        base = f"torch.randint(0, 2, {size}, dtype={dt})"
    else:
        base = f"torch.randn({size}, dtype={dt})"
    if t.strides is not None:
        base += f".as_strided({list(t.shape)}, {list(t.strides)})"
    return base


# --------------------------------------------------------------------------
# Building a case from recorded inputs
# --------------------------------------------------------------------------

def _kind(dtype: str) -> str:
    if dtype in NON_TENSOR_KINDS:
        return NON_TENSOR_KINDS[dtype]
    if torch_dtype_name(dtype) is not None:
        return "tensor"
    return f"unknown dtype {dtype!r}"


def _base_type(arg) -> tuple[str, bool]:
    rt = str(getattr(arg, "real_type", arg.type))
    if rt.startswith("Optional[") and rt.endswith("]"):
        return rt[9:-1], True
    return rt, False


def _accepts(arg, kind: str) -> bool:
    base, optional = _base_type(arg)
    if kind == "tensor":
        return base == "Tensor"
    if kind == "scalar":
        return base in _SCALAR_TYPES
    if kind == "list":
        return base.startswith("List[") and base[5:-1] in _LIST_ITEMS
    if kind == "none":
        return optional or arg.has_default_value() or base in _NONE_OK_TYPES
    return False


def _is_out_overload(schema) -> bool:
    return any(getattr(a, "is_out", False) for a in schema.arguments)


def _candidate_overloads(packet, overload: str | None) -> list[tuple[str, Any]]:
    """The overloads to match, in order: the one named; else `default` first, the out= overloads last (the
    profiler records an out tensor as an input, so only a row no other overload takes was an out= call)."""
    names = list(packet.overloads())
    if overload is not None:
        if overload not in names:
            raise CannotRebuild(f"{packet} has no overload {overload!r} (has: {', '.join(names)})")
        names = [overload]
    schemas = [(n, getattr(packet, n)._schema) for n in names]
    return sorted(schemas, key=lambda ns: (_is_out_overload(ns[1]), ns[0] != "default"))


def _tensor_spec(shape, dtype, strides, contiguous_flag) -> tuple[TensorSpec, str | None]:
    tdt = torch_dtype_name(dtype)
    shape = [int(s) for s in shape]
    if strides is not None and len(strides) == len(shape) and len(shape) > 0:
        strides = [int(s) for s in strides]
        if strides == contiguous_strides(shape):
            return TensorSpec(shape, tdt, None), "recorded"
        return TensorSpec(shape, tdt, strides), "recorded"
    if contiguous_flag is False and len(shape) >= 2:
        s = contiguous_strides(shape[:-2] + [shape[-1], shape[-2]])
        st = s[:-2] + [s[-1], s[-2]]
        return TensorSpec(shape, tdt, st), "assumed-transposed"
    if contiguous_flag is True:
        return TensorSpec(shape, tdt, None), "recorded"
    return TensorSpec(shape, tdt, None), None


def contiguous_strides(shape: list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(out))


def build_case(op: str, input_shapes: list, dtypes: list, *, strides: list | None = None,
               contiguous: bool | list | None = None, concrete_inputs: list | None = None,
               overrides: dict[str, Any] | None = None, source: str | None = None,
               self_pct: float | None = None, calls: int | None = None) -> Case:
    """Recorded inputs -> Case; raises CannotRebuild with the reason."""
    ns, opname, overload = split_op_name(op)
    packet = resolve_packet(ns, opname)
    if packet is None:
        raise CannotRebuild(f"unknown operator {ns}::{opname}")
    if not isinstance(input_shapes, list) or not all(isinstance(s, list) for s in input_shapes):
        raise CannotRebuild("input_shapes is not a list of lists")
    n = len(input_shapes)
    dtypes = list(dtypes or [])
    if len(dtypes) < n:
        dtypes += [""] * (n - len(dtypes))
    dtypes = dtypes[:n]
    kinds = [_kind(d) for d in dtypes]
    for k, d in zip(kinds, dtypes):
        if k.startswith("unknown"):
            raise CannotRebuild(f"{k} in the recorded inputs")
    if "tensorlist" in kinds:
        raise CannotRebuild("a TensorList input: the report records no member shapes")
    if not any(k == "tensor" for k in kinds):
        raise CannotRebuild("no tensor inputs recorded (factory or metadata op)")

    reasons = []
    for ov_name, schema in _candidate_overloads(packet, overload):
        args = schema.arguments
        if len(args) < n:
            continue
        if any(not _accepts(a, k) for a, k in zip(args, kinds)):
            continue
        if any(not (a.has_default_value() or _base_type(a)[1] or a.name in (overrides or {})) for a in args[n:]):
            continue
        try:
            specs, layouts = _arg_specs(opname, args, input_shapes, dtypes, kinds, strides, contiguous,
                                        concrete_inputs, overrides or {})
        except CannotRebuild as e:
            reasons.append(f"{ov_name}: {e}")
            continue
        return Case(op=f"{ns}::{opname}", overload=ov_name, input_shapes=[list(s) for s in input_shapes],
                    dtypes=[d if _kind(d) != "tensor" else profiler_dtype_name(torch_dtype_name(d))
                            for d in dtypes],
                    args=specs, layout=_layout_text(layouts), source=source, self_pct=self_pct, calls=calls)
    if reasons:
        raise CannotRebuild("; ".join(reasons))
    raise CannotRebuild(f"no overload of {ns}::{opname} takes inputs ({', '.join(k for k in kinds)})")


def _layout_text(layouts: list[str | None]) -> str:
    if any(l == "assumed-transposed" for l in layouts):
        return "non-contiguous, assumed last-two-dims transposed (row said contiguous=false, no strides)"
    if layouts and all(l == "recorded" for l in layouts):
        return "as recorded (strides)"
    if any(l == "recorded" for l in layouts):
        return "partly recorded; other inputs contiguous (assumed)"
    return "contiguous (assumed: the report records no strides)"


# Ops whose dtype argument is the point of the call: guessing "same dtype" would benchmark a no-op.
_CONVERSIONS = {"to", "_to_copy", "_to_dtype", "type", "view", "_autocast_to_reduced_precision"}


def _arg_specs(op_name, args, input_shapes, dtypes, kinds, strides, contiguous, concrete, overrides):
    specs: list[ArgSpec] = []
    layouts: list[str | None] = []
    first_shape = next((list(s) for s, k in zip(input_shapes, kinds) if k == "tensor"), [])
    names = {a.name for a in args}
    unknown = set(overrides) - names
    if unknown:
        raise CannotRebuild(f"no argument named {', '.join(sorted(unknown))}")
    for i, a in enumerate(args):
        kind = kinds[i] if i < len(kinds) else "default"
        if a.name in overrides:
            v = overrides[a.name]
            if kind == "tensor":
                raise CannotRebuild(f"argument {a.name!r} is a tensor; give its shape, not a value")
            specs.append(ArgSpec(a.name, a.kwarg_only, value=v))
            continue
        if kind == "tensor":
            st = _per_input(strides, i)
            cf = contiguous[i] if isinstance(contiguous, list) and i < len(contiguous) else (
                contiguous if isinstance(contiguous, bool) else None)
            spec, how = _tensor_spec(input_shapes[i], dtypes[i], st, cf)
            specs.append(ArgSpec(a.name, a.kwarg_only, tensor=spec, out=bool(getattr(a, "is_out", False))))
            layouts.append(how)
            continue
        recorded = concrete[i] if isinstance(concrete, list) and i < len(concrete) else None
        base, optional = _base_type(a)
        if recorded is not None and kind in ("scalar", "list"):
            if base == "ScalarType" and isinstance(recorded, int) and recorded in _SCALAR_TYPE_CODES:
                recorded = Code(f"torch.{_SCALAR_TYPE_CODES[recorded]}")
            elif recorded in ("inf", "-inf", "nan"):  # a non-finite float, as diagnose's report writes it
                recorded = Code(f"float({recorded!r})")
            specs.append(ArgSpec(a.name, a.kwarg_only, value=recorded))
            continue
        if kind == "scalar" and base == "ScalarType":
            # a dtype was passed but its value is not recorded: a default would change the op's meaning
            first_dtype = next((t.tensor.dtype for t in specs if t.tensor is not None), None)
            if first_dtype and op_name not in _CONVERSIONS:
                specs.append(ArgSpec(a.name, a.kwarg_only, value=Code(f"torch.{first_dtype}"), assumed=True))
                continue
            raise CannotRebuild(f"argument {a.name!r} (a dtype) was passed but its value is not recorded")
        if kind in ("none", "default"):
            if a.has_default_value():
                # "" for a non-Optional argument (a str such as gelu's `approximate`) hides a real value
                hidden = kind == "none" and not optional
                specs.append(ArgSpec(a.name, a.kwarg_only, value=a.default_value, assumed=hidden))
            elif optional:
                specs.append(ArgSpec(a.name, a.kwarg_only, value=None))
            else:
                raise CannotRebuild(f"argument {a.name!r} ({base}) has no recorded value")
            continue
        if a.has_default_value():
            specs.append(ArgSpec(a.name, a.kwarg_only, value=a.default_value, assumed=True))
            continue
        guess = _guess(a.name, base, kind, first_shape)
        if guess is None:
            raise CannotRebuild(f"argument {a.name!r} ({base}) has no recorded value and no safe guess")
        specs.append(ArgSpec(a.name, a.kwarg_only, value=guess, assumed=True))
    return specs, layouts


def _per_input(values, i):
    if isinstance(values, list) and i < len(values) and isinstance(values[i], list):
        return values[i]
    return None


def _guess(name: str, base: str, kind: str, first_shape: list[int]):
    if kind == "scalar":
        if name in _SCALAR_GUESSES:
            return _SCALAR_GUESSES[name]
        if base == "bool":
            return False
        if base in ("number", "Scalar", "float"):
            return 1.0 if base == "float" else 1
        return None
    if kind == "list" and name in _LIST_GUESSES:
        return _LIST_GUESSES[name](first_shape)
    return None


# --------------------------------------------------------------------------
# Running a case once: validation, FLOPs, bytes
# --------------------------------------------------------------------------

def namespace(case: Case) -> dict[str, Any]:
    """Execute the setup code once; the dict is the timer's globals."""
    import torch

    ns: dict[str, Any] = {"torch": torch}
    exec(compile(case.setup_code(), f"<setup {case.op}>", "exec"), ns)
    return ns


def _flatten_tensors(x) -> Iterable:
    import torch

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten_tensors(y)


def validate(case: Case) -> Case:
    """Run the call once; fill `flops` and `bytes`. Raises CannotRebuild if the op rejects the inputs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    try:
        ns = namespace(case)
    except Exception as e:  # noqa: BLE001 - any failure building inputs makes the row unusable
        raise CannotRebuild(f"building the inputs failed: {_first_line(e)}") from None
    code = compile(case.stmt(), f"<stmt {case.op}>", "eval")
    inputs = [ns[f"x{i}"] for i, read in enumerate(case.read) if read]
    in_bytes = sum(t.numel() * t.element_size() for t in inputs)
    try:
        with FlopCounterMode(display=False) as counter:
            out = eval(code, ns)
    except Exception as e:  # noqa: BLE001
        raise CannotRebuild(f"{case.op} rejected the rebuilt inputs: {_first_line(e)}") from None
    out_bytes = sum(t.numel() * t.element_size() for t in _flatten_tensors(out))
    packet = getattr(getattr(torch.ops, case.op.split("::")[0]), case.op.split("::")[1])
    case.flops = int(counter.get_total_flops()) if packet in flop_registry else None
    case.bytes = int(in_bytes + out_bytes)
    return case


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".strip()


# --------------------------------------------------------------------------
# Report rows -> cases
# --------------------------------------------------------------------------

def case_from_row(row: dict) -> Case:
    name = row.get("name")
    if (not isinstance(name, str) or not re.fullmatch(r"[a-z_][a-z0-9_]*::\w+(\.\w+)?", name)
            or name.split("::")[0] in ("autograd", "torch", "profiler")):
        raise CannotRebuild("not an ATen operator (autograd node or Python-level event)")
    shapes = row.get("input_shapes")
    if not shapes:
        raise CannotRebuild("no recorded input shapes")
    return build_case(
        name, shapes, row.get("dtypes") or [],
        strides=row.get("strides") or row.get("input_strides"), contiguous=row.get("contiguous"),
        concrete_inputs=row.get("concrete_inputs"),
        source=row.get("source"), self_pct=row.get("self_pct"), calls=row.get("calls"))


def skip_entry(row: dict, reason: str, threads: int | None = None) -> dict:
    return {"op": row.get("name") if "name" in row else row.get("op"),
            "input_shapes": row.get("input_shapes"), "dtypes": row.get("dtypes"),
            "source": row.get("source"), "self_pct": row.get("self_pct"),
            "threads": threads, "reason": reason}


def cases_from_report(report: dict, top: int, *, run_check: bool = True) -> tuple[list[Case], list[dict]]:
    """The top `top` rebuildable operators by self_pct, and the rows passed over on the way (with why)."""
    rows = report.get("operators")
    if not isinstance(rows, list):
        raise UsageError("the report has no 'operators' list (was the operators layer run?)")
    ordered = sorted((r for r in rows if isinstance(r, dict)),
                     key=lambda r: -(r.get("self_pct") or 0.0))
    cases: list[Case] = []
    skipped: list[dict] = []
    seen: set = set()
    for row in ordered:
        if len(cases) >= top:
            break
        try:
            case = case_from_row(row)
        except CannotRebuild as e:
            skipped.append(skip_entry(row, str(e)))
            continue
        if case.key in seen:
            continue
        if run_check:
            try:
                validate(case)
            except CannotRebuild as e:
                skipped.append(skip_entry(row, str(e)))
                continue
        seen.add(case.key)
        cases.append(case)
    return cases, skipped


# --------------------------------------------------------------------------
# Command-line specs
# --------------------------------------------------------------------------

def parse_shapes(text: str) -> list[list[int]]:
    """'[32,1024,64],[32,64,1024]' -> [[32, 1024, 64], [32, 64, 1024]]; '[]' is a scalar."""
    import json

    try:
        value = json.loads("[" + text.strip() + "]")
    except json.JSONDecodeError:
        raise UsageError(f"malformed --shapes {text!r}: expected e.g. \"[32,1024,64],[32,64,1024]\"") from None
    if (not value or not all(isinstance(s, list) for s in value)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for s in value for d in s)):
        raise UsageError(f"malformed --shapes {text!r}: expected lists of non-negative integers, "
                         "e.g. \"[32,1024,64],[32,64,1024]\"")
    return value


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_grid(items: list[str] | None) -> dict[str, list[int]]:
    """['M=64,256', 'K=1024'] -> {'M': [64, 256], 'K': [1024]} (order kept)."""
    out: dict[str, list[int]] = {}
    for item in items or []:
        name, sep, values = item.partition("=")
        name = name.strip()
        try:
            nums = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            nums = []
        if not sep or not _SYMBOL.fullmatch(name) or not nums or any(v < 0 for v in nums):
            raise UsageError(f"malformed --grid {item!r}: expected NAME=v1,v2,... e.g. M=64,256,1024")
        if name in out:
            raise UsageError(f"--grid {name} given twice")
        out[name] = nums
    return out


def expand_shapes(texts: list[str], grid: dict[str, list[int]] | None = None) -> list[str]:
    """Every --shapes text, with its symbols (e.g. "[M,K],[K,N]") replaced by each point of the --grid
    product (names in the order given, the last varying fastest); duplicates dropped, order kept."""
    import itertools

    grid = grid or {}
    used: set[str] = set()
    out: list[str] = []
    for text in texts:
        names = sorted(set(_SYMBOL.findall(text)))
        missing = [n for n in names if n not in grid]
        if missing:
            raise UsageError(f"--shapes {text!r} uses {', '.join(missing)}: give each a --grid NAME=v1,v2,...")
        used.update(names)
        mine = [n for n in grid if n in names]
        for point in itertools.product(*(grid[n] for n in mine)):
            values = dict(zip(mine, point))
            concrete = _SYMBOL.sub(lambda m: str(values[m.group(0)]), text)
            parse_shapes(concrete)
            canon = json_key(parse_shapes(concrete))[1:-1]
            if canon not in out:
                out.append(canon)
    unused = [n for n in grid if n not in used]
    if unused:
        raise UsageError(f"--grid {', '.join(unused)}: not used in any --shapes")
    return out


def spec_dtypes(shapes: list[list[int]], dtype: str | None, dtypes: str | None) -> list[str]:
    """Profiler-vocabulary dtypes for a command-line spec: [] is a Scalar unless --dtypes says otherwise."""
    if dtypes:
        items = [d.strip() for d in dtypes.split(",")]
        if len(items) != len(shapes):
            raise UsageError(f"--dtypes has {len(items)} entries for {len(shapes)} shapes")
        out = []
        for d in items:
            if d.lower() in ("scalar", "none", ""):
                out.append("Scalar" if d.lower() == "scalar" else "")
                continue
            t = torch_dtype_name(d)
            if t is None:
                raise UsageError(f"unknown dtype {d!r} (try float32, bfloat16, int64, bool)")
            out.append(profiler_dtype_name(t))
        return out
    t = torch_dtype_name(dtype or "float32")
    if t is None:
        raise UsageError(f"unknown dtype {dtype!r} (try float32, float64, bfloat16, int64, bool)")
    return ["Scalar" if s == [] else profiler_dtype_name(t) for s in shapes]


def parse_arg_overrides(items: list[str] | None) -> dict[str, Any]:
    import json

    out: dict[str, Any] = {}
    for item in items or []:
        name, eq, text = item.partition("=")
        if not eq or not name.strip().isidentifier():
            raise UsageError(f"malformed --arg {item!r}: expected NAME=VALUE, e.g. dim=0")
        try:
            out[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            low = text.strip().lower()
            if low in ("true", "false"):
                out[name.strip()] = low == "true"
            else:
                out[name.strip()] = text
    return out
