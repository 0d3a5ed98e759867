"""diagnose attach PID: a running process sampled from outside (run.py drives it).

- run.py: the command: the three observers (py-spy, the threads layer's sampler, the RSS), the report;
- process.py: what a PID is, and the errors attaching meets (exit codes 2, 5, 6, 7);
- stacks.py: py-spy's timed stacks -> report.sampled and a step budget by sampling (pure);
- window.py: py-spy over one pass of diagnose's own (`diagnose script.py --sample`, layers/sample.py).
Nothing here imports the api's package-level modules, so the layer registry may import stacks and window.
"""
