"""Which what-if variants apply to a report, why, and the code change each one stands for.

`--what-if auto` runs the variants whose condition holds; a list runs the
variants named whatever the conditions say, except where the change would
break the run or change nothing (IMPOSSIBLE: inference_mode when a backward
runs, channels_last without a 4-D convolution input, compile when the script
compiles already, any model change without a model). Conditions:
- inference_mode: the operator pass saw autograd record a graph in the
  window and no backward ran there (report.autograd), no optimizer steps;
- channels_last: a 2-D convolution or pooling operator ran on a 4-D input
  laid out NCHW (contiguous strides, the operator rows' first call);
- bf16: the CPU has native bf16 instructions (avx512_bf16 or amx_bf16) and
  fp32 operators take the time; without them autocast emulates bf16 through
  fp32 and is measured only when asked for;
- float32: float64 operators take >= 10% of operator time (the dtype
  finding's condition, findings/dtypes.py);
- compile: a module ran and the script does not compile already
  (report.compile);
- flush_denormal: subnormal values were found (the doctor's denormals check
  warned).
Every variant but flush_denormal needs an nn.Module: it is applied to the
outermost one (diagnose/whatif/child.py).

After the rounds, `no_effect` says when a variant that ran provably changed
nothing (its trial is then "no gain" before any statistic, doctor/trials.py):
- compile: torch._dynamo compiled no graph in any of its runs (every frame
  skipped or run eagerly, e.g. after a graph break inside a loop);
- channels_last: it changed the layout of no tensor (no 4-D parameter or
  buffer, no 4-D input reached the forward, or all were channels-last);
- inference_mode: autograd recorded nothing in the operator pass's window
  (the script runs under no_grad or inference_mode already);
- flush_denormal: the doctor's scans saw no subnormal value.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.doctor import trials
from diagnose.doctor.environment import LOW_PRECISION
from diagnose.findings import dtypes
from diagnose.machine import read_cpu_flags
from diagnose.protocol import WhatIfPass
from diagnose.report.model import NoEffect, Report, WhatIfSkipped

ORDER = ("inference_mode", "channels_last", "bf16", "float32", "compile", "flush_denormal")
CONV_OPS = ("aten::conv2d", "aten::convolution", "aten::_convolution", "aten::mkldnn_convolution",
            "aten::max_pool2d", "aten::max_pool2d_with_indices", "aten::avg_pool2d", "aten::adaptive_avg_pool2d",
            "aten::_adaptive_avg_pool2d")
# outputs must agree within this share of the baseline output's largest magnitude (max |a - b| / max |b|):
# fp32 variants only reorder arithmetic (compile's fused kernels, channels_last's blocked convolutions, flushed
# subnormals); bf16 keeps 8 bits of mantissa (a relative step of 2^-8 = 0.4% per rounding), so its tolerance
# allows a few percent of accumulated rounding and its actual difference is reported beside it; float32 against
# float64 keeps 24 bits (2^-24 = 6e-8 a rounding): it is judged as the fp32 variants are, reordered arithmetic
TOLERANCE = {"inference_mode": 1e-6, "channels_last": 1e-3, "compile": 1e-3, "flush_denormal": 1e-3, "bf16": 5e-2,
             "float32": 1e-3}


# why-nots that a request cannot override: the change would break the run, or there is nothing to change
IMPOSSIBLE = ("a backward runs", "no 2-D convolution", "your script compiles already", "no nn.Module ran",
              "no float64 operator ran")


@dataclass(frozen=True)
class Choice:
    name: str
    why: str
    change: str  # the code change it stands for


def change_text(name: str, root: str | None, line: str | None, report: Report | None = None) -> str:
    model = f"your {root}" if root else "your model"
    if name == "float32":
        where = "; ".join(dtypes.fix(o) for o in (dtypes.origins(report) if report else [])[:3] if o.source)
        return f"run {model} in float32" + (f": {where}" if where else
                                            " (`model.float()` and float32 inputs instead of float64)")
    at = f" at {line}" if line else ""
    return {
        "inference_mode": (f"wrap the call of {model}{at} (or the whole inference loop) in "
                           "`with torch.inference_mode():`"),
        "channels_last": (f"`model = model.to(memory_format=torch.channels_last)` once, and "
                          f"`x = x.contiguous(memory_format=torch.channels_last)` for each 4-D input of {model}"),
        "bf16": f"run {model}{at} under `with torch.autocast('cpu', dtype=torch.bfloat16):`",
        "compile": f"`model = torch.compile(model)` (or `model.compile()`) once before the loop that calls {model}{at}",
        "flush_denormal": "`torch.set_flush_denormal(True)` once, before the model runs",
    }[name]


def _bf16_flags(cpuinfo: str) -> list[str]:
    flags = read_cpu_flags(cpuinfo)
    return [f for f in LOW_PRECISION["BFloat16"][1] if f in flags]


def _nchw_conv(report: Report) -> str | None:
    for row in report.operators:
        if row.name not in CONV_OPS or not row.input_shapes or len(row.input_shapes[0] or []) != 4:
            continue
        if row.contiguous and row.contiguous[0] is False:
            continue  # already another layout (channels_last inputs are not contiguous in NCHW order)
        return f"{row.name} on a 4-D NCHW input {row.input_shapes[0]} ({row.self_pct:.0f}% of operator time)"
    return None


def conditions(report: Report, cpuinfo: str = "/proc/cpuinfo") -> dict[str, tuple[bool, str]]:
    """Per variant: (applies, why or why not)."""
    a = report.autograd
    training = report.steps is not None and report.steps.detector == "optimizer"
    out: dict[str, tuple[bool, str]] = {}
    if a is None:
        out["inference_mode"] = (False, "the operator pass did not record autograd (its layer did not run)")
    elif a.backward_ops or training:
        out["inference_mode"] = (False, "a backward runs in your steps: inference_mode would break training")
    elif not a.recording_calls:
        out["inference_mode"] = (False, "autograd records nothing in your steps already (no_grad/inference_mode)")
    else:
        out["inference_mode"] = (True, f"autograd records a graph in {a.recording_calls} of {a.calls} torch calls "
                                       "and no backward runs")
    conv = _nchw_conv(report)
    out["channels_last"] = (True, conv) if conv else (False, "no 2-D convolution or pooling on an NCHW input")
    have = _bf16_flags(cpuinfo)
    if have:
        out["bf16"] = (True, f"this CPU computes bf16 natively ({', '.join(have)})")
    else:
        out["bf16"] = (False, "this CPU has no native bf16 (neither avx512_bf16 nor amx_bf16): autocast would "
                              "emulate it through fp32 (`--what-if bf16` measures it anyway)")
    pct, severity, _ = dtypes.graded(report)
    if severity is not None:  # the dtype finding's condition, on the share's interval
        out["float32"] = (True, f"float64 operators take {pct:.0f}% of operator time")
    elif pct > 0:
        out["float32"] = (False, f"float64 operators take {pct:.1f}% of operator time, under {dtypes.MIN_PCT:g}% "
                                 "within this run's noise")
    else:
        out["float32"] = (False, "no float64 operator ran")
    if report.compile is not None:
        out["compile"] = (False, "your script compiles already (torch.compile ran in the uninstrumented pass)")
    else:
        out["compile"] = (True, "your model runs eagerly")
    denormals = next((c for c in (report.doctor.checks if report.doctor else []) if c.name == "denormals"), None)
    if denormals is not None and denormals.status == "warn":
        out["flush_denormal"] = (True, denormals.summary.rstrip("."))
    else:
        out["flush_denormal"] = (False, "no subnormal values were found in your weights or inputs")
    if not _has_module(report):
        for name in ORDER[:-1]:
            out[name] = (False, "no nn.Module ran: there is no model to apply it to")
    return out


def _has_module(report: Report) -> bool:
    if report.modules is not None and report.modules.root_class:
        return True
    return report.steps is not None and report.steps.detector == "forward"


def choose(report: Report, requested: list[str], cpuinfo: str = "/proc/cpuinfo"
           ) -> tuple[list[Choice], list[WhatIfSkipped]]:
    """The variants to run, in a fixed order, and those considered but not run (with why)."""
    cond = conditions(report, cpuinfo)
    auto = "auto" in requested
    root = report.modules.root_class if report.modules else None
    line = report.autograd.lines[0].source if report.autograd and report.autograd.lines else None
    chosen: list[Choice] = []
    skipped: list[WhatIfSkipped] = []
    for name in ORDER:
        applies, why = cond[name]
        asked = name in requested
        hard_no = not applies and why.startswith(IMPOSSIBLE)
        if (applies and (auto or asked)) or (asked and not hard_no):
            chosen.append(Choice(name, why if applies else f"asked for (--what-if); {why}",
                                 change_text(name, root, line, report)))
        elif auto or asked:
            skipped.append(WhatIfSkipped(name, why))
    return chosen, skipped


def no_effect(name: str, report: Report, passes: list[WhatIfPass | None]) -> NoEffect | None:
    """Why variant `name` provably changed nothing in its runs (`passes`: what each of its passes wrote, round by
    round; None where a pass wrote nothing), or None (module docstring)."""
    done = [p for p in passes if p is not None]
    if name == "compile" and done and all(p.compile is not None and p.compile.error is None and not p.compile.graphs
                                          for p in done):
        gave_up = {(b.source, b.reason) for p in done for b in p.graph_breaks if b.skipped}
        return NoEffect("no compiled graph", f"torch._dynamo compiled 0 graphs in each of the {len(done)} compile "
                        "runs" + (", having given up on the whole function at a graph break inside a loop" if gave_up
                                  else "") + ": the model ran eagerly")
    if name == "channels_last" and done and all(p.converted == 0 and (p.applied or "").startswith(name)
                                                for p in done):
        return NoEffect("no tensor converted", f"in each of the {len(done)} channels_last runs no tensor changed "
                        "layout: the model has no 4-D parameter or buffer, and no 4-D input reached its forward "
                        "(or all were channels-last already)")
    a = report.autograd
    if name == "inference_mode" and a is not None and a.calls and not a.recording_calls:
        return NoEffect("autograd recorded nothing", f"0 of the {a.calls} torch calls in the operator pass's window "
                        f"recorded an autograd graph ({a.grad_mode_off_calls} ran under no_grad or inference_mode)")
    if name == "flush_denormal" and report.doctor is not None:
        return trials.no_effect("denormals", report.doctor.checks)
    return None
