"""What-if variants inside a pass (runner side): the change applied from outside, the outputs kept.

Every what-if pass, the baseline's too, seeds torch's, Python's and numpy's
random generators with SEED before the script runs, so that a script that
does not seed itself builds the same weights and inputs in every pass (what
makes the outputs comparable; it changes no timing).

The variant applies to the outermost nn.Module, the first module called
outside any other's forward (torch's global forward pre-hook, removed at
once, as the step clock does: diagnose/steps.py; a module torch's set-up code
calls is skipped, and a TorchScript module is hooked through the global hooks,
diagnose/modulehooks.py). At that first call it
wraps the module's `forward` (an instance attribute: the module's own hooks,
and diagnose's, stay eager):
- `inference_mode`: `torch.inference_mode()(forward)`;
- `bf16`: `torch.autocast("cpu", dtype=torch.bfloat16)(forward)`;
- `channels_last`: the module's parameters and buffers converted with
  `module.to(memory_format=torch.channels_last)`, and every 4-D tensor input
  made channels_last before the forward;
- `float32`: its float64 parameters and buffers made float32 in place (the
  optimizer keeps the same Parameter objects), float64 tensor inputs made
  float32 before each forward (the first call's through the pre-hook's
  returned arguments) and float32 outputs made float64 again, so the code
  around the model sees what it saw before; the forward runs with float32
  as the default dtype;
- `compile`: `torch.compile(forward)` (default mode), with inductor's
  `fallback_random` on: compiled code then draws its random numbers
  (dropout's masks) from eager's generator, so a training step with dropout
  gives the unchanged run's outputs (by default inductor draws its own, and
  BERT training's outputs were 0.18 apart: never comparable, never
  recommended). The timing is of that configuration; the layer's notes say so;
- `flush_denormal` is not a wrapper: `torch.set_flush_denormal(True)` before
  the script (a runner option the doctor's trial uses too).
`forward` is looked up before the pre-hooks run, so the first call runs
unchanged in every pass; the variant's first call is the module's call
CAPTURE_CALL: its wall time is kept (compile's one-off cost, imports and all,
is in it), and its output is saved (the first round's baseline) or compared
with that saved one (diagnose/whatif/outputs.py).

For compile, torch._dynamo's `graph_breaks` log artifact is switched on in
the pass and its records are kept (not printed): each graph break's location
in the code dynamo traced (`Graph break in user code at FILE:LINE`) and its
reason, including breaks that made dynamo skip a whole function (a break
inside a loop: the function then runs eagerly, and dynamo's graph_break
counter does not count it). No re-trace is needed, so nothing is added to
the measured time.
"""

from __future__ import annotations

import os
import random
import re
import sys
import time

from diagnose import protocol
from diagnose.modulehooks import hook_root, set_up
from diagnose.protocol import OutputDiff, WhatIfPass, WhatIfSpec
from diagnose.report.model import Compile, GraphBreakAt
from diagnose.whatif import outputs

SEED = 0
CAPTURE_CALL = 2
MAX_CAPTURED_VALUES = 16_000_000  # 64 MB of float32: larger outputs are compared on their first values


