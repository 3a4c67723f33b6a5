"""Inert records of what feedprof measured, and their versioned JSON form.

Everything that crosses a process or a file boundary is one of these frozen
dataclasses: the record layer produces them, analyse and render only read
them, and ``feedprof report`` rebuilds them from ``run.json`` /
``results.json`` alone. Nothing here calls back into hardware, and nothing
here is worded: findings are ``reasons.Reason`` records with their figures.

    codes.py    the closed vocabularies (enums whose members are their JSON strings)
    host.py     the machine a run ran on
    samples.py  the sampler's series and their peaks
    loading.py  where the loading code spent its time (sampled lines, exact totals)
    attached.py what feedprof attach read of a job from outside (shares of samples, not timings)
    pools.py    the thread pools of the training process and of its loader's workers
    batch_time.py  where one batch's time goes, in measured parts
    procs.py    processes: on a GPU (feedprof gpus), left behind by a run
    run.py      one run (run.json): loaders, window, outcome, summary
    tune.py     a tune (results.json): trials, each config's evidence, the recommendation
    evidence.py what is known of one config, in one shape whichever search measured it
    online.py   an online tune's record of the real run: windows, switches, warm-ups, failures,
                each epoch's order check, random draws a switch moves, loaders no longer switched
    codec.py    dataclasses to JSON and back, by their type hints
    files.py    save / load (the one version of each record this feedprof writes)
    schema.py   the JSON Schemas generated from these records; the version rule
                (python -m feedprof.store.schema FILE.json validates a file)

``from feedprof.store import Run`` names every public record. The names are
resolved on first use, so that ``reasons`` (which the records hold) can use
``store.codes`` without importing the records first.
"""
from __future__ import annotations

from importlib import import_module
from typing import Any, Dict, List

_MODULES: Dict[str, tuple] = {
    "codes": ("Code", "Framework", "GpuStatus", "InputBound", "LineProblem", "Phase", "PoolRole", "Role", "RunKind", "SwitchAt",
              "TrialState", "VerdictKind", "WindowEnd"),
    "host": ("GpuInfo", "HostInfo"),
    "samples": ("GpuSeries", "Peaks", "Samples"),
    "procs": ("Leftovers",),
    "run": ("SCHEMA_RUN", "AutotunedKnob", "AutotuneReading", "EpochLog", "LoaderRecord", "OtherProcess", "OpTime", "Outcome", "RankInfo", "Run", "StepLog",
            "Summary", "Window"),
    "tune": ("SCHEMA_TUNE", "Recommendation", "Trial", "TuneResult", "TuneStart"),
    "evidence": ("ConfigEvidence",),
    "loading": ("LoadingLine", "LoadingProfile"),
    "attached": ("AttachedInfo", "ProcessWait"),
    "pools": ("ProcessPools", "ThreadPool"),
    "batch_time": ("BatchTime", "TimePart"),
    "online": ("OnlineFailure", "OnlineLoaderMode", "OnlineRecord", "OnlineSwitch", "OnlineWarmup", "OnlineWindow"),
    "files": ("StoreError", "from_json_data", "load", "records_in", "save", "write_refused", "NotSaved"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'feedprof.store' has no attribute {name!r}")
    value = getattr(import_module(f"feedprof.store.{module}"), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> List[str]:
    return __all__
