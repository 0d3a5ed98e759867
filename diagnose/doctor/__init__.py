"""The environment doctor: what the process runs on (allocator, OpenMP and BLAS runtimes, cgroup quota,
CPU topology and instructions), read from /proc and sysfs, and the checks that judge it.

`environment` holds the pure readers and the checks that need no running process.
"""
