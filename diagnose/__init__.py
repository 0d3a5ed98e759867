"""diagnose: CPU performance diagnosis for PyTorch.

`diagnose model.py` runs the script in child processes, once per layer
(uninstrumented, operators, ...), and writes one report: report.json
(contract: REPORT_CONTRACT.md), report.md, and the layers' pictures.
"""

__version__ = "0.1.0"
