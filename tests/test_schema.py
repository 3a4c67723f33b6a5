"""The shipped JSON Schemas: generated from feedprof/store/, one version per record
until the first release, and strict enough to catch a wrong type. (tests/conftest.py
validates every feedprof JSON file the suite writes against them.)"""
import dataclasses
import json
import os
import subprocess
import sys
from typing import Any, Dict, Optional, Tuple

import pytest

from feedprof.store import schema
from feedprof.store.codec import to_dict
from feedprof.store import SCHEMA_RUN, SCHEMA_TUNE, Recommendation, Run, Trial, TuneResult
from tests.conftest import invalid_feedprof_json


def shipped_file(name):
    with open(os.path.join(schema.SCHEMA_DIR, name), encoding="utf-8") as fh:
        return json.load(fh)


def test_the_shipped_schema_files_are_what_the_records_generate_now():
    # Nothing is released yet: a change to a record changes its one version's file
    # (store/schema.py's docstring says the rule from the first release on).
    for name, generated in schema.current().items():
        assert os.path.exists(os.path.join(schema.SCHEMA_DIR, name)), (
            f"feedprof/schemas/{name} is missing: run `{schema.REGENERATE}` and commit it")
        assert shipped_file(name) == generated, (
            f"feedprof/schemas/{name} is not what the records in feedprof/store/ generate: you changed a record's "
            f"shape; run `{schema.REGENERATE}` and commit the file")


def test_one_version_of_each_record_is_shipped():
    assert (SCHEMA_RUN, SCHEMA_TUNE) == ("feedprof.run/1", "feedprof.tune/1")
    assert schema.shipped() == sorted([SCHEMA_RUN, SCHEMA_TUNE])
    assert sorted(os.listdir(schema.SCHEMA_DIR)) == sorted(schema.current()) == ["run-1.json", "tune-1.json"]


def test_every_shipped_schema_is_a_valid_draft_2020_12_schema(jsonschema):
    for tag in schema.shipped():
        s = schema.load_schema(tag)
        jsonschema.Draft202012Validator.check_schema(s)
        assert s["title"] == tag


# ------------------------------------------------------------ the rules


@dataclasses.dataclass(frozen=True)
class Inner:
    n: int
    label: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Outer:
    schema: str = "feedprof.toy/1"
    ratio: float = 0.0
    ok: bool = True
    inner: Inner = Inner(n=1)
    maybe: Optional[Inner] = None
    series: Tuple[Optional[float], ...] = ()
    pair: Tuple[int, str] = (0, "")
    names: Dict[str, str] = dataclasses.field(default_factory=dict)
    config: Dict[str, Any] = dataclasses.field(default_factory=dict)


def test_generator_follows_the_codec_rules(jsonschema):
    s = schema.generate("feedprof.toy/1", Outer)
    props = s["$defs"]["Outer"]["properties"]
    assert s["$ref"] == "#/$defs/Outer" and set(s["$defs"]) == {"Outer", "Inner"}
    assert props["schema"] == {"const": "feedprof.toy/1"}
    assert props["ratio"] == {"type": "number"} and props["ok"] == {"type": "boolean"}
    assert props["inner"] == {"$ref": "#/$defs/Inner"}
    assert props["maybe"] == {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}]}
    assert props["series"] == {"type": "array", "items": {"type": ["number", "null"]}}
    assert props["pair"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert props["names"] == {"type": "object", "additionalProperties": {"type": "string"}}
    assert props["config"] == {"type": "object"}
    assert s["$defs"]["Inner"]["required"] == ["n", "label"]
    validator = jsonschema.Draft202012Validator(s)
    assert validator.is_valid(to_dict(Outer(maybe=Inner(n=2), series=(1.0, None), config={"a": [1, None]})))
    assert not validator.is_valid(to_dict(Outer(pair=(1, 2))))


def run_dict(**changes):
    return to_dict(dataclasses.replace(Run(script="train.py"), **changes))


@pytest.mark.parametrize("path,value,where", [
    (("duration_s",), "fast", "$.duration_s"),  # a wrong type
    (("loaders",), [{"loader_id": 0}], "$.loaders[0]"),  # a record missing its required fields
    (("samples", "n_workers"), [1, None], "$.samples.n_workers[1]"),  # None where the record says int
    (("host", "gpus"), [{"nvml_index": "0"}], "$.host.gpus[0]"),
    (("outcome", "exit_code"), 1.5, "$.outcome.exit_code"),
    (("cuda_used",), 1, "$.cuda_used"),  # an int is not a bool
    (("from_the_future",), 1, "$"),  # a field this version does not have
    (("schema",), SCHEMA_TUNE, None),  # a run file claiming to be a tune
])
def test_validate_catches_what_does_not_fit(path, value, where, jsonschema):
    data = run_dict()
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError) as err:
        schema.validate(data)
    if where is not None:
        assert err.value.json_path.startswith(where)


