"""The step clock on the models people bring (issue 32), in this process with real torch: a TorchScript model
refuses hooks of its own and is counted through the global ones, with a note; torch's set-up calls and a model
being calibrated are not the model; a model deep-copied with diagnose's hooks on it copies cleanly and its copy's
calls are not steps."""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from diagnose.protocol import WindowSpec
from diagnose.steps import StepClock

WHOLE_RUN = WindowSpec(skip=0, steps=1 << 62, stop_after_window=False)


@pytest.fixture
def clock():
    c = StepClock(WHOLE_RUN)
    c.install(torch)
    yield c
    c.uninstall()


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)).eval()


def test_a_scripted_model_is_counted_through_the_global_hooks_with_a_note(clock):
    scripted = torch.jit.script(_mlp())
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(5):
            scripted(x)  # raised "register_forward_pre_hook is not supported on ScriptModules" before
    seen = clock.result()
    assert (seen.detector, seen.steps_seen, seen.batch_size) == ("forward", 5, 4)
    assert seen.detail == "RecursiveScriptModule forward"
    (note,) = seen.hook_notes
    assert "TorchScript module" in note and "not supported on ScriptModules" in note and "global" in note


def test_torch_set_up_calls_are_not_the_model(clock):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.ao.quantization.quantize_dynamic(_mlp(), {nn.Linear}, dtype=torch.qint8)  # observers run
    x = torch.randn(4, 16)
    with torch.inference_mode():
        for _ in range(3):
            model(x)
    seen = clock.result()
    assert (seen.detail, seen.steps_seen) == ("Sequential forward", 3)
    assert seen.set_up_calls == {"MinMaxObserver": 2}


def test_a_model_calibrated_for_static_quantisation_is_set_up_and_its_converted_copy_the_model(clock):
    from torch.ao.quantization import (
        DeQuantStub,
        QuantStub,
        convert,
        get_default_qconfig,
        prepare,
    )

    class Q(nn.Module):
        def __init__(self):
            super().__init__()
            self.quant, self.mlp, self.dequant = QuantStub(), _mlp(), DeQuantStub()

        def forward(self, x):
            return self.dequant(self.mlp(self.quant(x)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Q().eval()
        model.qconfig = get_default_qconfig("x86")
        prepared = prepare(model)
        x = torch.randn(4, 16)
        prepared(x)  # the script's own calibration call: before, the first module inside it became the "model"
        prepared(x)
        quantised = convert(prepared)  # deep-copies `prepared`
    for _ in range(4):
        quantised(x)
    seen = clock.result()
    assert (seen.detail, seen.steps_seen) == ("Q forward", 4)
    assert seen.set_up_calls["Q"] == 2


def test_a_hooked_model_deep_copies_and_its_copy_is_not_counted(clock):
    model = _mlp()
    x = torch.randn(4, 16, requires_grad=True)
    model(x * 2)  # the root, hooked; x * 2 is a non-leaf tensor the clock may keep
    clock.keep_inputs = True
    model(x * 2)
    ema = copy.deepcopy(model)  # raised "Only Tensors created explicitly by the user ..." when hooks were methods
    ema(x)
    model(x)
    assert clock.result().steps_seen == 3
