"""The search spaces of the TensorFlow-side loaders: Keras 3 ``PyDataset``,
legacy tf.keras ``fit(workers=...)`` and ``tf.data`` pipelines (see space.py
for what a space answers)."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from feedprof.analyse.evidence import config_key
from feedprof.analyse.measured import measured_configs
from feedprof.analyse.measurements import CpuUse
from feedprof.frameworks import keras as keras_adapter
from feedprof.frameworks import tf_keras as tf_keras_adapter
from feedprof.frameworks.paste import Paste
from feedprof.frameworks.tfdata_paste import paste
from feedprof.store import Framework, LoaderRecord, Trial
from feedprof.store.knobs import pydataset, tfdata
from feedprof.store.reasons import EpochEndStall, Reason, VersusAutotune
from feedprof.tune.space import PREFETCH_MIN_WAIT, Config, Space, Variant, job_fills_cpus, ladder_rungs

GIL_CORE_PCT = 90.0  # a process whose threads hold the GIL tops out near one core
DEEPEST_QUEUE = 20  # Keras max_queue_size is doubled (from 10) while below this


class KerasSpace(Space):
    """Keras 3 PyDataset: workers (threads, or processes with use_multiprocessing),
    max_queue_size. workers=1 loads in the training loop's own thread."""

    framework = Framework.KERAS
    primary = "workers"
    knobs = ("workers", "use_multiprocessing", "max_queue_size")

    def legalize(self, config: Config) -> Config:
        return pydataset.legalize(config)

    def rungs(self, limit: int) -> List[int]:
        return sorted({max(1, r) for r in ladder_rungs(limit, extra=(self.cpu_cap,))})

    def ceiling_config(self) -> Config:
        return self.legalize({**self.baseline, "workers": 1, "use_multiprocessing": False})

    def loads_in_loop(self, config: Config) -> bool:
        """workers=1 without processes: Keras runs no enqueuer, the loop loads each batch itself."""
        cfg = self.legalize(config)
        return cfg["workers"] <= 1 and not cfg["use_multiprocessing"]

    def cost(self, config: Config) -> tuple:
        cfg = self.legalize(config)
        return (cfg["workers"], cfg["use_multiprocessing"], cfg["max_queue_size"])

    def cpu_verdict(self, config: Config, use: CpuUse) -> Optional[bool]:
        cfg = self.legalize(config)
        if cfg["use_multiprocessing"]:
            return super().cpu_verdict(config, use)
        if cfg["workers"] <= 1:
            return None
        # Thread workers share the training process: its CPU is the step's and the
        # loading's together, so only a job that fills the CPUs says they are the limit.
        # (Loading that holds the GIL then shows up as no gain, and the ladder stops.)
        return job_fills_cpus(use, self.cpu_cap)

    def secondary(self, best: Trial, tol: float, measured: Sequence[Trial]) -> List[Variant]:
        cfg = self.legalize(best.config)
        out: List[Variant] = []
        if not cfg["use_multiprocessing"] and best.main_cpu_pct is not None and best.main_cpu_pct >= GIL_CORE_PCT:
            # Loading that holds the GIL gains nothing from threads; processes run it in parallel.
            workers = max(2, cfg["workers"], min(self.cpu_cap, self.max_primary))
            out.append(Variant({**cfg, "workers": workers, "use_multiprocessing": True}))
        if cfg["workers"] <= 1:
            return out
        wait = best.data_wait_fraction
        if (wait is None or wait >= PREFETCH_MIN_WAIT) and cfg["max_queue_size"] < DEEPEST_QUEUE:
            # a deeper queue lets the workers run ahead of the training step
            out.append(Variant({**cfg, "max_queue_size": 2 * cfg["max_queue_size"]}))
        return out

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        return keras_adapter.paste_line(self.legalize(config), loader, script)


class TfKerasSpace(KerasSpace):
    """Legacy tf.keras: the same knobs, passed to fit()."""

    framework = Framework.TF_KERAS

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        return tf_keras_adapter.paste_line(self.legalize(config), loader, script)

    def notes(self) -> List[Reason]:
        return [EpochEndStall()]