class WhatIfChild:
    def __init__(self, torch, spec: WhatIfSpec, pass_name: str):
        self.torch = torch
        self.variant: str | None = spec.variant  # None: the baseline side
        self.out_dir: str = spec.out_dir
        self.pass_name = pass_name
        self.root_name: str | None = None
        self.calls = 0
        self.first_call_s: float | None = None  # the first call with the variant: compile's one-off cost is in it
        self._t_first = 0.0
        self.apply_s = 0.0
        self.captured: str | None = None
        self.applied: str | None = None
        self.diff: OutputDiff | None = None  # against the reference pass's output (outputs.difference)
        self.breaks: list[str] = []  # torch._dynamo's graph-break log records (compile)
        self.converted = 0  # channels_last: tensors whose layout it changed (protocol.WhatIfPass.converted)
        self._handle = None
        self.hook_note: str | None = None  # the model refused hooks of its own (modulehooks.hook_root)
        self.written = False

    def install(self) -> None:
        torch = self.torch
        torch.manual_seed(SEED)
        random.seed(SEED)
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            numpy.random.seed(SEED)
        from torch.nn.modules import module as module_mod

        self._handle = module_mod.register_module_forward_pre_hook(self._on_first_forward)
        if self.variant == "compile":
            self._keep_graph_breaks()

    def _keep_graph_breaks(self) -> None:
        import logging

        import torch._dynamo  # noqa: F401 - registers the artifact loggers

        self.torch._logging.set_logs(graph_breaks=True)
        breaks = self.breaks

        class Keep(logging.Handler):
            def emit(self, record) -> None:
                if len(breaks) < 100:
                    breaks.append(record.getMessage())

        names = [n for n in logging.root.manager.loggerDict if n.endswith(".__graph_breaks")]
        for name in names or ["torch._dynamo.symbolic_convert.__graph_breaks"]:
            logger = logging.getLogger(name)
            logger.addHandler(Keep())
            logger.propagate = False  # kept for the report, not printed into the target's output

    def _on_first_forward(self, module, args):
        if self.torch.compiler.is_compiling() or set_up(module, sys._getframe(1)):
            return  # torch's set-up code calling a module (quantize_dynamic's observers, jit.trace) is not the model
        self._handle.remove()
        self.root_name = type(module).__name__
        _, self.hook_note = hook_root(module, self._on_pre, self._on_post)
        self._on_pre(module, args, {})
        t = time.perf_counter()
        try:
            self.applied = self._apply(module)
        except Exception as exc:  # noqa: BLE001 - the variant cannot apply to this model: the pass says so
            self.applied = f"failed: {type(exc).__name__}: {exc}"
        if self.hook_note:  # said where the variant's outcome is read (the what-if layer shows `applied`)
            self.applied = f"{self.applied} ({self.hook_note})"
        self.apply_s = time.perf_counter() - t  # torch.compile() imports inductor here
        if self.variant == "float32" and not self.applied.startswith("failed"):
            return _cast(self.torch, args, self.torch.float64, self.torch.float32)  # this first call's inputs
        return None

    def _apply(self, module) -> str:
        torch, v = self.torch, self.variant
        if v == "inference_mode":
            module.forward = torch.inference_mode()(module.forward)
        elif v == "bf16":
            module.forward = torch.autocast("cpu", dtype=torch.bfloat16)(module.forward)
        elif v == "channels_last":
            fmt = torch.channels_last
            self.converted += sum(1 for t in [*module.parameters(), *module.buffers()]
                                  if t.dim() == 4 and not t.is_contiguous(memory_format=fmt))
            module.to(memory_format=fmt)
            module.forward = self._channels_last_inputs(module.forward)
        elif v == "float32":
            for tensor in (*module.parameters(), *module.buffers()):
                if tensor.dtype is torch.float64:
                    tensor.data = tensor.data.float()
            module.forward = _float32_forward(torch, module.forward)
            module.register_forward_hook(lambda m, a, output: _cast(torch, output, torch.float32, torch.float64))
        elif v == "compile":
            import torch._inductor.config as inductor_config

            inductor_config.fallback_random = True  # eager's random numbers: outputs comparable (docstring)
            module.forward = torch.compile(module.forward)
        else:
            return "nothing to wrap" if v else "baseline"
        return f"{v} applied to {self.root_name}"

    def _channels_last_inputs(self, forward):
        torch = self.torch

        def convert(x):
            if isinstance(x, torch.Tensor) and x.dim() == 4:
                y = x.contiguous(memory_format=torch.channels_last)
                self.converted += y is not x  # already channels-last: the same tensor back, nothing changed
                return y
            return x

        def wrapped(*args, **kwargs):
            return forward(*[convert(a) for a in args], **{k: convert(v) for k, v in kwargs.items()})
        return wrapped

    def _on_pre(self, module, args, kwargs) -> None:
        self.calls += 1
        if self.calls == CAPTURE_CALL:
            self._t_first = time.perf_counter()

    def _on_post(self, module, args, output) -> None:
        if self.calls == CAPTURE_CALL and self.captured is None:
            self.first_call_s = time.perf_counter() - self._t_first
            self.captured = self._save(output)

    def _save(self, output) -> str:
        """Keep the output: the reference pass saves it; every other pass compares with the reference."""
        torch = self.torch
        tensors = [t for t in _tensors(torch, output) if t.is_floating_point()]
        if not tensors:
            return "unchecked: the output holds no floating-point tensor"
        kept, total = [], 0
        for t in tensors:
            flat = t.detach().reshape(-1)[: max(0, MAX_CAPTURED_VALUES - total)]
            kept.append(flat.to(torch.float32).clone())
            total += flat.numel()
        reference = os.path.join(self.out_dir, f"{outputs.REFERENCE}.pt")
        if self.pass_name == outputs.REFERENCE:
            torch.save(kept, reference)
        elif os.path.exists(reference):
            self.diff = outputs.difference(kept, torch.load(reference, weights_only=True))
        return f"{self.root_name} output at its call {CAPTURE_CALL}: {len(kept)} tensor(s), {total} values"

    def write(self, compile_info: Compile | None) -> None:
        """Once, at the first write after measuring (the window's end in script mode): what came later is not
        about the measured steps."""
        if self.written:
            return
        self.written = True
        protocol.write(WhatIfPass(
            variant=self.variant, root=self.root_name, applied=self.applied, calls=self.calls, captured=self.captured,
            diff=self.diff, first_call_s=self.first_call_s, apply_s=self.apply_s, compile=compile_info,
            graph_breaks=graph_breaks(self.breaks), converted=self.converted),
            os.path.join(self.out_dir, f"{self.pass_name}.json"))


