"""The search spaces of the TensorFlow-side loaders: Keras 3 ``PyDataset``,
legacy tf.keras ``fit(workers=...)`` and ``tf.data`` pipelines (see space.py
for what a space answers)."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from feedprof.store import Trial
from feedprof.tune.space import PREFETCH_MIN_WAIT, SATURATED_SYSTEM_PCT, Config, Space, ladder_rungs

GIL_CORE_PCT = 90.0  # a process whose threads hold the GIL tops out near one core


class KerasSpace(Space):
    """Keras 3 PyDataset: workers (threads, or processes with use_multiprocessing),
    max_queue_size. workers=1 loads in the training loop's own thread."""

    framework = "keras"
    primary = "workers"
    knobs = ("workers", "use_multiprocessing", "max_queue_size")

    def legalize(self, config: Config) -> Config:
        from feedprof.frameworks.keras import legalize

        return legalize(config)

    def rungs(self, limit: int) -> List[int]:
        return sorted({max(1, r) for r in ladder_rungs(limit, extra=(self.cpu_cap,))})

    def ceiling_config(self) -> Config:
        return self.legalize({**self.baseline, "workers": 1, "use_multiprocessing": False})

    def cost(self, config: Config) -> tuple:
        cfg = self.legalize(config)
        return (cfg["workers"], cfg["use_multiprocessing"], cfg["max_queue_size"])

    def describe(self, config: Config) -> str:
        cfg = self.legalize(dict(config))
        parts = [f"workers={cfg['workers']}"]
        if cfg["use_multiprocessing"]:
            parts.append("use_multiprocessing=True")
        if cfg["max_queue_size"] != 10:
            parts.append(f"max_queue_size={cfg['max_queue_size']}")
        return ", ".join(parts)

    def in_flight(self, config: Config) -> int:
        cfg = self.legalize(config)
        return cfg["max_queue_size"] if cfg["workers"] > 1 or cfg["use_multiprocessing"] else 1

    def cpu_bound(self, trial: Trial) -> Optional[bool]:
        cfg = self.legalize(trial.config)
        if cfg["use_multiprocessing"]:
            return super().cpu_bound(trial)
        if cfg["workers"] <= 1 or trial.system_cpu_pct is None:
            return None
        # Thread workers share the training process: its CPU is the step's and the
        # loading's together, so only a saturated machine says the CPUs are the limit.
        # (Loading that holds the GIL then shows up as no gain, and the ladder stops.)
        return trial.system_cpu_pct >= SATURATED_SYSTEM_PCT

    def secondary(self, best: Trial, tol: float, measured: List[Trial]) -> List[Tuple[Config, str, dict]]:
        cfg = self.legalize(best.config)
        out: List[Tuple[Config, str, dict]] = []
        if not cfg["use_multiprocessing"] and best.main_cpu_pct is not None and best.main_cpu_pct >= GIL_CORE_PCT:
            # Loading that holds the GIL gains nothing from threads; processes run it in parallel.
            workers = max(2, cfg["workers"], min(self.cpu_cap, self.max_primary))
            out.append(({**cfg, "workers": workers, "use_multiprocessing": True},
                        "the training process uses a full core (loading that holds the GIL): "
                        "worker processes may load in parallel", {}))
        if cfg["workers"] <= 1:
            return out
        wait = best.data_wait_fraction
        if (wait is None or wait >= PREFETCH_MIN_WAIT) and cfg["max_queue_size"] < 20:
            out.append(({**cfg, "max_queue_size": 2 * cfg["max_queue_size"]},
                        "a deeper queue lets the workers run ahead of the training step", {}))
        return out

    def code(self, config: Config, loader: Any, script: str) -> str:
        from feedprof.frameworks.keras import code_line

        return code_line(self.legalize(config), loader, script)


class TfKerasSpace(KerasSpace):
    """Legacy tf.keras: the same knobs, passed to fit()."""

    framework = "tf.keras"

    def code(self, config: Config, loader: Any, script: str) -> str:
        from feedprof.frameworks.tf_keras import code_line

        return code_line(self.legalize(config), loader, script)

    def notes(self) -> List[str]:
        from feedprof.frameworks.tf_keras import EPOCH_END_STALL_NOTE

        return [EPOCH_END_STALL_NOTE]


