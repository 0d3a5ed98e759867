"""The runner's record of the target's own thread settings (runner._record_thread_calls, _follow_thread_variables),
on tiny scripts run in a subprocess the way a pass runs them: torch imported first, then the script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from conftest import REPO

FOLLOW = """
import json, os, runpy, sys
import torch
from diagnose.runner import _follow_thread_variables, _record_thread_calls
from diagnose.usercode import UserCode

script = sys.argv[1]
usercode = UserCode(script, os.path.dirname(script))
calls = []
_follow_thread_variables(torch, usercode, calls)
_record_thread_calls(torch, usercode, calls)
runpy.run_path(script, run_name="__main__")
print(json.dumps({"threads": torch.get_num_threads(), "calls": [[c.call, c.threads, c.location] for c in calls]}))
"""


def _followed(tmp_path, source: str) -> dict:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    out = subprocess.run([sys.executable, "-c", FOLLOW, str(script)], capture_output=True, text=True, env=env, check=False,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_thread_variable_set_before_import_torch_is_applied_and_recorded(tmp_path):
    # torch is imported before the script (as the runner does): plain Python would size the pool from the
    # variable the script sets before its own `import torch`, and the runner reproduces that
    got = _followed(tmp_path, """
        import os
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch
        from torch.utils.data import DataLoader
        DataLoader(list(range(4)), num_workers=2)
        torch.set_num_interop_threads(1)
    """)
    assert got["threads"] == 1
    assert got["calls"] == [["OMP_NUM_THREADS", 1, "train.py:3"], ["DataLoader", 2, "train.py:6"],
                            ["set_num_interop_threads", 1, "train.py:7"]]


def test_a_thread_variable_set_after_import_torch_is_recorded_only(tmp_path):
    got = _followed(tmp_path, """
        import os
        import torch
        default = torch.get_num_threads()
        os.environ.setdefault("MKL_NUM_THREADS", "1")
        assert torch.get_num_threads() == default  # as under plain Python: torch read the variables at import
        os.environ["OMP_NUM_THREADS"] = "all"  # not a count: left alone
    """)
    assert got["calls"] == [["MKL_NUM_THREADS", 1, "train.py:5"]]


PYTHON_THREADS = """
import json, os, runpy, sys, threading
from diagnose.runner import _record_python_threads
from diagnose.usercode import UserCode

script = sys.argv[1]
started = []
_record_python_threads(UserCode(script, os.path.dirname(script)), started)
threading.Thread(target=lambda: None, name="diagnose-own").start()  # diagnose's own: not the target's
ns = runpy.run_path(script, run_name="__main__")
print(json.dumps({"started": [[t.pid == os.getpid(), t.name, t.target, t.defined_at, t.started_at]
                              for t in started], "tids": ns["tids"], "recorded": [t.tid for t in started]}))
"""


def test_the_threads_a_target_starts_are_recorded_with_their_tid_function_and_line(tmp_path):
    # /proc names a Python thread like its process, as it does OpenMP's workers: only the target can say which
    # threads are its own (the thread sampler's "python" pool). The kernel tids recorded are the threads' own.
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import threading
        from concurrent.futures import ThreadPoolExecutor

        def producer(tids):
            tids.append(threading.get_native_id())

        tids = []
        t = threading.Thread(target=producer, args=(tids,))
        t.start()
        t.join()
        with ThreadPoolExecutor(1) as pool:
            pool.submit(producer, tids).result()
    """))
    out = subprocess.run([sys.executable, "-c", PYTHON_THREADS, str(script)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, check=False, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["recorded"] == got["tids"]
    (mine, name, target, defined, started), pooled = got["started"]
    assert (mine, target, defined, started) == (True, "producer", "train.py:5", "train.py:10")
    assert name.startswith("Thread-") and "producer" in name
    # the executor's worker runs the executor's own function; the user's line is the submit that started it
    assert pooled[1].startswith("ThreadPoolExecutor-") and pooled[3] is None and pooled[4] == "train.py:13"
