"""Hung passes' stack dumps (faulthandler's format) become Hang entries and hang findings."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from diagnose.findings.hangs import hang
from diagnose.hangs import hangs
from diagnose.report.model import Report, TargetInfo
from diagnose.stall import StallWatch, parse
from diagnose.usercode import UserCode

SITE = sysconfig.get_paths()["purelib"]  # real library roots: UserCode tells the user's files by them
REPO = str(Path(__file__).resolve().parents[2])
DUMP = f"""Thread 0x00007f3a1c7fe640 (most recent call first):
  File "{SITE}/torch/utils/data/_utils/pin_memory.py", line 54 in _pin_memory_loop

Current thread 0x00007f3a2e1a5740 (most recent call first):
  File "{SITE}/torch/distributed/distributed_c10d.py", line 2151 in destroy_process_group
  File "/work/train.py", line 41 in main
  File "/work/train.py", line 45 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "{REPO}/diagnose/runner.py", line 262 in _run_script
  File "{REPO}/diagnose/runner.py", line 408 in main
"""


def test_faulthandlers_dump_is_parsed_innermost_first():
    threads = parse(DUMP)
    assert [t["thread"] for t in threads] == ["0x00007f3a1c7fe640", "0x00007f3a2e1a5740"]
    assert threads[1]["current"] and threads[1]["frames"][0] == (
        f"{SITE}/torch/distributed/distributed_c10d.py", 2151, "destroy_process_group")


def test_a_gloo_exit_deadlock_gets_its_line_and_workaround(tmp_path):
    usercode = UserCode("/work/train.py", cwd="/work")
    found = hangs("operators", {"idle_s": 61.2, "stacks": [{"rank": 0, "text": DUMP}, {"rank": 1, "text": DUMP}]},
                  usercode)
    assert [h.rank for h in found] == [0, 1]
    h = found[0]
    assert h.location == "train.py:41" and h.stuck_in.endswith("distributed_c10d.py:2151 in destroy_process_group")
    main = next(t for t in h.threads if t.main)
    assert not any("runner.py" in f or "runpy" in f for f in main.frames)  # diagnose's own frames left out
    report = Report(target=TargetInfo(script="train.py"), hangs=found)
    (f,) = hang(report)
    assert f.kind == "hang" and f.severity == "high" and f.location == "train.py:41"
    assert f.evidence["ranks"] == [0, 1] and f.evidence["known_deadlock"] == "gloo destroy_process_group"
    assert "dist.barrier() before dist.destroy_process_group()" in f.suggestion
    assert "no CPU use for 61 s in the operators pass (ranks 0, 1)" in f.title


def test_a_hang_in_the_interpreters_exit_after_the_results(tmp_path):
    usercode = UserCode(str(tmp_path / "t.py"))
    (h,) = hangs("baseline", {"idle_s": 5.0, "stacks": [{"rank": 1, "text": "", "finished": True}]}, usercode)
    assert h.stuck_in.startswith("the interpreter's exit") and h.location is None
    (f,) = hang(Report(target=TargetInfo(script="t.py"), hangs=[h]))
    assert f.evidence["known_deadlock"] == "gloo destroy_process_group"


def test_the_stall_watch_needs_a_whole_idle_span():
    now, ticks = [0.0], [0]
    watch = StallWatch(1, stall_after_s=10, clock=lambda: now[0], tree_ticks=lambda pid: ticks[0])
    watch.ticks_per_s = 100
    for t in range(0, 10):  # busy: a CPU-second every second
        now[0], ticks[0] = float(t), t * 100
        assert not watch.stalled()
    for t in range(10, 20):  # idle from here: 0.1 s of CPU in 10 s is 1% of one CPU
        now[0], ticks[0] = float(t), 900 + (t - 10)
        assert not watch.stalled() or t >= 19
    now[0] = 20.0
    assert watch.stalled() and watch.idle_s() >= 10
