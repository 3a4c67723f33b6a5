"""Where one batch's time goes, for one config: the training loop's time per batch split into
measured parts that add up to it (analyse/batch_time.py measures them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple


@dataclass(frozen=True)
class TimePart:
    """One part of a batch's time: seconds per batch, and how far it moved over the window's chunks
    (half the range, seconds: its noise)."""

    name: str  # PARTS
    s: float
    spread_s: Optional[float] = None


# The parts, in the order they add up to a batch's time:
#   blocked       the loop blocked in the loader's __next__, waiting for a batch
#   loop_loading  the training process's own loading work there (its CPU time in __next__: receiving
#                 a batch from the workers; at 0 workers all of the loading)
#   step_alone    the step as it runs with nothing loading beside it (the compute ceiling's replay, or
#                 the script at 0 workers); a copy to the device made in the step is part of it
#   slowdown      the same step taking longer beside the workers, split where the training process's
#                 CPU and its wait for a CPU were sampled in both runs into:
#     slowdown_runq   waiting for a CPU (the workers took the cores)
#     slowdown_cpu    more CPU work in each step (fresh batches to touch and copy, caches and memory
#                     bandwidth shared with the workers)
#     slowdown_wait   waiting on something that is neither (the device, a copy to it, a lock)
#   step          the step and slowdown together, where the step alone was not measured
PARTS = ("blocked", "loop_loading", "step_alone", "slowdown", "slowdown_runq", "slowdown_cpu", "slowdown_wait",
         "step")
SLOWDOWN_PARTS = ("slowdown_runq", "slowdown_cpu", "slowdown_wait")


@dataclass(frozen=True)
class BatchTime:
    config: Dict[str, Any] = field(default_factory=dict)
    role: str = "run"  # "script" (its own settings), "pick", "ceiling", "run" (a profile)
    batch_s: float = 0.0  # seconds per batch while the loop trains (1 / the training rate)
    parts: Tuple[TimePart, ...] = ()
    step_alone_from: str = ""  # "ceiling", "no_workers" (the script's own at 0 workers), "" (not measured)
    batches: int = 0  # steps the figures come from

    def part(self, name: str) -> Optional[TimePart]:
        return next((p for p in self.parts if p.name == name), None)

    def seconds(self, name: str) -> Optional[float]:
        """A part's seconds a batch; "slowdown" is its three parts' sum where it was split."""
        p = self.part(name)
        if p is None and name == "slowdown" and any(self.part(n) for n in SLOWDOWN_PARTS):
            return sum(self.seconds(n) or 0.0 for n in SLOWDOWN_PARTS)
        return p.s if p is not None else None

