"""Errors the command line turns into exit codes.

`UsageError` is bad usage or bad input (exit 2, one line on stderr: "microbench:
error: ..."). Anything else escaping the library is a bug (exit 1).
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad arguments or input files: the user can fix it; never a traceback."""
