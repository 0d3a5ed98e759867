"""diagnose: CPU performance diagnosis for PyTorch.

`diagnose model.py` runs the script in child processes, once per layer
(uninstrumented, operators, ...), and writes one report: report.json
(contract: docs/report.md), report.md, and the layers' pictures.
"""

__version__ = "0.1.0"

from diagnose.steps import mark_step  # noqa: E402,F401 - `import diagnose; diagnose.mark_step()` in a script's loop
