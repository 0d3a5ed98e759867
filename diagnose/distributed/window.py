"""The ranks of a torchrun job end their measured window at the same step (runner side).

The first pass's window lasts at least `steps.MIN_WINDOW_S`, and each rank
would judge that on its own clock. Two ranks can then disagree by a step near
the limit: the one that ends (`WindowComplete`, then `os._exit`) leaves the
other inside a collective that never completes (gloo: "Connection closed by
peer"; seen under load on the DDP example, whose 25-step window lasted ~1 s).

So rank 0 alone judges the time. When its window is long enough at step k it
publishes k + MARGIN in the job's own store (torch.distributed's default
store, the TCP store every rank of the job reaches, on any node), and every
rank ends at that step. The others, once they have measured their minimum
number of steps, look for the key at each step boundary (a store check
costs ~6 µs on one node, measured here). They see it in time
whenever a step holds a collective, as DDP's gradient all-reduce does: no rank
finishes step k + 1 before rank 0 has reached that step's collective, which it
does after publishing. MARGIN = 2 leaves a step of slack.

Without a process group (a torchrun script that never calls
init_process_group) nothing couples the ranks, and each judges alone.
"""

from __future__ import annotations

KEY = "diagnose/window_end"
MARGIN = 2


class WindowAgreement:
    """`over(step, long_enough)`: whether this rank's window ends at this step boundary."""

    def __init__(self, rank: int):
        self.leader = rank == 0
        self.end: int | None = None  # the agreed last step, once known

    def over(self, step: int, long_enough: bool) -> bool:
        if self.end is None:
            store = _store()
            if store is None:
                return long_enough
            try:
                if self.leader:
                    if long_enough:
                        store.set(KEY, str(step + MARGIN))
                        self.end = step + MARGIN
                elif store.check([KEY]):
                    self.end = int(store.get(KEY))
            except RuntimeError:  # the store is gone (so is the job's communication): judge alone, as without one
                return long_enough
        return self.end is not None and step >= self.end


def _store():
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_store()  # noqa: SLF001 - the job's store, as init_process_group made it
