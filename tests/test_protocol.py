"""The files parent and trial child exchange: the spec, the events, --loader sites."""
import json

from feedprof.trial.protocol import Mode, TrialSpec, read_events, site_matches


def test_spec_round_trip_keeps_the_mode_typed():
    spec = TrialSpec(script="/x/t.py", argv=["--a"], result_path="r", events_path="e", origin_s=1.5,
                     window_batches=10, window_seconds=2.0, min_window_batches=3, warmup_batches=1,
                     mode=Mode.CEILING, inject={"num_workers": 4}, target_chain=["t.py:3"])
    back = TrialSpec.from_json(spec.to_json())
    assert back == spec and back.mode is Mode.CEILING
    assert json.loads(spec.to_json())["mode"] == "ceiling"


def test_events_are_read_incrementally_and_a_partial_line_waits(tmp_path):
    path = tmp_path / "events.jsonl"
    assert read_events(str(path)) == ([], 0)  # not written yet
    path.write_text('{"event": "started"}\n{"event": "loa')
    events, offset = read_events(str(path))
    assert events == [{"event": "started"}]
    with open(path, "a") as fh:
        fh.write('der"}\nnot json\n{"event": "first_batch"}\n')
    events, offset = read_events(str(path), offset)
    assert events == [{"event": "loader"}, {"event": "first_batch"}]  # a broken line is skipped
    assert read_events(str(path), offset) == ([], offset)


def test_site_matches_a_frame_by_its_tail():
    chain = ("/home/me/proj/train.py:40", "data/loaders.py:12")
    assert site_matches("train.py:40", chain)
    assert site_matches("loaders.py:12", chain)
    assert site_matches("/abs/elsewhere/data/loaders.py:12", chain)
    assert not site_matches("train.py:41", chain)
    assert not site_matches("ain.py:40", chain)  # a file name is matched whole
