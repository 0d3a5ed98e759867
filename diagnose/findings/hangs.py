"""Rule on hung passes (report.hangs, diagnose/stall.py): hang.

A pass whose process tree used under 2% of one CPU for --stall-after
seconds is hung: one finding per place the main thread stood (the same line
in several passes or ranks is one finding), `high`: the script does not
finish. Located at the innermost line of the user's code in the main
thread's stack; the evidence holds where it waits (`stuck_in`, usually a
library frame), the passes and ranks, how long they sat idle, and every
thread's stack. A known deadlock gets its workaround: torch 2.13 with gloo
can deadlock in `dist.destroy_process_group()` right after the last backward
(the process group's destructor holds the GIL while a gloo thread frees the
last all-reduce's autograd context); a `dist.barrier()` first avoids it.
"""

from __future__ import annotations

from diagnose.report.model import Finding, Report, Stake

DESTROY = "destroy_process_group"
GLOO_WORKAROUND = ("A known torch 2.13 + gloo deadlock: the process group's destructor holds the GIL while a gloo "
                   "thread still frees the last all-reduce's autograd context. Call dist.barrier() before "
                   "dist.destroy_process_group() (examples/ddp_train.py does).")


def tool_induced(report: Report, passes: list[str]) -> bool:
    """Only instrumented passes hung, and the uninstrumented one finished: the layer's doing, not the script's."""
    run = report.run
    return ("baseline" not in passes and run.wall_s is not None and not run.exit_code and not run.timed_out
            and not run.error)


def hang(report: Report) -> list[Finding]:
    places: dict[tuple, list] = {}
    for h in report.hangs:
        places.setdefault((h.location, h.stuck_in), []).append(h)
    out = []
    for (location, stuck_in), group in places.items():
        first = group[0]
        main = next((t for t in first.threads if t.main), None)
        frames = main.frames if main else []
        passes = sorted({h.pass_name for h in group})
        ranks = sorted({h.rank for h in group if h.rank is not None})
        gloo = any(DESTROY in f for h in group for t in h.threads for f in t.frames) or (
            any(h.rank is not None for h in group) and (stuck_in or "").startswith("the interpreter's exit"))
        where = f" at {location}" if location else ""
        inside = f", waiting in {stuck_in}" if stuck_in else ""
        if tool_induced(report, passes):
            out.append(Finding(
                kind="hang", severity="medium", layer="hang", op=None, location=location,
                title=(f"The {', '.join(passes)} pass hung{where}{inside}, where the uninstrumented run of the same "
                       f"script finished: diagnose's instrumentation is the likely cause, not your code"),
                evidence={"stuck_in": stuck_in, "passes": passes, "ranks": ranks, "idle_s": first.idle_s,
                          "tool_induced": True, "main_thread": frames[:20]},
                suggestion=(f"Your script is fine here: please report this to diagnose's developers with the stacks "
                            f"above. Meanwhile the other layers are complete; run without this layer "
                            f"(--layers without {', '.join(passes)}) to skip it."),
                stake=Stake(pct=None, basis="diagnose's own failure: no time of your script's is at stake")))
            continue
        title = (f"The script hung{where}{inside}: no CPU use for {first.idle_s:.0f} s in the {', '.join(passes)} "
                 f"pass{'es' if len(passes) > 1 else ''}" + (f" (rank{'s' if len(ranks) > 1 else ''} "
                                                               f"{', '.join(map(str, ranks))})" if ranks else ""))
        suggestion = (GLOO_WORKAROUND if gloo else
                      "Something waits that never comes: a lock, a queue, a child process, a collective the other "
                      "ranks never call, input on stdin. The main thread's stack (evidence) shows where; the other "
                      "threads show who might hold what it waits for. A target that waits on purpose (a server, "
                      "input) runs with --stall-after 0.")
        out.append(Finding(
            kind="hang", severity="high", layer="hang", title=title, op=None, location=location,
            evidence={"stuck_in": stuck_in, "passes": passes, "ranks": ranks, "idle_s": first.idle_s,
                      "main_thread": frames[:20],
                      "other_threads": [{"thread": t.thread, "frames": t.frames[:8]}
                                        for t in first.threads if not t.main][:8],
                      "known_deadlock": "gloo destroy_process_group" if gloo else None},
            suggestion=suggestion, stake=Stake(pct=100.0, basis="the script does not finish"),
        ))
    return out
