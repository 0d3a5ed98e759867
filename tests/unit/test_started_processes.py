"""Which fresh interpreters the operator pass names as not recorded (diagnose/children.py, watch_exec): the
target's own, never torch.compile's helpers. Real subprocesses, started the way each caller starts them."""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import sys

import pytest

from diagnose import children
from diagnose.protocol import PassResult

START = "import subprocess, sys\ndef start():\n    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"


def _starter(filename: str):
    """`start()` as if written in `filename`: its frame carries that file, as inductor's own code would."""
    ns: dict = {}
    exec(compile(START, filename, "exec"), ns)
    return ns["start"]


@pytest.fixture
def watched():
    saved = subprocess._fork_exec, _posixsubprocess.fork_exec  # noqa: SLF001
    result = PassResult(name="operators", layer="operators")
    children.watch_exec(result, os.getpid())
    try:
        yield result
    finally:
        subprocess._fork_exec, _posixsubprocess.fork_exec = saved  # noqa: SLF001


def test_the_targets_python_subprocess_is_named_and_torch_compiles_helpers_are_not(watched):
    _starter("/home/me/train.py")()
    assert [p.how for p in watched.not_recorded] == ["subprocess"]
    assert watched.not_recorded[0].command.startswith(sys.executable)
    # inductor checks the CPU's instruction sets and compiles in processes of its own: no model work in them
    site = os.path.dirname(os.path.dirname(subprocess.__file__))
    for where in (os.path.join(site, "site-packages", "torch", "_inductor", "cpu_vec_isa.py"),
                  os.path.join(site, "site-packages", "torch", "_dynamo", "eval_frame.py")):
        _starter(where)()
    assert len(watched.not_recorded) == 1, watched.not_recorded
