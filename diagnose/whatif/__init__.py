"""What-if experiments: code changes diagnose suggests, measured on the user's own steps (`--what-if`).

- variants.py: which variants apply to this report, and the exact code
  change each one stands for (parent side);
- child.py: the variant applied from outside inside a pass, the seeded run,
  the outputs kept (runner side);
- outputs.py: a variant's outputs against the baseline's;
- the what-if layer (diagnose/layers/whatif.py) runs them in interleaved
  rounds with the doctor's trial statistics (diagnose/doctor/trials.py) and
  fills report.what_if; findings/whatif.py turns measured wins into findings.
"""