class TfDataSpace(Space):
    """tf.data: num_parallel_calls of the script's map/interleave calls (with a
    private threadpool as large, beyond the core count), prefetch buffer,
    deterministic; AUTOTUNE measured as one more candidate."""

    framework = Framework.TF_DATA
    primary = "num_parallel_calls"
    knobs = ("num_parallel_calls", "prefetch", "deterministic", "private_threadpool_size")

    def legalize(self, config: Config) -> Config:
        return tfdata.legalize(config)

    def loads_in_loop(self, config: Config) -> bool:
        """A sequential map (num_parallel_calls unset or 1) with no prefetch: each batch is made
        inside the loop's own next()."""
        return config.get("num_parallel_calls") in (None, 1) and not config.get("prefetch")

    def primary_of(self, config: Config) -> int:
        npc = config.get("num_parallel_calls")
        if npc == "AUTOTUNE":
            return self.cpu_cap
        return int(npc or 1)

    def rungs(self, limit: int) -> List[int]:
        return sorted({max(1, r) for r in ladder_rungs(limit, extra=(self.cpu_cap,))})

    def with_primary(self, config: Config, n: int) -> Config:
        # The default threadpool has as many threads as cores: beyond that a
        # private pool is what lets more calls run at once (docs/architecture.md, tf.data).
        return self.legalize({**config, "num_parallel_calls": n,
                              "private_threadpool_size": n if n > self.cpu_cap else None})

    def ceiling_config(self) -> Config:
        return self.legalize(dict(self.baseline))

    def cost(self, config: Config) -> tuple:
        cfg = self.legalize(config)
        autotune = cfg["num_parallel_calls"] == "AUTOTUNE"
        threads = self.cpu_cap if autotune else (cfg["num_parallel_calls"] or 1)
        return (threads, cfg["private_threadpool_size"] or 0, self.in_flight(cfg), autotune)

    def workers(self, config: Config) -> int:
        return 0  # threads inside the training process: no worker processes to budget

    def cpu_verdict(self, config: Config, use: CpuUse) -> Optional[bool]:
        return job_fills_cpus(use, self.cpu_cap)  # the map's threads run in the training process

    def secondary(self, best: Trial, tol: float, measured: Sequence[Trial]) -> List[Variant]:
        cfg = self.legalize(best.config)
        # AUTOTUNE, measured like the rest: does a static setting beat it?
        out = [Variant({"num_parallel_calls": "AUTOTUNE", "prefetch": "AUTOTUNE", "deterministic": None,
                        "private_threadpool_size": None})]
        if cfg["prefetch"] is None:  # a prefetch buffer overlaps loading with the step
            out.append(Variant({**cfg, "prefetch": "AUTOTUNE"}))
        calls = cfg["num_parallel_calls"]
        if cfg["deterministic"] is None and (calls == "AUTOTUNE" or (calls or 1) > 1):  # (AUTOTUNE is parallel)
            # out-of-order elements let a slow one not hold up the rest
            out.append(Variant({**cfg, "deterministic": False}))
        return out

    def finalize(self, pick: Trial, tol: float, trials: Sequence[Trial] = ()) -> Tuple[Config, List[Reason]]:
        """Never below AUTOTUNE: a cheaper static setting within tolerance but
        slower than AUTOTUNE as measured loses to it."""
        configs = measured_configs(trials)
        auto = next((m for m in configs if m.config.get("num_parallel_calls") == "AUTOTUNE"), None)
        mine = next((m for m in configs if config_key(m.config) == config_key(pick.config)), None)
        if auto is None or mine is None:
            return self.legalize(dict(pick.config)), []
        switched = auto.score > mine.score and config_key(auto.config) != config_key(mine.config)
        versus = VersusAutotune(static_batches_per_s=mine.score, autotune_batches_per_s=auto.score,
                                static_rss_bytes=mine.latest.peak_rss_bytes,
                                autotune_rss_bytes=auto.latest.peak_rss_bytes, switched=switched)
        return self.legalize(dict((auto if switched else pick).config)), [versus]

    def paste_line(self, config: Config, loader: Optional[LoaderRecord], script: str) -> str:
        return self.paste(config, loader, script).line

    def paste(self, config: Config, loader: Optional[LoaderRecord], script: str, argv: Sequence[str] = ()) -> Paste:
        """The statements that build the pipeline, and the lines each setting is made on."""
        return paste(self.legalize(config), loader, script)
