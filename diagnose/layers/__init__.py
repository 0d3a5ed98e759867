"""The layer registry: adding a layer is one module and one entry here.

The CLI's choices and the order of passes come from this mapping.
"""

from __future__ import annotations

from diagnose.layers.base import Layer
from diagnose.layers.counters import CountersLayer, VtuneLayer
from diagnose.layers.doctor import DoctorLayer
from diagnose.layers.efficiency import EfficiencyLayer
from diagnose.layers.microbench import MicrobenchLayer
from diagnose.layers.operators import OperatorsLayer
from diagnose.layers.python import PythonLayer
from diagnose.layers.repeat import RepeatLayer
from diagnose.layers.sample import SampleLayer
from diagnose.layers.threads import ThreadsLayer
from diagnose.layers.threads.sweep import SweepLayer
from diagnose.layers.whatif import WhatIfLayer

LAYERS: dict[str, Layer] = {
    layer.name: layer
    for layer in (
        OperatorsLayer(),
        PythonLayer(),
        ThreadsLayer(),
        MicrobenchLayer(),
        EfficiencyLayer(),
        CountersLayer(),
        DoctorLayer(),
    )
}


# Layers that run only when asked for by their own option, never by default.
OPT_IN: dict[str, Layer] = {"vtune": VtuneLayer(), "what_if": WhatIfLayer(), "sweep": SweepLayer(),
                           "repeat": RepeatLayer(), "sample": SampleLayer()}


def get(name: str) -> Layer:
    return LAYERS[name] if name in LAYERS else OPT_IN[name]