def _float32_forward(torch, forward):
    def wrapped(*args, **kwargs):
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        try:
            return forward(*_cast(torch, args, torch.float64, torch.float32),
                           **_cast(torch, kwargs, torch.float64, torch.float32))
        finally:
            torch.set_default_dtype(default)
    return wrapped


def _cast(torch, x, source, target, depth: int = 0):
    """`x` with its `source`-dtype tensors (in tuples, lists and dicts) made `target`."""
    if isinstance(x, torch.Tensor):
        return x.to(target) if x.dtype is source else x
    if depth > 6:
        return x
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        return type(x)(_cast(torch, v, source, target, depth + 1) for v in x)
    if isinstance(x, dict):  # in place: transformers' ModelOutput is a dict that cannot be rebuilt from items
        for k in list(x):
            x[k] = _cast(torch, x[k], source, target, depth + 1)
    return x


def _tensors(torch, x, depth: int = 0):
    if depth > 6:
        return
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):  # transformers' ModelOutput is a dict
        for v in x.values():
            yield from _tensors(torch, v, depth + 1)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(torch, v, depth + 1)


BREAK_AT = re.compile(r"Graph break in user code at (.+):(\d+)")
PREFACES = ("Failed to handle graph break gracefully", "Graph break encountered", "*** While handling")


def graph_breaks(messages: list[str]) -> list[GraphBreakAt]:
    """torch._dynamo's graph-break log records, one per place (a path:LINE) and reason, with their count."""
    out: dict[tuple[str | None, str], GraphBreakAt] = {}
    for text in messages:
        at = BREAK_AT.search(text)
        reason_text = text.split("Graph Break Reason:", 1)[1] if "Graph Break Reason:" in text else text
        lines = [line.strip() for line in reason_text.splitlines() if line.strip()]
        reason = next((line for line in lines if not line.startswith(PREFACES)), lines[0] if lines else "?")
        for preface in PREFACES[:2]:
            reason = reason.split(preface)[0].strip(" .:") or reason
        source = f"{at.group(1)}:{at.group(2)}" if at else None
        key = (source, reason[:300])
        row = out.setdefault(key, GraphBreakAt(reason=reason[:300], source=source, count=0,
                                               skipped="Skipping the function" in text or "frame skipped" in text))
        row.count += 1
    return list(out.values())
