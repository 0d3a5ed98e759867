"""Threads layer: a /proc sampler in its own process, its analysis, and the environment audit."""
