"""Three lines whose own time is of three kinds, for the call-graph pass's sampler (tests/unit/test_python_layer.py):
numpy's `@` through a C slot, a pure Python loop, and a Cython method cProfile sees no call for."""

import time

import numpy as np


def work(seconds: float) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 256)), rng.standard_normal((256, 256))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        c = a @ b  # SLOT
        total = 0
        for i in range(20_000): total += i  # PYTHON  # noqa: E701
        noise = rng.standard_normal((200, 200))  # CALL
        del c, noise, total
