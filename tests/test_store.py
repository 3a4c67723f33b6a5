import json

import pytest

import feedprof
from feedprof.codec import dumps
from feedprof.store import (GpuInfo, GpuSeries, HostInfo, LoaderRecord, Run, Samples, StoreError, Summary,
                            TuneResult, Trial, Recommendation, from_json_data, load, save)


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
    assert json.load(open(path))["schema"] == "feedprof.run/1"
    assert back.samples == run.samples
    assert back.loaders == run.loaders
    assert back.host == run.host
    assert back.summary.batches_per_s is None  # NaN is not JSON: stored as "not measured"


def test_tune_round_trip(tmp_path):
    res = TuneResult(script="t.py", recommendation=Recommendation(framework="torch", config={"num_workers": 4}),
                     trials=(Trial(index=0, role="baseline", config={"num_workers": 0}, state="ok", run=sample_run()),))
    path = str(tmp_path / "results.json")
    save(res, path)
    back = load(path)
    assert isinstance(back, TuneResult)
    assert back.recommendation.config == {"num_workers": 4}
    assert back.trials[0].run.loaders == res.trials[0].run.loaders


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
])
def test_bad_files(tmp_path, content, match):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(StoreError, match=match):
        load(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(StoreError, match="no such file"):
        load(str(tmp_path / "nope.json"))
