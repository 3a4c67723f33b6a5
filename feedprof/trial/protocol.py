"""What the parent and a trial child say to each other, through files only.

    parent ── spec.json ──► child (python -m feedprof.trial.child spec.json)
    parent ◄─ events.jsonl ─ child   progress: loaders seen, window started/done
    parent ◄─ result.json ── child   a store.Run without samples/host (the parent adds them)
    parent ─ decision.json ► child   online mode: the config the tuned loader serves now

Results never come from scraping the script's stdout: it belongs to the user.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from feedprof.store import Code

DECISION_FILE = "decision.json"  # online mode: the parent's decisions, beside the trial's spec


class Mode(Code):
    OBSERVE = "observe"  # no injection: the script's own settings (profile, baseline)
    INJECT = "inject"  # knobs injected at the target loader
    CEILING = "ceiling"  # the target loader replays one cached batch
    ONLINE = "online"  # the real run, to its end: the tuned loader's config follows decision.json


@dataclass
class TrialSpec:
    script: str
    argv: List[str]
    result_path: str
    events_path: str
    origin_s: float  # the parent's clock at trial start: child times are relative to it
    window_batches: int  # the window (runner.TrialOptions says how they are set)
    window_seconds: float
    min_window_batches: int
    warmup_batches: int
    mode: Mode = Mode.OBSERVE
    framework: Optional[str] = None  # target loader's framework (None: any)
    target_chain: Optional[List[str]] = None  # call chain of the loaders to inject into
    target_site: Optional[str] = None  # --loader FILE:LINE, matched against the chain
    inject: Dict[str, Any] = field(default_factory=dict)
    full: bool = False  # run the script to completion
    decision_path: str = ""  # online mode: the parent's decisions (trial/online_child.py)
    allow_rng_change: bool = False  # online mode: --allow-rng-change
    allow_resharding: bool = False  # online mode: --allow-resharding (an IterableDataset switched between epochs)
    # a job's ranks (hosted.py): where feedprof runs, so that a rank out of its sight measures itself
    # (trial/rank_meter.py), and its time zero on the wall clock (another node's monotonic clock is its own)
    sight: str = ""  # record/ranks.sight() of the feedprof that launched the job
    origin_wall_s: Optional[float] = None
    interval_s: float = 0.2  # the sampling period
    gpu: bool = False  # sample the devices too
    launcher: str = ""  # a job's launcher (trial/launch.py); "ray": Ray Train's workers are its ranks

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "TrialSpec":
        data = json.loads(text)
        return cls(**{**data, "mode": Mode(data.get("mode", Mode.OBSERVE))})


def site_matches(site: str, chain: Sequence[str]) -> bool:
    """``--loader FILE:LINE`` names a frame of a loader's call chain (a file by its tail)."""
    return any(frame == site or frame.endswith("/" + site) or site.endswith("/" + frame) for frame in chain)


def read_events(path: str, offset: int = 0) -> tuple:
    """New complete event lines since ``offset``: (events, new offset)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = []
    for line in data[:end].splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events, offset + end