def test_validate_accepts_none_where_optional_and_picks_the_schema_by_tag(jsonschema):
    data = run_dict(summary=None, cuda_used=None)
    data["samples"]["main_cpu_pct"] = [None, 12.5]
    assert schema.validate(data) == SCHEMA_RUN
    trial = Trial(index=0, role="baseline", config={"num_workers": 0}, state="ok", run=Run(script="t.py"))
    tune = TuneResult(recommendation=Recommendation(framework="torch", config={"num_workers": 2}), trials=(trial,))
    assert schema.validate(to_dict(tune)) == SCHEMA_TUNE
    with pytest.raises(jsonschema.ValidationError):  # the trial's own run is checked as a run
        bad = to_dict(tune)
        bad["trials"][0]["run"]["argv"] = "not a list"
        schema.validate(bad)


@pytest.mark.parametrize("data,match", [
    ({"schema": "feedprof.run/999"}, "ships no schema for 'feedprof.run/999'"),
    ({"schema": "other/1"}, "not a feedprof schema tag"),
    ({"script": "x"}, "no \"schema\" field"),
    ([1, 2], "no \"schema\" field"),
])
def test_validate_refuses_unknown_versions(data, match):
    with pytest.raises(schema.UnknownSchema, match=match):
        schema.validate(data)


def test_missing_jsonschema_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "jsonschema", None)  # as if it were not installed
    with pytest.raises(ImportError, match=r"pip install jsonschema"):
        schema.validate(run_dict())


# ---------------------------------------------------- command line and suite


def test_command_line_validates_files(tmp_path, e2e):
    good = tmp_path / "good" / "run.json"
    good.parent.mkdir()
    good.write_text(json.dumps(run_dict()))
    bad_data = run_dict()
    bad_data["duration_s"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(bad_data))
    cmd = [sys.executable, "-m", "feedprof.store.schema"]
    ok = subprocess.run(cmd + [str(good)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and f"valid {SCHEMA_RUN}" in ok.stdout, ok.stderr
    fail = subprocess.run(cmd + [str(good), str(bad)], capture_output=True, text=True, timeout=60)
    assert fail.returncode == 1
    assert f"{bad}: invalid at $.duration_s: 'fast' is not of type 'number'" in fail.stderr
    bad.unlink()  # this test's own invalid file: not for the suite's check


def test_write_regenerates_the_records_files_and_leaves_others_alone(tmp_path):
    (tmp_path / "run-0.json").write_text("{}")  # another file (after a release: an older version's): left alone
    paths = schema.write(str(tmp_path))
    assert sorted(os.path.basename(p) for p in paths) == sorted(schema.current())
    assert (tmp_path / "run-0.json").read_text() == "{}"
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            assert json.load(fh) == schema.current()[os.path.basename(path)]


@pytest.mark.writes_invalid_json
def test_the_suite_check_finds_an_invalid_file(tmp_path):
    data = run_dict()
    data["window"]["end"] = 7
    (tmp_path / "trials" / "00-baseline").mkdir(parents=True)
    (tmp_path / "trials" / "00-baseline" / "result.json").write_text(json.dumps(data))
    (tmp_path / "spec.json").write_text('{"script": "not a feedprof record"}')
    (tmp_path / "junk.json").write_text("not json")
    problems = invalid_feedprof_json(tmp_path)
    assert len(problems) == 1 and f"result.json: not a valid {SCHEMA_RUN} file at $.window.end" in problems[0]
