"""The outermost module of a script and hooks on it, installed so that they never change what the script does.

Script mode finds the script's model as the first module called outside any
other module's forward (torch's global forward pre-hook), then hooks that
module alone (diagnose/steps.py's step clock, the what-if child). Two things
the models people bring break in that:

- torch's own set-up code calls modules before the script's loop does:
  `quantize_dynamic` runs each Linear weight through a MinMaxObserver module,
  `torch.jit.trace`, `torch.export` and `torch.fx` call the model to trace it.
  Such a call is not the script's step; `setup_call(frame)` tells it from a
  call the script (or a library it calls, such as a transformers pipeline)
  makes, by the file of the first frame below torch.nn's call machinery.
  The script's own calibration calls of a model prepared for static
  quantisation (`prepare`, then `prepared(x)`) are set-up too
  (`calibrating`): the converted model, called next, is the model.
- a module can refuse per-module hooks: a TorchScript module
  (`torch.jit.script` / `torch.jit.load`) raises "register_forward_pre_hook is
  not supported on ScriptModules". `hook_root` then counts that module's calls
  through torch's global forward hooks, filtered to it, and says so in a note
  (its submodules run inside TorchScript and never reach the hooks, so the
  cost is one identity check per module call made from Python). A module
  whose `__call__` is overridden without calling `nn.Module.__call__` reaches
  no hook at all: nothing is installed on it and it is never the outermost
  module; the first module called inside it is, and `bypassed_by` names the
  one around it for a note (diagnose.mark_step() marks the steps exactly).

Imports nothing of diagnose's: the ground floor.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

# torch's set-up machinery: a module called from these packages is being quantised, traced or exported
# (dynamo's own tracing is not here: the hooks skip calls while torch.compiler.is_compiling(), and a compiled
# module's call comes through torch/_dynamo/eval_frame.py)
_SETUP_PACKAGES = ("ao", "quantization", "jit", "export", "_export", "fx", "onnx", "_functorch/_aot_autograd")


def _torch_dir() -> str | None:
    torch = sys.modules.get("torch")
    origin = getattr(torch, "__file__", None)
    return os.path.dirname(os.path.realpath(origin)) if origin else None


def setup_call(frame) -> bool:
    """Whether the module call whose hook runs at `frame` (or deeper) comes from torch's set-up machinery."""
    root = _torch_dir()
    if root is None:
        return False
    # the call machinery between the caller and the hook: nn.Module's, and fx.GraphModule's wrapper around it
    machinery = (os.path.join(root, "nn", "modules", "module.py"), os.path.join(root, "utils", "hooks.py"),
                 os.path.join(root, "fx", "graph_module.py"))
    own = os.path.dirname(os.path.realpath(__file__)) + os.sep  # diagnose's hooks
    f = frame
    while f is not None:
        path = os.path.realpath(f.f_code.co_filename)
        if path not in machinery and not path.startswith(own):
            break
        f = f.f_back
    if f is None:
        return False
    path = os.path.realpath(f.f_code.co_filename)
    return any(path.startswith(os.path.join(root, p) + os.sep) for p in _SETUP_PACKAGES)


def calibrating(module, _seen: dict | None = None) -> bool:
    """Whether `module` is a model prepared for post-training quantisation and being calibrated: it holds
    observers (torch.ao.quantization's ObserverBase, inserted by `prepare`) and no fake-quantisation modules
    (a quantisation-aware training model holds FakeQuantize, and its calls are the training loop's)."""
    quantization = sys.modules.get("torch.ao.quantization")
    if quantization is None:
        return False
    observer, fake = quantization.ObserverBase, quantization.FakeQuantizeBase
    found = False
    for sub in module.modules():
        if isinstance(sub, fake):
            return False
        found = found or isinstance(sub, observer)
    return found


def _nested(frame) -> bool:
    """Whether the module call whose hook runs at `frame` happens inside another module's call (a submodule of a
    set-up call that was passed over: the first call the hooks see is then not the outermost one)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    call_impl = torch.nn.Module._call_impl.__code__
    f, own = frame, None
    while f is not None:
        if f.f_code is call_impl:
            if own is not None:
                return True
            own = f
        f = f.f_back
    return False


def set_up(module, frame) -> str | None:
    """Why a module called outside any forward is not the script's model, or None when it is: "set-up" when torch's
    set-up machinery calls it (`setup_call`) or it is being calibrated for quantisation (`calibrating`); "nested"
    when it runs inside such a call."""
    if _nested(frame):
        return "nested"
    return "set-up" if setup_call(frame) or calibrating(module) else None


def bypassed_by(module, frame) -> str | None:
    """The module whose forward is running around this call although no hook saw it enter: one whose class
    overrides `__call__` without nn.Module's (then `module`, the first call the hooks saw, is inside it); or None."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    base_call = torch.nn.Module.__call__
    f = frame
    while f is not None:
        owner = f.f_locals.get("self") if "self" in f.f_code.co_varnames[:1] else None
        if isinstance(owner, torch.nn.Module) and owner is not module and type(owner).__call__ is not base_call \
                and not isinstance(owner, torch.jit.ScriptModule):
            return f"{type(owner).__name__}.{f.f_code.co_name}"
        f = f.f_back
    return None


def kind_of(module) -> str:
    """How the module runs, for notes: "TorchScript module", or its class name."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(module, torch.jit.ScriptModule):
        return f"TorchScript module ({type(module).__name__})"
    return type(module).__name__


def hook_root(module, pre: Callable[[Any, tuple, dict], None],
              post: Callable[[Any, tuple, Any], None]) -> tuple[list[Any], str | None]:
    """Call `pre(module, args, kwargs)` before and `post(module, args, output)` after each call of `module`.

    Returns (handles to remove, a note or None). Per-module hooks where the module accepts them; where it
    refuses (a TorchScript module), torch's global forward hooks filtered to this module, with a note saying
    so (kwargs are then not seen: pre gets {})."""
    handles: list[Any] = []

    # plain functions, not bound methods: copy.deepcopy(model) (an EMA copy, quantisation's convert) copies a
    # module's hooks, and a bound method would drag its object (the step clock, its tensors) into the copy; a
    # function is shared, and the identity check keeps the copy's calls from counting as the model's
    def own_pre(m, args, kwargs):
        if m is module:
            pre(m, args, kwargs)

    def own_post(m, args, output):
        if m is module:
            post(m, args, output)

    try:
        handles.append(module.register_forward_pre_hook(own_pre, with_kwargs=True))
        handles.append(module.register_forward_hook(own_post))
        return handles, None
    except Exception as exc:  # noqa: BLE001 - a module that refuses hooks is still the script's model
        for h in handles:
            h.remove()
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    from torch.nn.modules import module as module_mod

    def global_pre(m, args):
        if m is module:
            pre(m, args, {})

    def global_post(m, args, output):
        if m is module:
            post(m, args, output)

    handles = [module_mod.register_module_forward_pre_hook(global_pre),
               module_mod.register_module_forward_hook(global_post)]
    return handles, (f"the outermost module, a {kind_of(module)}, refuses hooks of its own ({why}): its calls "
                     "are counted through torch's global module hooks instead")
