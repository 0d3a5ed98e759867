"""Errors a user can cause, and the exit codes diagnose promises.

Every error the CLI reports is one of these: a one-line message and a code.
A traceback reaches the user only for a bug in diagnose itself (exit 1).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    INTERNAL_ERROR = 1  # a bug in diagnose
    USAGE = 2  # bad command line or bad target: nothing was run
    TARGET_FAILED = 3  # the target raised, exited non-zero, was killed or timed out; report written
    GATE = 4  # CI gate: --fail-on found findings at that severity, or compare --fail-on-regression tripped
    PTRACE_DENIED = 5  # diagnose attach: ptrace is not permitted on the process (yama, a container, non-dumpable)
    OTHER_USER = 6  # diagnose attach: the process belongs to another user
    NOT_PYTHON = 7  # diagnose attach: the process is not a Python process
    INTERRUPTED = 130  # Ctrl-C; whatever was measured is written
    TERMINATED = 143  # SIGTERM (a CI job's timeout, kill): handled like Ctrl-C, whatever was measured is written


class DiagnoseError(Exception):
    """An error with a message meant for the user and an exit code."""

    exit_code = ExitCode.INTERNAL_ERROR

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class UsageError(DiagnoseError):
    exit_code = ExitCode.USAGE


class TargetError(UsageError):
    """The target cannot be run at all: missing, a directory, a syntax error..."""


class OutputError(UsageError):
    """The output directory cannot be used without harming the user's files."""


class RerunError(DiagnoseError):
    """`diagnose compare --repeat`: a target that ran when it was diagnosed fails when run again."""

    exit_code = ExitCode.TARGET_FAILED


class AttachError(DiagnoseError):
    """diagnose attach cannot sample the process; each subclass (diagnose/attach/process.py) has its own code."""
