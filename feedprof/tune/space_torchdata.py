"""The search space of torchdata.nodes pipelines: ParallelMapper ``num_workers``
and ``method`` (threads or processes), Prefetcher ``prefetch_factor`` (see
space.py for what a space answers)."""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from feedprof.analyse.measured import measured_configs
from feedprof.analyse.measurements import CpuUse
from feedprof.frameworks.paste import Paste
from feedprof.frameworks.torchdata_nodes import paste_for
from feedprof.store import Framework, LoaderRecord, Trial
from feedprof.store.knobs.nodes import legalize
from feedprof.store.reasons import Reason, ThreadsVersusProcesses
from feedprof.tune.space import PREFETCH_MIN_WAIT, Config, Space, Variant, job_fills_cpus

DEEP_PREFETCH = 4  # tried while the loop still waits, where the pipeline has a Prefetcher


class NodesSpace(Space):
    """num_workers=0 maps in the loop's own thread; threads share the training
    process (and its GIL), processes cost a Python process each."""

    framework = Framework.TORCHDATA_NODES
    primary = "num_workers"
    knobs = ("num_workers", "method", "prefetch_factor")

    def legalize(self, config: Config) -> Config:
        return legalize(config)

    def ceiling_config(self) -> Config:
        # no workers: nothing competes with the training step while one batch is replayed
        return self.legalize({**self.baseline, "num_workers": 0})

    def cost(self, config: Config) -> tuple:
        cfg = self.legalize(config)
        return (cfg["num_workers"], cfg["method"] == "process", cfg["prefetch_factor"] or 0)

    def workers(self, config: Config) -> int:
        cfg = self.legalize(config)
        return cfg["num_workers"] if cfg["method"] == "process" else 0  # threads add no process to budget

    def cpu_verdict(self, config: Config, use: CpuUse) -> Optional[bool]:
        cfg = self.legalize(config)
        if cfg["num_workers"] <= 1:
            return None
        if cfg["method"] == "process":
            return super().cpu_verdict(config, use)
        return job_fills_cpus(use, self.cpu_cap)  # threads run in the training process

    def secondary(self, best: Trial, tol: float, measured: Sequence[Trial]) -> List[Variant]:
        cfg = self.legalize(best.config)
        out: List[Variant] = []
        if cfg["num_workers"] >= 2:  # threads or processes: measured, not assumed
            other = "thread" if cfg["method"] == "process" else "process"
            out.append(Variant({**cfg, "method": other}))
        wait = best.data_wait_fraction
        pf = cfg["prefetch_factor"]
        if pf is not None and pf < DEEP_PREFETCH and wait is not None and wait >= PREFETCH_MIN_WAIT:
            out.append(Variant({**cfg, "prefetch_factor": DEEP_PREFETCH}))
        return out

    def finalize(self, pick: Trial, tol: float, trials: Sequence[Trial] = ()) -> Tuple[Config, List[Reason]]:
        """The pick, and threads against processes at its worker count where both were measured."""
        cfg = self.legalize(pick.config)
        measured = [(self.legalize(m.config), m) for m in measured_configs(trials)]
        both = [self._at_workers(cfg, method, measured) for method in ("thread", "process")]
        if cfg["num_workers"] < 2 or None in both:
            return cfg, []
        thread, process = both
        finding = ThreadsVersusProcesses(
            workers=cfg["num_workers"], thread_batches_per_s=thread.score, process_batches_per_s=process.score,
            thread_rss_bytes=thread.latest.peak_rss_bytes, process_rss_bytes=process.latest.peak_rss_bytes,
            threads_do_as_well=thread.score >= process.score * (1 - tol))
        return cfg, [finding]

    @staticmethod
    def _at_workers(cfg: Config, method: str, measured: Sequence[Tuple[Config, Any]]) -> Any:
        """The pick's worker count with ``method``: its own prefetch where that
        was measured, else the fastest prefetch measured (the deep-prefetch
        secondary may win after the method was compared at the shallow one)."""
        same = [(c, m) for c, m in measured if c["num_workers"] == cfg["num_workers"] and c["method"] == method]
        exact = [m for c, m in same if c["prefetch_factor"] == cfg["prefetch_factor"]]
        return exact[0] if exact else max((m for _, m in same), key=lambda m: m.score, default=None)

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        return self.paste(config, loader, script).line

    def paste(self, config: Config, loader: Optional[LoaderRecord], script: str, argv: Sequence[str] = ()) -> Paste:
        return paste_for(self.legalize(config), loader, script, argv)