class TfDataSpace(Space):
    """tf.data: num_parallel_calls of the script's map/interleave calls (with a
    private threadpool as large, beyond the core count), prefetch buffer,
    deterministic; AUTOTUNE measured as one more candidate."""

    framework = "tf.data"
    primary = "num_parallel_calls"
    knobs = ("num_parallel_calls", "prefetch", "deterministic", "private_threadpool_size")

    def legalize(self, config: Config) -> Config:
        from feedprof.frameworks.tfdata import legalize

        return legalize(config)

    def primary_of(self, config: Config) -> int:
        npc = config.get("num_parallel_calls")
        if npc == "AUTOTUNE":
            return self.cpu_cap
        return int(npc or 1)

    def rungs(self, limit: int) -> List[int]:
        return sorted({max(1, r) for r in ladder_rungs(limit, extra=(self.cpu_cap,))})

    def with_primary(self, config: Config, n: int) -> Config:
        # The default threadpool has as many threads as cores: beyond that a
        # private pool is what lets more calls run at once (shared/PLATFORM.md).
        return self.legalize({**config, "num_parallel_calls": n,
                              "private_threadpool_size": n if n > self.cpu_cap else None})

    def ceiling_config(self) -> Config:
        return self.legalize(dict(self.baseline))

    def cost(self, config: Config) -> tuple:
        cfg = self.legalize(config)
        autotune = cfg["num_parallel_calls"] == "AUTOTUNE"
        threads = self.cpu_cap if autotune else (cfg["num_parallel_calls"] or 1)
        buffer = cfg["prefetch"]
        buffer = 0 if buffer is None else (8 if buffer == "AUTOTUNE" else int(buffer))
        return (threads, cfg["private_threadpool_size"] or 0, buffer, autotune)

    def describe(self, config: Config) -> str:
        cfg = self.legalize(dict(config))
        parts = [f"num_parallel_calls={cfg['num_parallel_calls'] or 'None (sequential)'}"]
        for k in ("prefetch", "deterministic", "private_threadpool_size"):
            if cfg[k] is not None:
                parts.append(f"{k}={cfg[k]}")
        return ", ".join(parts)

    def workers(self, config: Config) -> int:
        return 0  # threads inside the training process: no worker processes to budget

    def cpu_bound(self, trial: Trial) -> Optional[bool]:
        # tf.data's threads run inside the training process: the CPUs are the limit when
        # that process fills the usable cores. The machine's CPU % counts everyone's work
        # (a shared machine reads 100 % while the pipeline's threads sleep on reads).
        if trial.main_cpu_pct is None:
            return None
        return trial.main_cpu_pct >= SATURATED_SYSTEM_PCT * self.cpu_cap

    def secondary(self, best: Trial, tol: float, measured: List[Trial]) -> List[Tuple[Config, str, dict]]:
        cfg = self.legalize(best.config)
        out: List[Tuple[Config, str, dict]] = [(
            {"num_parallel_calls": "AUTOTUNE", "prefetch": "AUTOTUNE", "deterministic": None,
             "private_threadpool_size": None},
            "AUTOTUNE, measured like the rest: does a static setting beat it?", {})]
        if cfg["prefetch"] is None:
            out.append(({**cfg, "prefetch": "AUTOTUNE"}, "a prefetch buffer overlaps loading with the step", {}))
        if cfg["deterministic"] is None and (cfg["num_parallel_calls"] or 1) > 1:
            out.append(({**cfg, "deterministic": False},
                        "out-of-order elements let a slow one not hold up the rest", {}))
        return out

    def finalize(self, pick: Trial, tol: float, trials: List[Trial] = ()) -> Tuple[Config, List[str]]:
        """Never below AUTOTUNE: a cheaper static setting within tolerance but
        slower than AUTOTUNE as measured loses to it."""
        from feedprof.analyse.recommend import config_key, measured_configs
        from feedprof.units import fmt_bytes, fmt_rate

        configs = measured_configs(trials)
        auto = next((m for m in configs if m.config.get("num_parallel_calls") == "AUTOTUNE"), None)
        mine = next((m for m in configs if config_key(m.config) == config_key(pick.config)), None)
        if auto is None or mine is None:
            return self.legalize(dict(pick.config)), []
        rss = lambda m: fmt_bytes(m.latest.peak_rss_bytes)  # noqa: E731
        if auto.score > mine.score and config_key(auto.config) != config_key(mine.config):
            return self.legalize(dict(auto.config)), [
                f"AUTOTUNE ({fmt_rate(auto.score)}, peak RSS {rss(auto)}) was faster than the best static "
                f"setting ({fmt_rate(mine.score)}, peak RSS {rss(mine)})"]
        return self.legalize(dict(pick.config)), [
            f"against AUTOTUNE: {fmt_rate(mine.score)} vs {fmt_rate(auto.score)} "
            f"({mine.score / auto.score:.2f}×), peak RSS {rss(mine)} vs {rss(auto)}"]

    def code(self, config: Config, loader: Any, script: str) -> str:
        from feedprof.frameworks.tfdata import code_line

        return code_line(self.legalize(config), loader, script)

    def notes(self) -> List[str]:
        return []
