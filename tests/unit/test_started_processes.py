"""Which fresh interpreters the operator pass names as not recorded (diagnose/children.py, watch_exec): the
target's own, never torch.compile's helpers; and how a forked child's SIGTERM handler is made to run in its main
thread (children.wake_main, forget_wake). Real subprocesses, started the way each caller starts them."""

from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import sys
import time
from pathlib import Path

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


WAKE = """
import os, signal, sys, threading, time
from diagnose.children import wake_main

def handler(signum, frame):
    print("handled in the main thread", flush=True)
    os._exit(0)

signal.signal(signal.SIGTERM, handler)
if sys.argv[1] == "wake":
    print("woken" if wake_main(signal.SIGTERM) else "not installed", flush=True)
other = threading.Thread(target=time.sleep, args=(60,), daemon=True)  # an OpenMP worker, say
other.start()
# the kernel hands a process-directed SIGTERM to whichever thread it picks: here, to the other one
threading.Timer(0.3, signal.pthread_kill, (other.ident, signal.SIGTERM)).start()
read_end, _ = os.pipe()
print("blocked", flush=True)
os.read(read_end, 1)  # the main thread blocked in a system call: a Pool worker waiting for its queue's lock
"""


@pytest.mark.parametrize("mode", ["plain", "wake"])
def test_a_signal_another_thread_takes_runs_its_handler_in_the_blocked_main_thread_only_when_woken(mode):
    # CPython runs a handler in the main thread between bytecodes: taken by another thread, the signal only trips a
    # flag, and a main thread blocked in read() never runs it (a fork Pool worker outlived Pool.terminate() so)
    proc = subprocess.Popen([sys.executable, "-c", WAKE, mode], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    if mode == "plain":  # blocked, the signal sent 0.3 s after the timer started: 2 s on, the handler never ran
        assert proc.stdout.readline() == "blocked\n"
        time.sleep(2.0)
        proc.kill()
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -9 and "handled" not in out, out
    else:
        out, _ = proc.communicate(timeout=60)
        assert out.splitlines() == ["woken", "blocked", "handled in the main thread"] and proc.returncode == 0, out


NESTED = """
import os, signal, sys, time
from diagnose import children

def handler(signum, frame):
    print(f"{'child' if os.getpid() != parent else 'parent'} handled", flush=True)
    os._exit(0)

parent = os.getpid()
signal.signal(signal.SIGTERM, handler)
children.wake_main(signal.SIGTERM)
pid = os.fork()
if pid == 0:  # a worker's own child (a nested pool): its signals are its own
    if sys.argv[1] == "forget":
        children.forget_wake()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
    os._exit(1)
os.waitpid(pid, 0)
time.sleep(1.0)  # the parent's watcher would have sent it the child's SIGTERM by now
print("parent alive", flush=True)
"""


@pytest.mark.parametrize("mode", ["inherit", "forget"])
def test_a_forked_childs_signals_do_not_wake_its_parents_main_thread_once_forgotten(mode):
    proc = subprocess.run([sys.executable, "-c", NESTED, mode], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    lines = proc.stdout.splitlines()
    # inherited, the pipe is the parent's: its thread reads the child's SIGTERM and ends the parent (the defect
    # runner._disown's forget_wake prevents), in either order with the child's own line; forgotten, the parent
    # lives on
    if mode == "forget":
        assert lines == ["child handled", "parent alive"], proc
    else:  # the two processes' lines can interleave on the one pipe
        assert "child handled" in proc.stdout and "parent handled" in proc.stdout, proc
        assert "parent alive" not in proc.stdout, proc
