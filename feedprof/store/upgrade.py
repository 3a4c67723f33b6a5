"""Files of older schema versions as current data, one version at a time,
so ``feedprof report`` and ``--resume`` read them. Pure dict-to-dict: no
records here.

- 1 -> 2: version 1 stored findings as sentences; version 2 stores them as
  codes with figures (reasons.py). Old sentences become ``Text`` findings,
  shown as they were; everything else maps one to one.
- 2 -> 3: the recommendation's paste-ready line is ``paste_line`` (was
  ``code``, a word that also names findings and exit codes); the closed
  vocabularies (framework, run kind, input-bound class, verdict kind) keep
  their strings.
- 3 -> 4: fields added only (the stopwatch rate of a window, the time
  between epochs charged to a trial, who used the CPUs, where a pick's
  figure comes from); a missing field reads as its default.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

_GPU_OFF = "GPU: sampling turned off"
_UNAVAILABLE = "GPU: not available — "


def _text(value: Any) -> Optional[Dict[str, str]]:
    return {"code": "text", "text": value} if isinstance(value, str) and value else None


def _texts(values: Any) -> List[Dict[str, str]]:
    return [t for t in (_text(v) for v in values or ()) if t is not None]


def _host(host: Dict[str, Any]) -> Dict[str, Any]:
    status = host.get("gpu_status") or ""
    if status == "ok":
        code, detail = "ok", ""
    elif status == _GPU_OFF:
        code, detail = "off", ""
    elif status:
        code, detail = "unknown", status.removeprefix(_UNAVAILABLE)
    else:
        code, detail = "unknown", ""
    return {**host, "gpu_status": code, "gpu_status_detail": detail}


def _window_end(reason: str) -> str:
    named = {"script ended": "script_ended", "full run": "full_run", "no loader": "no_loader",
             "no result": "no_result"}
    if reason in named:
        return named[reason]
    if re.fullmatch(r"\d+ batches", reason or ""):
        return "batches"
    if re.fullmatch(r"[\d.]+ s", reason or ""):
        return "seconds"
    return ""


def _run(run: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(run, schema="feedprof.run/2")
    if isinstance(run.get("host"), dict):
        out["host"] = _host(run["host"])
    if isinstance(run.get("window"), dict):
        window = dict(run["window"])
        window["end"] = _window_end(window.pop("reason", ""))
        out["window"] = window
    if isinstance(run.get("outcome"), dict):
        outcome = dict(run["outcome"])
        message = outcome.pop("message", "")
        outcome["cause"] = _text(message) if outcome.get("state", "ok") != "ok" else None
        out["outcome"] = outcome
    if isinstance(run.get("samples"), dict):
        out["samples"] = dict(run["samples"], notes=_texts(run["samples"].get("notes")))
    if isinstance(run.get("summary"), dict):
        out["summary"] = dict(run["summary"], notes=_texts(run["summary"].get("notes")))
    out["notes"] = _texts(run.get("notes"))
    return out


def _trial(trial: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(trial)
    out["cause"] = _text(out.pop("reason", ""))
    out["phase"] = trial.get("role") if trial.get("role") in ("baseline", "ceiling", "confirm") else "search"
    if isinstance(trial.get("run"), dict):
        out["run"] = _run(trial["run"])
    return out


def upgrade_v1(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 1 data (run or tune) as version 2 data."""
    if data.get("schema") == "feedprof.run/1":
        return _run(data)
    out = dict(data, schema="feedprof.tune/2")
    if isinstance(data.get("host"), dict):
        out["host"] = _host(data["host"])
    out["trials"] = [_trial(t) for t in data.get("trials") or () if isinstance(t, dict)]
    out["notes"] = _texts(data.get("notes"))
    out["stop_reason"] = _text(data.get("stop_reason"))
    rec = data.get("recommendation")
    if isinstance(rec, dict):
        out["recommendation"] = dict(rec, verdict=_text(rec.get("verdict")) or {"code": "text", "text": ""},
                                     reasons=_texts(rec.get("reasons")))
    return out


def _retag_run(run: Dict[str, Any], version: int) -> Dict[str, Any]:
    """A run (and its ranks' runs) tagged as ``version``."""
    out = dict(run, schema=f"feedprof.run/{version}")
    if isinstance(run.get("ranks"), list):
        out["ranks"] = [_retag_run(r, version) if isinstance(r, dict) else r for r in run["ranks"]]
    return out


def _retag(data: Dict[str, Any], version: int) -> Dict[str, Any]:
    """Run or tune data, with every run in it, tagged as ``version``."""
    if str(data.get("schema", "")).startswith("feedprof.run/"):
        return _retag_run(data, version)
    out = dict(data, schema=f"feedprof.tune/{version}")
    out["trials"] = [dict(t, run=_retag_run(t["run"], version))
                     if isinstance(t, dict) and isinstance(t.get("run"), dict) else t
                     for t in data.get("trials") or ()]
    return out


def upgrade_v2(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 2 data (run or tune) as version 3 data."""
    out = _retag(data, 3)
    rec = out.get("recommendation")
    if isinstance(rec, dict):
        rec = dict(rec)
        rec["paste_line"] = rec.pop("code", "")
        out["recommendation"] = rec
    return out


def upgrade_v3(data: Dict[str, Any]) -> Dict[str, Any]:
    """Version 3 data (run or tune) as version 4 data: version 4 only adds
    fields (their defaults stand for what version 3 did not measure)."""
    return _retag(data, 4)


STEPS = {"1": upgrade_v1, "2": upgrade_v2, "3": upgrade_v3}  # version -> its data as the next version's
READS = ("1", "2", "3", "4")  # the versions this feedprof reads (the last: what it writes)


def upgrade(data: Dict[str, Any], version: str) -> Dict[str, Any]:
    """``data`` of schema ``version`` as the current version's."""
    while version in STEPS:
        data, version = STEPS[version](data), str(int(version) + 1)
    return data
