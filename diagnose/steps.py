"""Steps in script mode: how a pass finds the target's steps and measures a window of them (child side).

A *step* is one iteration of the script's main loop, found without changing
the script, by the first of these detectors that fires (a higher one takes
over from a lower one as long as the window has not begun):

1. `mark_step` - the script calls `diagnose.mark_step()` at the end of each
   step (a no-op when not run under diagnose);
2. `optimizer` - each `optimizer.step()` of any torch.optim optimizer ends a
   step (torch.optim's global step post-hook);
3. `forward` - each call of the outermost `nn.Module` ends a step. The
   outermost module is the first one called outside any other module's
   forward (found with torch's global forward pre-hook, removed at once so that
   nothing else runs through the hook path, and before any compiled module
   runs: torch.compile guards on the global hooks); from then on a hook on
   that module alone counts its calls. A module torch's own set-up code calls
   (quantize_dynamic's observers, jit.trace, export) or a model being
   calibrated for quantisation is not the outermost one, and a module that refuses hooks of its own (a TorchScript module) is
   counted through the global hooks instead, with a note
   (diagnose/modulehooks.py): the instrumentation never makes the script fail;
0. `loop` - when none of these fires, each iteration of the script's main
   loop (diagnose/loops.py: the first pass samples the main thread to find
   it; the later passes count that loop from the start).

Step i runs from the end of step i-1 to the end of step i; step 1 starts when
the outermost module is first called (or at the first mark_step/optimizer
boundary when no module was seen), and everything before it is *setup*.
Time spent inside a DataLoader iterator's `__next__` is the step's *data
wait*. The batch size is dim 0 of the outermost module's first tensor input.

The *window* is steps `skip + 1 .. skip + steps` (protocol.WindowSpec). The clock
calls `on_begin` when it begins (at the end of step `skip`) and `on_end` when
it ends; with `min_window_s` the window also lasts at least that long (the
uninstrumented pass uses it so that very short steps still give the thread
sampler enough time; the later passes then measure the same number of
steps; in a torchrun job rank 0 judges that time for every rank, see
distributed/window.py). With `stop_after_window` the clock raises `WindowComplete` once the
window is measured, and again at every later step: the target ends as if it
had finished (a `BaseException`, so the script's `except Exception` does not
catch it), which the runner treats as a normal end.
"""

from __future__ import annotations

import itertools
import operator
import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable

from diagnose.modulehooks import bypassed_by, hook_root, set_up
from diagnose.protocol import StepsSeen, WindowSpec

if TYPE_CHECKING:
    from diagnose.distributed.window import WindowAgreement

PRECEDENCE = {"loop": 0, "forward": 1, "optimizer": 2, "mark_step": 3}
# the first pass's window lasts at least this long when a layer samples it or re-runs it (session.Plan.long_window):
# the thread findings need 0.5 s of samples
MIN_WINDOW_S = 1.0
# a re-run that is compared only with other re-runs (Layer.compares_reruns: doctor trials, what-if, thread sweep)
# measures the window's first steps up to about RERUN_WINDOW_S, at least RERUN_MIN_STEPS (session.Window.capped).
# A trial's noise is its passes' spread, not the steps inside one pass: a Whisper transcription loop (1.8-2.6 s steps,
# 2-CPU AMD EPYC, 2026-12-03) ran 21-27 doctor passes of 45-67 s, each the 20-step window, 24 of a diagnosis's 27 min
RERUN_WINDOW_S = 10.0
RERUN_MIN_STEPS = 5
TOO_FINE_S = 1e-4  # a step shorter than this (100 µs) is probably not the script's loop iteration
KEPT_WARMUP_STEPS = 200  # per-step times kept for the skipped steps (the warm-up picture)
MAX_WINDOW_STEP_TIMES = 100_000  # per-step times kept for the window (a --full-run of a long job)
STAMP_BATCH = 4096  # the loop probe's stamped boundaries between two replays (bounds the stamps kept)
# the loop probe's clock reads: a window whose loop steps run under GROUP_BELOW_S (the first pass judges it on its
# first GROUP_AFTER window steps) times them in groups of LOOP_GROUP iterations, each step its group's mean (a
# clock read and a stored time every iteration cost ~1% of a 16 µs step, benchmarks/loop_steps.py); after the
# window the probe only counts (no step time is kept there)
GROUP_BELOW_S = 5e-5
LOOP_GROUP = 32
GROUP_AFTER = 16


