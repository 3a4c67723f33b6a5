import json
import os
import resource
import stat

import pytest

import feedprof
from feedprof.store.codec import dumps
from feedprof.store.reasons import CpusAreTheLimit, OverMemoryBudget, Unknown, Verdict, WaitNotObservable
from feedprof.store import (SCHEMA_RUN, SCHEMA_TUNE, GpuInfo, GpuSeries, HostInfo, LoaderRecord,
                            Phase, Role, Run, Samples, StoreError, Summary, Trial, TrialState,
                            TuneResult, Recommendation, from_json_data, load, save, write_refused)


def sample_run():
    return Run(script="t.py", argv=("--x", "1"), host=HostInfo(cpus_usable=2, gpus=(
        GpuInfo(nvml_index=1, cuda_index=0, uuid="GPU-a", name="H100", mem_total_bytes=80),)),
        loaders=(LoaderRecord(loader_id=0, framework="torch", config={"num_workers": 2, "pin_memory": None}),),
        samples=Samples(t_s=(0.0, 0.2), main_cpu_pct=(1.0, None),
                        per_core_cpu_pct=((1.0, 2.0), (3.0, 4.0)),
                        gpus=(GpuSeries(cuda_index=0, uuid="GPU-a", util_pct=(None, 50.0)),)),
        summary=Summary(batches_per_s=float("nan"), gpu_util_pct=(50.0,)))


def test_run_round_trip(tmp_path):
    run = sample_run()
    path = str(tmp_path / "run.json")
    save(run, path)
    back = feedprof.load(path)
    assert json.load(open(path))["schema"] == SCHEMA_RUN == "feedprof.run/1"
    assert back.samples == run.samples
    assert back.loaders == run.loaders
    assert back.host == run.host
    assert back.summary.batches_per_s is None  # NaN is not JSON: stored as "not measured"


def test_tune_round_trip(tmp_path):
    verdict = Verdict(kind="faster", input_bound="highly", config={"num_workers": 4}, speedup=3.0)
    rejected = Trial(index=1, role=Role.SEARCH, config={"num_workers": 64}, state=TrialState.REJECTED,
                     phase=Phase.LADDER, cause=OverMemoryBudget(need_bytes=10, per_worker_bytes=2, free_bytes=5))
    res = TuneResult(script="t.py", recommendation=Recommendation(
        framework="torch", config={"num_workers": 4}, verdict=verdict,
        reasons=(CpusAreTheLimit(cores_per_worker=0.97, cpu_cap=2),)),
        trials=(Trial(index=0, role=Role.BASELINE, config={"num_workers": 0}, state=TrialState.OK, run=sample_run()),
                rejected))
    path = str(tmp_path / "results.json")
    save(res, path)
    data = json.load(open(path))
    assert data["schema"] == SCHEMA_TUNE == "feedprof.tune/1"
    # findings are codes with their figures, and enums are their plain strings
    assert data["recommendation"]["reasons"] == [{"code": "cpus_are_the_limit", "cores_per_worker": 0.97, "cpu_cap": 2, "workers_cores": None, "main_cores": None, "other_cores": None}]
    assert data["trials"][1]["state"] == "rejected" and data["trials"][1]["phase"] == "ladder"
    assert data["trials"][1]["cause"]["code"] == "over_memory_budget"
    back = load(path)
    assert isinstance(back, TuneResult)
    assert back.recommendation == res.recommendation
    assert back.trials[1] == rejected and back.trials[1].state is TrialState.REJECTED
    assert back.trials[0].run.loaders == res.trials[0].run.loaders


def test_a_finding_from_a_newer_feedprof_is_kept_as_unknown():
    data = json.loads(dumps(Run(script="a.py", notes=(WaitNotObservable(framework="tf.data"),))))
    data["notes"].append({"code": "from_the_future", "x": 1})
    notes = from_json_data(data).notes
    assert notes[0] == WaitNotObservable(framework="tf.data") and isinstance(notes[1], Unknown)


@pytest.mark.writes_invalid_json
@pytest.mark.parametrize("record,tag,reads", [
    (TuneResult(script="t.py"), "feedprof.tune/4", "feedprof.tune/1"),  # a development build's version
    (TuneResult(script="t.py"), "feedprof.tune/2", "feedprof.tune/1"),
    (Run(script="t.py"), "feedprof.run/3", "feedprof.run/1"),
    (Run(script="t.py"), "feedprof.other/1", "feedprof.run/1 or feedprof.tune/1"),
])
def test_another_version_is_refused_in_one_line(tmp_path, record, tag, reads):
    # One version of each record until the first release: no upgrade path, a clear refusal.
    data = json.loads(dumps(record))
    data["schema"] = tag
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError) as err:
        load(str(path))
    assert str(err.value) == f"{path}: schema {tag!r} is not one this feedprof reads ({reads})"


def test_unknown_keys_are_ignored_and_missing_take_defaults():
    data = json.loads(dumps(Run(script="a.py")))
    data["from_the_future"] = 1
    del data["notes"]
    assert from_json_data(data).script == "a.py"


@pytest.mark.writes_invalid_json
@pytest.mark.parametrize("content,match", [
    ("not json", "not JSON"),
    ('{"a": 1}', "not a feedprof file"),
    ('[1, 2]', "not a feedprof file"),
    ('{"schema": "feedprof.run/9"}', "not one this feedprof reads"),
    ('{"schema": "feedprof.run/1", "loaders": [{"framework": "torch"}]}', "malformed|lacks"),
    ('{"schema": "feedprof.tune/1", "trials": [{"index": 0, "role": "nobody", "config": {}, "state": "ok"}]}',
     "malformed.*not a Role"),
])
def test_bad_files(tmp_path, content, match):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(StoreError, match=match):
        load(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        load(str(tmp_path / "nope.json"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_device_is_written_to_not_replaced(tmp_path, cli):
    """`-o /dev/full` is a full disk that names itself: one line, exit 2, and the
    device is still a device (a rename over it, as root, would replace it)."""
    path = tmp_path / "run.json"
    save(sample_run(), str(path))
    proc = cli(["report", str(path), "-o", "/dev/full"])
    assert proc.returncode == 2 and "could not write /dev/full: No space left on device" in proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert cli(["report", str(path), "-o", "/dev/null"]).returncode == 0
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_refused_write_names_the_file_and_leaves_no_temporary_one(tmp_path):
    """A real refusal, for root too: past the file size limit (EFBIG; Python ignores SIGXFSZ)."""
    target = tmp_path / "results.json"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
    try:
        with pytest.raises(OSError) as err:
            save(sample_run(), str(target))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert err.value.filename == str(target) and write_refused(err.value)
    assert os.listdir(str(tmp_path)) == []
