"""layers/operators/recorder.ModuleTracker: module paths by id(module), forgotten when the module is freed."""

from __future__ import annotations

import gc

import torch

from diagnose.layers.operators.recorder import ModuleTracker


def test_a_freed_modules_path_goes_with_it_so_its_id_names_no_later_module():
    # quantize_dynamic runs each weight through a MinMaxObserver (a root of its own, in set-up) and frees it; a
    # quantised Linear made after it at the same address was named "MinMaxObserver" in a fresh clone's run
    tracker = ModuleTracker()
    tracker.install()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        model(torch.randn(2, 4))  # the main root: its submodules by their names
        observer = torch.nn.Identity()
        observer(torch.randn(1))  # called outside any forward: a root of its own, named after its class
        key = id(observer)
        assert tracker.names[key] == tracker.roots[key] != "", tracker.roots
        del observer
        gc.collect()
        assert key not in tracker.names and key not in tracker.roots
        assert tracker.names[id(model)] == "" and tracker.names[id(model[0])] == "0"  # the living keep theirs
    finally:
        tracker.uninstall()
