"""Run a script as __main__ inside torch.autograd.profiler.emit_itt(): each aten op is an ITT task.

    python vtune_scripts/itt_run.py SCRIPT.py [ARGS...]

Used by collect.sh so that VTune's timeline and `-group-by task` reports name
the aten operators; the script's own arguments pass through unchanged.
"""

import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: itt_run.py SCRIPT.py [ARGS...]")
    import torch

    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    if not torch.profiler.itt.is_available():
        print("itt_run.py: this torch build has no ITT support; ops will not be labelled", file=sys.stderr)
    with torch.autograd.profiler.emit_itt():
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
