"""The search space of Ray Data's ``iter_torch_batches`` in a training function:
``prefetch_batches``, the batches a thread of the training worker fetches ahead
(see space.py for what a space answers). ``batch_size`` is the training's own:
it is reported, never changed."""
from __future__ import annotations

from typing import List, Optional, Sequence

from feedprof.analyse.measurements import CpuUse
from feedprof.frameworks.paste import Paste
from feedprof.frameworks.ray_data import paste_for
from feedprof.store import Framework, LoaderRecord
from feedprof.store.knobs.raydata import legalize
from feedprof.tune.space import Config, Space, job_fills_cpus, ladder_rungs

MAX_PREFETCH = 16  # past this, a deeper queue only holds memory: the stream's own tasks set the pace


class RayDataSpace(Space):
    """prefetch_batches=0 fetches each batch in the loop's own thread; more is a
    queue filled by one thread of the training process (no worker processes)."""

    framework = Framework.RAY_DATA
    primary = "prefetch_batches"
    knobs = ("prefetch_batches",)

    def __init__(self, baseline: Config, cpu_cap: int, max_primary: int, cuda_used: Optional[bool]):
        self.batch_size = baseline.get("batch_size")  # the script's, kept in every config
        super().__init__(baseline, cpu_cap, max_primary, cuda_used)

    def legalize(self, config: Config) -> Config:
        return legalize({"batch_size": self.batch_size, **config})

    def ceiling_config(self) -> Config:
        return dict(self.baseline)

    def cost(self, config: Config) -> tuple:
        return (self.legalize(config)["prefetch_batches"],)

    def workers(self, config: Config) -> int:
        return 0  # a thread of the training process: no process for the memory budget

    def rungs(self, limit: int) -> List[int]:
        return ladder_rungs(min(limit, MAX_PREFETCH))

    def cpu_verdict(self, config: Config, use: CpuUse) -> Optional[bool]:
        return job_fills_cpus(use, self.cpu_cap)  # the prefetching thread runs in the training process

    def paste(self, config: Config, loader: Optional[LoaderRecord], script: str, argv: Sequence[str] = ()) -> Paste:
        return paste_for(self.legalize(config), loader, script, argv)

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        return self.paste(config, loader, script).line
