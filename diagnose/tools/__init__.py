"""External tools, one module each, called as subprocesses."""