class WindowComplete(BaseException):
    """Raised at a step boundary after the window: ends the target like a normal exit."""


_active: "StepClock | None" = None  # the clock of this process's pass, if it runs under diagnose


def mark_step() -> None:
    """End a step of the script's loop (explicit step detector); does nothing outside diagnose."""
    clock = _active
    if clock is not None:
        clock.boundary("mark_step", sys._getframe(1))


class StepClock:
    """Counts steps, times them and opens/closes the measured window (see the module docstring)."""

    def __init__(self, window: WindowSpec | None, on_begin: Callable[[], None] | None = None,
                 on_end: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter,
                 on_last_warmup: Callable[[], None] | None = None, agreement: "WindowAgreement | None" = None):
        self.window = window
        self.agreement = agreement  # a torchrun rank's: the ranks end a timed window at one step
        self.on_begin = on_begin
        self.on_end = on_end
        self.on_last_warmup = on_last_warmup  # the last skipped step begins (not called with --skip-steps 0)
        self.clock = clock
        self.t_workload = clock()
        self.detector: str | None = None
        self.detail: str | None = None
        self.count = 0  # steps of the current detector
        self.first_start: float | None = None  # start of step 1 (first outermost forward)
        self.last_end: float | None = None
        self.step_s: list[float] = []  # the window's steps timed alone
        # the window's steps timed in groups (loop detector): (where in step_s they go, the groups' mean times,
        # the group, how many steps kept), expanded by _window_times; and how many steps they hold
        self._runs: list[tuple[int, list[float], int, int]] = []
        self._run_steps = 0
        self.warmup_s: list[float] = []  # the skipped steps, at most KEPT_WARMUP_STEPS
        self.data_wait_s: list[float] = []  # per window step
        self.batch_sizes: dict[int, int] = {}
        self.switches: list[str] = []
        self.began_at: float | None = None
        self.ended_at: float | None = None
        self.window_steps = 0
        self.ignored: dict[str, int] = {}  # boundaries of lower detectors after a higher one took over
        self.data_sites: dict[str | None, float] = {}  # window: data wait per line that iterates a DataLoader
        self._data_wait = 0.0
        self._root = None
        self._lock = threading.RLock()
        self.off_main_thread = 0  # calls of the outermost module from threads other than the main one
        self.keep_inputs = False  # keep the outermost module's last tensor inputs (the doctor's subnormal scan)
        self.last_inputs: tuple = ()
        self._global_pre = None
        self._handles: list[Any] = []
        self.hook_notes: list[str] = []  # hooks that could not be installed, and what counts instead
        self.set_up_calls: dict[str, int] = {}  # modules torch's set-up code called before the first step
        self._stopping = False
        # memory (diagnose/layers/memory/): the uninstrumented pass reads the RSS at the window's start and at
        # each of its step boundaries; the operator pass marks each boundary in its profile (`on_step`)
        self.read_rss: Callable[[], int] | None = None
        self.rss_bytes: list[int] = []
        self.on_step: Callable[[], None] | None = None  # after each window step's boundary, before the window ends
        self.optimizers: dict[int, Any] = {}  # id -> weak reference of each optimizer whose step() ended a step
        # the loop detector (diagnose/loops.py): its loop, whether a step of it is open, when the finder first saw
        # it run, and (uninstrumented pass) its frame, whose tensors the doctor scans for subnormal values
        self.loop: str | None = None
        self._loop_open = False
        self._loop_seen_at: float | None = None
        self.loop_frame = None
        self._window_first: int | None = None
        # the loop probe's fast path: iteration starts that are plain boundaries (no callback, no decision) are
        # only stamped, and replayed through _boundary before anything reads the steps (`flush`); `_set_fast`
        # tells the probe how many more may be stamped
        self.stamps: list[float] = []
        # `_set_fast(n, group)`: the next n iterations take the fast path, each stamped (group 1), every group-th
        # stamped (group > 1) or none (group 0, counting only); it gives how many unstamped iterations it has
        # let through so far (None: it stamps each)
        self._set_fast: Callable[[int, int], Callable[[], int] | None] = lambda n, group: None
        self.loop_group = window.loop_group if window is not None else 1  # the window's group (StepsSeen)
        self._group_judged = False
        self._fast_group = 1  # the fast path's, while it runs
        self._fast_unstamped: Callable[[], int] | None = None
        self._fast_seen = 0  # its unstamped iterations replayed
        self._fast_groups = 0  # its stamps replayed (group > 1)

    # ------------------------------------------------------------ wiring

    def install(self, torch) -> None:
        """Hook the detectors into torch (and make diagnose.mark_step() live)."""
        global _active
        _active = self
        from torch.nn.modules import module as module_mod
        from torch.optim import optimizer as optimizer_mod

        self._handles.append(optimizer_mod.register_optimizer_step_post_hook(self._on_optimizer_step))
        self._global_pre = module_mod.register_module_forward_pre_hook(self._on_any_forward)
        self._handles.append(self._global_pre)
        self._patch_dataloader()
        if self.on_last_warmup and self.window is not None and self.window.skip == 1:
            self.on_last_warmup()  # the first step is the last skipped one

    def uninstall(self) -> None:
        global _active
        if _active is self:
            _active = None
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _patch_dataloader(self) -> None:
        try:
            from torch.utils.data import dataloader
        except ImportError:  # pragma: no cover - torch without data utilities
            return
        cls = dataloader._BaseDataLoaderIter  # noqa: SLF001 - every DataLoader iterator's __next__
        real = cls.__next__
        clock = self

        def timed_next(it):
            if clock.stamps:  # the loop's stamped boundaries first: this wait belongs to the step after them
                clock.flush()
            t = clock.clock()
            try:
                return real(it)
            finally:
                spent = clock.clock() - t
                clock._data_wait += spent
                if clock.began_at is not None and clock.ended_at is None:
                    site = _where(sys._getframe(1))
                    clock.data_sites[site] = clock.data_sites.get(site, 0.0) + spent

        cls.__next__ = timed_next
        self._handles.append(_Restore(cls, "__next__", real))

    # ------------------------------------------------------------ detectors

    def _on_any_forward(self, module, args) -> None:
        """Global pre-hook: the first module called outside any other's forward is the outermost one."""
        import torch

        if torch.compiler.is_compiling():
            return
        with self._lock:  # threads that call the model at once each see no root yet: hook it only once
            if self._root is None:
                self._take_root(module, args)

    def _take_root(self, module, args) -> None:
        why = set_up(module, sys._getframe(2))
        if why == "nested":
            return
        if why:
            # torch's set-up code calling a module (quantize_dynamic's observers, jit.trace, export), or a model
            # being calibrated for quantisation: not a step
            self.set_up_calls[type(module).__name__] = self.set_up_calls.get(type(module).__name__, 0) + 1
            return
        self._root = module
        # drop the global hook before this module's forward runs: nothing else pays for the hook path,
        # and a module compiled later is never traced with it in place
        self._global_pre.remove()
        handles, note = hook_root(module, self._on_root_pre, self._on_root_post)
        self._handles += handles
        if note:
            self.hook_notes.append(note)
        around = bypassed_by(module, sys._getframe(2))
        if around:
            self.hook_notes.append(
                f"the outermost module the hooks saw, {type(module).__name__}, runs inside {around}, whose class "
                "overrides __call__ without nn.Module's (no module hook sees it): the steps count "
                f"{type(module).__name__}'s calls; diagnose.mark_step() at the end of the loop body marks them exactly")
        self._on_root_pre(module, args, {})  # its own pre-hook did not exist yet for this call

    def _on_root_pre(self, module, args, kwargs) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.off_main_thread += 1  # a model served from worker threads: the operator pass records them all
        if self.first_start is None:
            self.first_start = self.clock()
            if self.window is not None and self.window.skip == 0 and self.began_at is None:
                self._begin(self.first_start)
        if self.keep_inputs:
            self.last_inputs = tuple(a for a in (*args, *kwargs.values()) if hasattr(a, "is_floating_point"))
        size = _batch_size(args, kwargs)
        if size is not None:
            self.batch_sizes[size] = self.batch_sizes.get(size, 0) + 1
        if self.detector is None:
            self.detail = f"{type(module).__name__} forward"

    def _on_root_post(self, module, args, output) -> None:
        self.boundary("forward", None, detail=f"{type(module).__name__} forward")

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if id(optimizer) not in self.optimizers:
            self.optimizers[id(optimizer)] = weakref.ref(optimizer)
        self.boundary("optimizer", None, detail=f"{type(optimizer).__name__}.step()")

    # ------------------------------------------------------------ the loop detector (diagnose/loops.py)

    def arm_loop(self, arm: Callable[[], None], seen_at: float | None = None) -> bool:
        """Let a loop's probes count the steps (`arm` swaps them in), unless another detector fired first. From
        the loop finder's thread, or at the start of a pass told which loop (WindowSpec.loop)."""
        with self._lock:
            if self.detector is not None:
                return False
            self._loop_seen_at = seen_at
            arm()
            return True

    def loop_probe(self, detail: str, key: str, begun: Callable[[], int],
                   stamp: Callable[[int, int], Callable[[], int] | None]) -> Callable[[], None]:
        """The armed loop's Python call (diagnose/loops.py), made when its C fast path has run out. `begun()`:
        the iterations begun before it was armed; `stamp(n, group)`: let the next n iterations take the fast path
        (how many, and which it stamps into `stamps`: _plain_ahead)."""
        now_ = self.clock
        first: list[int] = []

        def iteration() -> None:
            t = now_()
            if not first:
                first.append(begun())
            self.loop_iteration(t, first[0] + 1, detail, key, sys._getframe(1))

        self._set_fast = stamp
        return iteration

    def loop_iteration(self, now: float, number: int, detail: str, key: str, frame) -> None:
        """An iteration of the armed loop begins at `now` (`number`: its number from the loop's first, read when
        the loop opens): it ends the open step, or opens one (the first armed iteration, or the loop running
        again after its exit)."""
        with self._lock:
            self._flush()
            self._close_group(now)
            if self._loop_open:
                self._boundary("loop", None, detail, now)
            elif self.detector is None or self.detector == "loop":
                self._open_loop(now, number, detail, key, frame)
            else:  # a higher detector took over: its boundaries count
                self.ignored["loop"] = self.ignored.get("loop", 0) + 1
            self._plain_ahead()

    def _open_loop(self, now: float, number: int, detail: str, key: str, frame) -> None:
        self.detector, self.detail, self.loop = "loop", detail, key
        if self.keep_inputs and self.loop_frame is None:
            self.loop_frame = frame
        if self.first_start is None:  # armed late: the loop began about when the finder first saw it
            self.first_start = self._loop_seen_at if number > 1 and self._loop_seen_at else now
        self.count = max(self.count, number - 1)  # iterations begun before it was armed: steps not timed
        self.last_end = now  # the step begins here
        self._data_wait = 0.0
        self._loop_open = True
        w = self.window
        if self.began_at is None and w is not None and self.count >= w.skip:
            self._begin(now)

    def loop_exit(self) -> None:
        """The armed loop ended (its exit probe): the open step ends."""
        with self._lock:
            now = self.clock()
            self._flush()
            self._close_group(now)
            if self._loop_open and self.detector == "loop":
                self._loop_open = False
                self._fast(0, 1)
                self._boundary("loop", None, self.detail, now)

    def flush(self) -> None:
        """Replay the stamped loop boundaries (a DataLoader's wait is about to be timed)."""
        with self._lock:
            self._flush()

    def settle(self) -> None:
        """The pass ends: replay the stamped loop boundaries, and count the iterations of an unfinished group."""
        with self._lock:
            self._flush()
            self._close_group(None)
            self._fast(0, 1)

    def _flush(self, group: int | None = None) -> None:
        """_boundary for each stamped boundary, specialised to what makes one plain (_plain_ahead): the loop
        detector's, neither beginning nor ending the window, no callback, no RSS read, and no data wait but
        the first's (a DataLoader flushes before it waits). A stamp of a group closes `group` steps of its mean
        time; the count-only path (after the window) adds its iterations. `group`: the stamps' (default: the fast
        path's). ~0.1 µs a stamp; tests/unit/test_loops.py checks it gives what _boundary gives."""
        group = self._fast_group if group is None else group
        if group == 0:
            if self._fast_unstamped is not None:
                seen = self._fast_unstamped()
                self.count += seen - self._fast_seen
                self._fast_seen = seen
            return
        if not self.stamps:
            return
        stamps = self.stamps[:]
        self.stamps.clear()
        last, wait = self.last_end, self._data_wait
        self._data_wait = 0.0
        self.count += group * len(stamps)
        self.last_end = stamps[-1]
        starts = [last, *stamps[:-1]]
        if group > 1:  # inside the window only (_plain_ahead): kept as the groups' means, each step's at the end
            self._fast_groups += len(stamps)
            n = group * len(stamps)
            self.window_steps += n
            keep = min(n, max(0, MAX_WINDOW_STEP_TIMES - self._kept_steps()))
            if keep:
                means = list(map(operator.truediv, map(operator.sub, stamps, starts), itertools.repeat(group)))
                self._runs.append((len(self.step_s), means, group, keep))
                self._run_steps += keep
                self.data_wait_s += [wait] + [0.0] * (keep - 1)
            return
        times = list(map(operator.sub, stamps, starts))
        if self.began_at is not None and self.ended_at is None:
            self.window_steps += len(times)
            times = times[:max(0, MAX_WINDOW_STEP_TIMES - self._kept_steps())]
            self.step_s += times
            if times:
                self.data_wait_s += [wait] + [0.0] * (len(times) - 1)
        elif self.began_at is None:
            self.warmup_s += times[:max(0, KEPT_WARMUP_STEPS - len(self.warmup_s))]

    def _kept_steps(self) -> int:
        return len(self.step_s) + self._run_steps

    def _pace(self) -> float:
        """The longest of the last 8 window steps' times."""
        if self._runs and self._runs[-1][0] == len(self.step_s):
            return max(self._runs[-1][1][-8:])
        return max(self.step_s[-8:])

    def _window_times(self) -> list[float]:
        """The window's step times: the ones timed alone, and each grouped step its group's mean, in order."""
        out: list[float] = []
        at = 0
        for pos, means, group, keep in self._runs:
            out += self.step_s[at:pos]
            at = pos
            out += itertools.islice(itertools.chain.from_iterable(map(itertools.repeat, means, itertools.repeat(group))),
                                    keep)
        out += self.step_s[at:]
        return out

    def _close_group(self, now: float | None) -> None:
        """The grouped fast path stops between two stamps (the loop's exit, the pass's end): the iterations begun
        since the last stamp are plain boundaries of the mean time up to `now` (None: counted, not timed)."""
        if self._fast_group <= 1 or self._fast_unstamped is None:
            return
        begun = self._fast_unstamped() - (self._fast_group - 1) * self._fast_groups - self._fast_seen
        if begun <= 0:
            return
        self._fast_seen += begun
        last = self.last_end
        if now is not None and last is not None:
            self.stamps += [last + (now - last) * (i + 1) / (begun + 1) for i in range(begun)]
            self._flush(group=1)
        else:
            self.count += begun
            if self.began_at is not None and self.ended_at is None:
                self.window_steps += begun

    def _fast(self, n: int, group: int) -> None:
        """Give the probe's fast path its next n iterations (see `_set_fast`)."""
        self._fast_group = group
        self._fast_unstamped = self._set_fast(n, group)
        self._fast_seen = self._fast_groups = 0

    def _plain_ahead(self) -> None:
        """How many of the loop's next boundaries are plain (none begins or ends the window, calls back, reads
        the RSS or waits for data): the probe only stamps those, at most STAMP_BATCH at a time. While the window
        is stretched to min_window_s, half the steps that fit in the time left at the longest of the last
        steps' pace, so that the boundary ending the window is never stamped."""
        left = 0
        w = self.window
        if self.detector == "loop" and self._loop_open and not self._stopping and w is not None:
            if self.began_at is None:  # warm-up: plain up to the boundary before the last skipped step's
                left = w.skip - (2 if self.on_last_warmup else 1) - self.count
            elif self.ended_at is None:
                if self.on_step is None and self.read_rss is None:
                    left = w.steps - 1 - self.window_steps
                    if left <= 0 and self.agreement is None and self._kept_steps():
                        time_left = self.began_at + w.min_window_s - (self.last_end or self.began_at)
                        pace = self._pace()
                        left = int(time_left / pace / 2) if pace > 0 and time_left > 0 else 0
            else:
                left = STAMP_BATCH
        n, group = max(0, min(left, STAMP_BATCH)), 1
        if self.ended_at is not None:
            group = 0  # after the window: counted only
        elif self.began_at is not None:
            judge = not self._group_judged and w is not None and w.find_loop
            if judge and len(self.step_s) >= GROUP_AFTER:
                self._group_judged = True  # the first pass judges it once, on its first window steps
                if sorted(self.step_s[:GROUP_AFTER])[GROUP_AFTER // 2] < GROUP_BELOW_S:
                    self.loop_group = LOOP_GROUP
            elif (judge or self.loop_group > 1) and len(self.step_s) < GROUP_AFTER:  # each timed alone, every pass
                n = min(n, max(0, GROUP_AFTER - len(self.step_s)))
            if self.loop_group > 1 and self._kept_steps() >= GROUP_AFTER and n >= self.loop_group:
                group = self.loop_group
                n -= n % group
        self._fast(n, group)

    # ------------------------------------------------------------ boundaries

    def boundary(self, detector: str, frame, detail: str | None = None) -> None:
        """The end of a step as `detector` sees it (from any thread: steps of a model served by worker threads end
        in several at once)."""
        with self._lock:
            self._boundary(detector, frame, detail)

    def _boundary(self, detector: str, frame, detail: str | None, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        if self.detector != detector:
            if self.detector is not None and PRECEDENCE[detector] < PRECEDENCE[self.detector]:
                self.ignored[detector] = self.ignored.get(detector, 0) + 1
                return
            if self.detector is not None:
                if self.began_at is not None:  # the window runs on the first detector's steps: keep them
                    self.ignored[detector] = self.ignored.get(detector, 0) + 1
                    return
                self.switches.append(f"{self.detector} -> {detector} after {self.count} steps")
                self.warmup_s.clear()
                self.count = 0
            self.detector = detector
            if detector == "mark_step":
                where = _where(frame)
                self.detail = f"diagnose.mark_step() at {where}" if where else "diagnose.mark_step()"
            elif detail:
                self.detail = detail
        start = self.last_end if self.last_end is not None else (
            self.first_start if self.first_start is not None else self.t_workload)
        if self.first_start is None:
            self.first_start = start
        self.count += 1
        self.last_end = now
        duration = now - start
        wait, self._data_wait = self._data_wait, 0.0
        w = self.window
        if self.began_at is not None and self.ended_at is None:
            self.window_steps += 1
            if self._kept_steps() < MAX_WINDOW_STEP_TIMES:
                self.step_s.append(duration)
                self.data_wait_s.append(wait)
                if self.read_rss is not None:
                    self.rss_bytes.append(self.read_rss())
            if self.on_step is not None:
                self.on_step()
            if w is not None and self.window_steps >= w.steps and self._long_enough(now):
                self._end(now)
        elif self.began_at is None:
            if len(self.warmup_s) < KEPT_WARMUP_STEPS:
                self.warmup_s.append(duration)
            if w is not None and self.count >= w.skip:
                self._begin(now)
            elif w is not None and self.count == w.skip - 1 and self.on_last_warmup:
                self.on_last_warmup()
        if self._stopping:
            raise WindowComplete

    def _long_enough(self, now: float) -> bool:
        """The window, at its number of steps, has lasted min_window_s (rank 0 judges it for every rank)."""
        long_enough = now - self.began_at >= self.window.min_window_s
        if self.agreement is None or self.window.min_window_s <= 0:
            return long_enough
        return self.agreement.over(self.count, long_enough)

    def _begin(self, now: float) -> None:
        self.began_at = now
        self._window_first = self.count + 1
        self._data_wait = 0.0
        if self.on_begin:
            self.on_begin()
        if self.read_rss is not None:
            self.rss_bytes.append(self.read_rss())

    def _end(self, now: float) -> None:
        self.ended_at = now
        if self.on_end:
            self.on_end()
        self._stopping = bool(self.window and self.window.stop_after_window)

    # ------------------------------------------------------------ result

    def result(self) -> StepsSeen:
        self.settle()
        batch = max(self.batch_sizes, key=lambda k: self.batch_sizes[k]) if self.batch_sizes else None
        first = self._window_first if self.window and self.began_at is not None else None
        return StepsSeen(
            detector=self.detector, detail=self.detail, steps_seen=self.count,
            setup_s=(self.first_start - self.t_workload) if self.first_start is not None else None,
            warmup_s=list(self.warmup_s), step_s=self._window_times(), data_wait_s=list(self.data_wait_s),
            data_wait_at=max(self.data_sites, key=lambda k: self.data_sites[k]) if self.data_sites else None,
            batch_size=batch, window_began=self.began_at is not None, window_ended=self.ended_at is not None,
            window_first=first, window_steps=self.window_steps,
            window_wall_s=((self.ended_at or self.last_end or self.began_at) - self.began_at)
            if self.began_at is not None else None,
            stopped_target=self._stopping, switches=list(self.switches), ignored=dict(self.ignored),
            off_main_thread=self.off_main_thread, hook_notes=list(self.hook_notes),
            set_up_calls=dict(self.set_up_calls), rss_bytes=list(self.rss_bytes), loop=self.loop,
            loop_group=self.loop_group if self.detector == "loop" else 1)


class _Restore:
    """A patched attribute put back by `remove()`, like torch's hook handles."""

    def __init__(self, owner, name: str, value):
        self.owner, self.name, self.value = owner, name, value

    def remove(self) -> None:
        setattr(self.owner, self.name, self.value)


def _batch_size(args, kwargs) -> int | None:
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return int(value.shape[0]) if value.dim() else None
        if isinstance(value, dict):  # a tokenizer's BatchEncoding, a dict of inputs
            for v in value.values():
                if isinstance(v, torch.Tensor) and v.dim():
                    return int(v.shape[0])
    return None


def _where(frame) -> str | None:
    if frame is None:
        return None
    path = frame.f_code.co_filename
    try:
        rel = os.path.relpath(path)
        path = rel if not rel.startswith("..") else path
    except ValueError:
        pass
    return f"{path}:{frame.f_lineno}"


def notes(steps, seen: StepsSeen, iteration_s: list[float]) -> list[str]:
    """What a reader should know about how the steps were found and measured (report.steps.notes)."""
    out = []
    if steps.full_run:
        out.append("--full-run: every pass recorded the whole run")
    out += seen.hook_notes  # before any early return: they hold in every mode
    if seen.set_up_calls:
        called = ", ".join(f"{name} x{n}" for name, n in sorted(seen.set_up_calls.items()))
        out.append(f"modules called as set-up (by torch's quantisation, tracing or export code, or calibrated for "
                   f"quantisation: {called}) were not taken for the script's model")
    if steps.detector is None:
        if not steps.full_run:
            out.append("no step found (no optimizer.step(), no nn.Module call, no diagnose.mark_step(), and no loop "
                       "of the script running when it was sampled): every pass measured the whole run, and the "
                       "operator pass stops recording at its event budget")
        return out
    if steps.full_run:
        return out
    if steps.detector == "loop":
        out.append(f"no optimizer.step(), nn.Module call or diagnose.mark_step() ended a step: the steps are the "
                   f"iterations of {steps.detail}, the loop the script was running when its main thread was "
                   "sampled (diagnose.mark_step() at the end of the loop body marks them exactly)")
        if steps.window_first is not None and steps.window_first > steps.skip_steps + 1:
            out.append(f"the loop was found during its step {steps.window_first - 1}: the window begins at step "
                       f"{steps.window_first}, later than --skip-steps {steps.skip_steps} asks, in every pass")
        if seen.loop_group > 1:
            out.append(f"its steps take under {GROUP_BELOW_S * 1e6:.0f} µs: after the window's first {GROUP_AFTER}, "
                       f"each pass timed them in groups of {seen.loop_group} iterations, each step its group's mean "
                       "(a clock read every iteration would cost about 1% of such a step), so the per-step spread "
                       "is that of the groups' means")
    if steps.window_first is None:
        out.append(f"the script ran {steps.steps_seen} steps, not more than --skip-steps {steps.skip_steps}: "
                   "there was no window to measure, so every pass measured the whole run, warm-up included")
        return out
    n = steps.window_steps
    if n < steps.steps and not steps.ended_target:
        out.append(f"the script ended after step {steps.window_last}, inside the window: "
                   f"measured {n} steps, fewer than --steps {steps.steps}")
    elif n > steps.steps:
        out.append(f"the window has {n} steps, more than --steps {steps.steps}, so that it lasts at least "
                   f"{MIN_WINDOW_S:g} s (the layers that sample the window or re-run it as trials need it)")
    if steps.ended_target:
        out.append(f"each pass ended the script after step {steps.window_last}, once its window was measured "
                   "(--full-run runs it to the end)")
    times = sorted(iteration_s)
    if times and times[len(times) // 2] < TOO_FINE_S:
        out.append(f"a step ({steps.detail}) takes {times[len(times) // 2] * 1e6:.0f} µs: it may be finer than the "
                   "script's loop (a small module called many times per iteration?); call diagnose.mark_step() at "
                   "the end of the loop body to mark the steps yourself")
    for name, count in sorted(seen.ignored.items()):
        if PRECEDENCE[name] > PRECEDENCE[steps.detector]:
            out.append(f"{count} {name} boundaries came after the window had begun on {steps.detector} steps "
                       "and were not used")
    return out
