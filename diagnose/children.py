"""Processes the target starts, seen from inside a pass's runner (diagnose/runner.py).

- `ChildPass`: in an operator pass, a process the target forks (a fork Pool's
  or a ProcessPoolExecutor's worker, a DataLoader worker, `os.fork()`) records
  itself with a profile of its own from the fork to its end, and writes a
  protocol.ChildResult into `children/<pid>/` of the pass's workdir once,
  atomically, when it ends: at os._exit (how multiprocessing ends its
  children), at SIGTERM where the target left the default action or torch's
  DataLoader worker handler (Pool.terminate(), daemonic children at exit), or
  when its interpreter exits. The parent merges the files
  (layers/operators/processes.py). `role()` names what the child is.
- `watch_exec`: the Python processes the target starts from a fresh
  interpreter (multiprocessing's spawn and forkserver, subprocess), which no
  pass records, noted in the pass's result so that the report says so. Not
  the ones torch.compile starts for itself (`COMPILE_HELPERS`: inductor's
  instruction-set checks, `python -c "...cdll.LoadLibrary(...)"`, and its
  compile workers): they run no model work, so nothing of the model is
  missing, and there is nothing for the user to change.
- `end_children`: what multiprocessing does at the interpreter's exit, for a
  pass forked from the fork server, which leaves by os._exit.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from diagnose import protocol
from diagnose.protocol import PassResult, PassSpec
from diagnose.report.model import StartedProcess


class ChildPass:
    """An operator pass's recording of a process the target forked, from the fork to the child's end (the
    parent's window does not reach it). It writes protocol.ChildResult into children/<pid>/ once, atomically;
    the parent merges it (layers/operators/processes.py)."""

    def __init__(self, spec: PassSpec, recorder, real_os_exit, sigterm):
        self.spec, self.recorder, self.real_os_exit = spec, recorder, real_os_exit
        self.t0 = time.perf_counter()
        self.done = False
        recorder.restart_in_child()

        def exit_hook(code):
            self.end("os._exit")
            real_os_exit(code)

        os._exit = exit_hook
        self.sigterm_exit: int | None = None  # SIGTERM ends the child with os._exit(this); None: by the signal
        if sigterm == signal.SIG_DFL:  # the default action, after the recording is written
            self._on_sigterm()
        handling = sys.modules.get("torch.utils.data._utils.signal_handling")
        if handling is not None:
            real = handling._set_worker_signal_handlers  # noqa: SLF001

            def set_worker_signal_handlers(*args, **kwargs):
                # a DataLoader worker: torch's SIGTERM handler (C) ends it with _exit(0) when its parent asks, as
                # at exit with persistent workers; the same here, once the recording is written
                real(*args, **kwargs)
                self.sigterm_exit = 0
                self._on_sigterm()

            handling._set_worker_signal_handlers = set_worker_signal_handlers  # noqa: SLF001

    def _on_sigterm(self) -> None:
        """SIGTERM runs `_terminated`, in the main thread (the profile is stopped where it was started), whichever
        thread the kernel hands the signal to (`wake_main`)."""
        signal.signal(signal.SIGTERM, self._terminated)
        if _WAKE is None:  # not yet woken here (wake_main replaces a pipe it finds)
            wake_main(signal.SIGTERM)

    def _terminated(self, signum, _frame) -> None:
        if self.done:  # arrived as the child was writing on its way out (os._exit): that write ends it
            return
        self.end("SIGTERM")
        if self.sigterm_exit is not None:
            self.real_os_exit(self.sigterm_exit)
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
        os.kill(os.getpid(), signum)

    def end(self, how: str) -> None:
        if self.done:
            return
        self.done = True
        # no SIGTERM while the recording is written (Pool.terminate() right after the worker's own exit): the
        # default action would end the process half-way
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        pid = os.getpid()
        role_, name = role()
        child = protocol.ChildResult(pid=pid, role=role_, name=name, ended=how,
                                     wall_s=time.perf_counter() - self.t0)
        workdir = protocol.child_dir(self.spec.workdir, pid)
        try:
            os.makedirs(workdir, exist_ok=True)
            self.recorder.stop()
            child.raw = self.recorder.collect(workdir)
        except Exception as exc:  # noqa: BLE001 - reported as this child's failure
            child.raw_error = f"{type(exc).__name__}: {exc}"
        try:
            protocol.write(child, os.path.join(workdir, protocol.RESULT_FILE))
        except OSError:
            pass


_WAKE: tuple[int, int] | None = None  # wake_main's pipe in this process (read, write); a fork inherits it


def forget_wake() -> None:
    """In a process forked from one that ran wake_main: that pipe is its parent's, whose thread would read this
    process's signals as its own (a nested pool's SIGTERM ending the worker above it), so this process's wakeup fd
    is reset and the pipe closed here. Nothing where wake_main never ran."""
    global _WAKE
    if _WAKE is None:
        return
    read_fd, write_fd = _WAKE
    _WAKE = None
    try:
        current = signal.set_wakeup_fd(-1)
        if current not in (-1, write_fd):  # set since by the target: its own
            signal.set_wakeup_fd(current)
    except ValueError:  # not the main thread
        pass
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass


def wake_main(signum: int) -> bool:
    """Make a Python handler of `signum` run however the process is blocked. Python runs a signal's handler in the
    main thread, between bytecodes: a process-directed signal the kernel hands to another thread (an OpenMP
    worker's) only trips a flag there, and a main thread blocked in a system call never runs the handler. A fork
    Pool's worker, idle in sem_wait on its task queue's lock, outlived Pool.terminate() that way until the pass
    stalled (60 s, in 2 of 3 clean-clone runs of the suite and 5 of about 46 runs of
    tests/data/processes/fork_pool.py under load, none of 20 quiet ones; the worker's two threads, SIGTERM caught and none pending, its main thread in sem_wait). A daemon
    thread reads the signal module's wakeup fd, on which the handler's C part writes the signal's number in
    whatever thread it runs, and sends the signal once more to the main thread itself, which interrupts its call.
    Not where the target set a wakeup fd of its own (asyncio): False, nothing changed. Call from the main thread."""
    import threading  # noqa: PLC0415 - only in a forked child, once

    global _WAKE
    forget_wake()
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        previous = None
    if previous != -1:  # the target's own wakeup fd (or none could be set): left alone
        if previous is not None:
            signal.set_wakeup_fd(previous)
        os.close(read_fd)
        os.close(write_fd)
        return False
    main = threading.get_ident()
    _WAKE = (read_fd, write_fd)

    def watch() -> None:
        while True:
            try:
                got = os.read(read_fd, 64)
            except OSError:
                return
            if not got:
                return
            if signum in got:  # once: the main thread's handler ends the process
                signal.pthread_kill(main, signum)
                return

    threading.Thread(target=watch, name="diagnose-wake-main", daemon=True).start()
    return True


def role() -> tuple[str, str | None]:
    """This forked process's role (protocol.POOL_WORKER, ...) and multiprocessing's name for it."""
    worker = sys.modules.get("torch.utils.data._utils.worker")
    mp = sys.modules.get("multiprocessing")
    process = mp.current_process() if mp is not None and mp.parent_process() is not None else None
    name = process.name if process is not None else None
    if worker is not None and getattr(worker, "_worker_info", None) is not None:
        return protocol.DATALOADER_WORKER, name
    if process is None:
        return protocol.FORKED_CHILD, None
    target = getattr(process, "_target", None)
    where = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    if where in ("multiprocessing.pool.worker", "concurrent.futures.process._process_worker"):
        return protocol.POOL_WORKER, name
    return protocol.PROCESS, name


def end_children() -> None:
    """What multiprocessing does at the interpreter's exit, which a pass forked from the fork server skips (it
    leaves by os._exit): run its finalizers (a Pool's semaphores, else the resource tracker warns of leaked ones
    into the user's output), terminate its daemonic children (DataLoader workers, Pool workers), join them all.
    The operator pass's children then write their recordings before the pass ends (ChildPass)."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        try:
            util._exit_function()  # noqa: SLF001
        except Exception:  # noqa: BLE001 - the pass's result is written already
            pass


# code whose processes are torch.compile's own helpers, by file: a process started with one of these frames on the
# stack (inductor's instruction-set checks and compile workers, dynamo's) runs no model work
COMPILE_HELPERS = tuple(os.sep + os.path.join("torch", d) + os.sep for d in ("_inductor", "_dynamo"))


def _compile_helper(frame) -> bool:
    """Whether a process started from this frame is torch.compile's own helper: a frame of inductor or dynamo is
    on the stack that starts it."""
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in COMPILE_HELPERS):
            return True
        frame = frame.f_back
    return False


def watch_exec(result: PassResult, owner: int) -> None:
    """Note the Python processes the target starts from a fresh interpreter (multiprocessing's spawn and
    forkserver, subprocess) into `result.not_recorded`: the operator pass records none of them, and says so.
    Both start through _posixsubprocess.fork_exec (subprocess holds its own name for it)."""
    try:
        import _posixsubprocess
        import subprocess
    except ImportError:
        return
    executable = os.path.realpath(sys.executable)

    def watched(real):
        def fork_exec(args, *rest, **kwargs):
            pid = real(args, *rest, **kwargs)
            if os.getpid() == owner and len(result.not_recorded) < 100:
                argv = [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in args or ()]
                program = os.path.basename(argv[0]) if argv else ""
                text = " ".join(argv)
                # multiprocessing's resource tracker runs no torch: not the user's work
                if argv and (os.path.realpath(argv[0]) == executable or program.startswith("python")) \
                        and "multiprocessing.resource_tracker" not in text and not _compile_helper(sys._getframe(1)):
                    how = ("spawn" if "spawn_main" in text else "forkserver" if "multiprocessing.forkserver" in text
                           else "subprocess")
                    result.not_recorded.append(StartedProcess(how=how, command=text[:200], pid=pid))
            return pid

        return fork_exec

    if getattr(subprocess, "_fork_exec", None) is not None:
        subprocess._fork_exec = watched(subprocess._fork_exec)  # noqa: SLF001
    _posixsubprocess.fork_exec = watched(_posixsubprocess.fork_exec)
