"""Beyond the knobs on hand-built records: where a batch's time goes (analyse/batch_time.py), which
part binds and what each remedy predicts (analyse/beyond.py), and their words."""
import pytest

from feedprof.analyse.batch_time import StepAlone, batch_time, profile_batch_time, step_parts
from feedprof.analyse.beyond import explain_gap
from feedprof.analyse.measurements import CpuUse
from feedprof.render.words import say
from feedprof.render.words.beyond import batch_time_words
from feedprof.store import (BatchTime, ConfigEvidence, LoaderRecord, LoadingLine, LoadingProfile, Run, StepLog,
                            Summary, TimePart, Window)
from feedprof.store.reasons import GapExplained, PartNotMeasured, Remedy


def steps(n, wall_s, wait_s, cpu_s=None):
    return StepLog(t_end_s=tuple((i + 1) * wall_s for i in range(n)), n_steps=(1,) * n, wait_s=(wait_s,) * n,
                   wall_s=(wall_s,) * n, cpu_s=(cpu_s,) * n if cpu_s is not None else ())


def run_of(log, config, main_cpu_pct=None, main_runq_pct=None, in_flight=0):
    rec = LoaderRecord(loader_id=0, framework="torch", config=config, steps=log, in_flight=in_flight)
    return Run(loaders=(rec,), window=Window(loader_id=0), summary=Summary(main_cpu_pct=main_cpu_pct,
                                                                           main_runq_pct=main_runq_pct))


def test_the_parts_add_up_to_a_batch_and_say_what_they_are():
    """20 ms a batch: 6 ms in __next__ of which 2 ms the loop's own CPU, a 14 ms step whose 10 ms
    is the step alone: 4 ms slower beside the workers."""
    run = run_of(steps(100, 0.020, 0.006, 0.002), {"num_workers": 4})
    t = batch_time(run, "pick", StepAlone(s=0.010, source="ceiling"))
    parts = {p.name: p.s for p in t.parts}
    assert t.batch_s == pytest.approx(0.020) and sum(parts.values()) == pytest.approx(t.batch_s)
    assert parts == pytest.approx({"blocked": 0.004, "loop_loading": 0.002, "step_alone": 0.010, "slowdown": 0.004})
    words = batch_time_words(t)
    assert "20.0 ms a batch = 4.0 ms waiting for the workers + 2.0 ms receiving batches" in words
    assert "the step alone as the compute ceiling's replay ran it" in words


def test_the_slowdown_is_told_apart_by_the_training_process_cpu_and_its_wait_for_a_cpu():
    """Beside the workers the training process used 0.6 cores (12 ms CPU a 20 ms batch, 2 ms of it
    in __next__) and waited for a CPU 0.1 cores (2 ms); alone its step took 8 ms CPU, 0 waiting."""
    run = run_of(steps(100, 0.020, 0.006, 0.002), {"num_workers": 4}, main_cpu_pct=60, main_runq_pct=10)
    alone = StepAlone(s=0.010, source="ceiling", cpu_s=0.008, runq_s=0.0)
    t = batch_time(run, "pick", alone)
    parts = {p.name: p.s for p in t.parts}
    assert parts["slowdown_runq"] == pytest.approx(0.002)  # waited for a CPU
    assert parts["slowdown_cpu"] == pytest.approx(0.002)  # step CPU 10 ms against 8 alone
    assert parts["slowdown_wait"] == pytest.approx(0.0, abs=1e-9)
    assert t.seconds("slowdown") == pytest.approx(0.004)


def test_a_step_no_slower_than_alone_has_no_negative_slowdown():
    run = run_of(steps(50, 0.010, 0.002), {"num_workers": 2})
    t = batch_time(run, "pick", StepAlone(s=0.009, source="ceiling"))
    assert t.seconds("step_alone") == pytest.approx(0.008) and t.seconds("slowdown") == 0.0


def test_noise_is_half_the_range_over_the_chunks():
    walls = (0.010,) * 50 + (0.014,) * 50
    log = StepLog(t_end_s=tuple(sum(walls[:i + 1]) for i in range(100)), n_steps=(1,) * 100,
                  wait_s=(0.0,) * 100, wall_s=walls)
    f = step_parts(log)
    assert f["spread"]["batch"] == pytest.approx(0.002)


def test_a_profile_at_0_workers_has_its_step_alone_and_with_workers_says_it_has_not():
    at0 = profile_batch_time(run_of(steps(60, 0.030, 0.025, 0.020), {"num_workers": 0}))
    assert at0.step_alone_from == "no_workers" and at0.seconds("slowdown") == pytest.approx(0.0)
    with_workers = profile_batch_time(run_of(steps(60, 0.030, 0.005), {"num_workers": 4}, in_flight=8))
    assert with_workers.seconds("step") == pytest.approx(0.025) and with_workers.step_alone_from == ""


def pick_time(**parts):
    return BatchTime(config={"num_workers": 8, "pin_memory": False}, role="pick",
                     batch_s=sum(parts.values()), parts=tuple(TimePart(k, v) for k, v in parts.items()),
                     step_alone_from="ceiling")


def profile(lines, calls=100, cpu_share=0.9):
    wall = sum(w for _, _, w, _ in lines)
    return LoadingProfile(dataset="Images", calls=calls, wall_s=wall, cpu_s=cpu_share * wall, sampled_s=wall,
                          interval_s=0.02, processes=8, in_main=False, sampler_cpu_s=0.1,
                          lines=tuple(LoadingLine(site=s, function=f, wall_s=w, cpu_s=c) for s, f, w, c in lines))


def test_a_loader_whose_code_computes_and_fills_the_cpus_names_its_costliest_lines():
    t = pick_time(blocked=0.010, loop_loading=0.001, step_alone=0.009, slowdown=0.0)
    p = profile([("data.py:42", "decode", 6.0, 5.7), ("data.py:50", "augment", 3.0, 2.8), ("data.py:30", "read", 1.0, 0.1)])
    out = explain_gap([t], p, True, None, [], 1 / 0.009, None, 16)
    gap = next(r for r in out if isinstance(r, GapExplained))
    assert gap.bound == "cores" and gap.fraction_short == pytest.approx(0.55)
    lines = [r for r in out if isinstance(r, Remedy) and r.kind == "cheaper_line"]
    assert [r.site for r in lines] == ["data.py:42", "data.py:50"]
    # the loader's CPU a batch is 0.09 s; without decode's 0.057 s the supply would be 2.7x (capped by the ceiling)
    assert lines[0].predicted_batches_per_s == pytest.approx(1 / 0.009)
    assert lines[1].predicted_batches_per_s == pytest.approx(50 * 0.09 / (0.09 - 0.028), rel=1e-3)
    assert "Make data.py:42 (decode) cheaper" in say(lines[0], "torch")


def test_a_step_waiting_for_a_cpu_beside_the_workers_is_contention_and_cores_of_its_own_are_predicted():
    t = pick_time(blocked=0.001, step_alone=0.010, slowdown_runq=0.006, slowdown_cpu=0.001, slowdown_wait=0.0)
    out = explain_gap([t], None, False, CpuUse(workers_cores=4.0, main_cores=0.9), [], 1 / 0.010, None, 16)
    gap = next(r for r in out if isinstance(r, GapExplained))
    assert gap.bound == "contention"
    (own,) = [r for r in out if isinstance(r, Remedy)]
    assert own.kind == "own_cores" and own.predicted_batches_per_s == pytest.approx(1 / 0.012)


def test_predictions_are_capped_by_what_the_cpus_allow():
    """The job already uses 1.95 of 2 cores: taking the slowdown away cannot run it faster than the
    cores compute its loading and its step."""
    t = pick_time(blocked=0.001, step_alone=0.010, slowdown_runq=0.009, slowdown_cpu=0.0, slowdown_wait=0.0)
    out = explain_gap([t], None, True, CpuUse(workers_cores=1.2, main_cores=0.75), [], 1 / 0.010, None, 2)
    assert not [r for r in out if isinstance(r, Remedy)]  # 2 / (1.95 x 0.020) = 51.3: a 3 % gain at most
    uncapped = explain_gap([t], None, True, CpuUse(workers_cores=1.2, main_cores=0.75), [], 1 / 0.010, None, 16)
    assert [r.kind for r in uncapped if isinstance(r, Remedy)] == ["own_cores"]


def test_a_gpu_job_whose_step_waits_on_neither_is_told_pinned_memory_and_a_smaller_copy():
    class Space:
        cuda_used = True

    t = pick_time(blocked=0.004, loop_loading=0.001, step_alone=0.014, slowdown_runq=0.0, slowdown_cpu=0.002,
                  slowdown_wait=0.004)
    out = explain_gap([t], None, False, None, [], 1 / 0.014, Space(), 16)
    assert next(r for r in out if isinstance(r, GapExplained)).bound == "step_waits"
    kinds = [(r.kind, r.config.get("pin_memory")) for r in out if isinstance(r, Remedy)]
    assert kinds == [("pin_memory", True), ("smaller_copy", False)]


def test_a_measured_toggle_of_pin_memory_is_said_as_measured():
    t = pick_time(blocked=0.001, step_alone=0.010, slowdown_runq=0.0, slowdown_cpu=0.006, slowdown_wait=0.0)
    measured = ConfigEvidence(config={"num_workers": 8, "pin_memory": True}, rate=30.0, rates=(30.0,), measurements=1)
    out = explain_gap([t], None, False, None, [measured], None, None, 16)
    pin = next(r for r in out if isinstance(r, Remedy) and r.kind == "pin_memory")
    assert pin.measured_batches_per_s == 30.0 and "measured 30.0 batches/s" in say(pin, "torch")


def test_where_the_step_alone_was_not_measured_it_says_so_and_no_guess_is_made():
    t = BatchTime(config={"num_workers": 8}, role="pick", batch_s=0.02,
                  parts=(TimePart("blocked", 0.005), TimePart("step", 0.015)))
    out = explain_gap([t], None, None, None, [], None, None, 16)
    assert any(isinstance(r, PartNotMeasured) and r.part == "step_alone" for r in out)
    text = " ".join(say(r, "torch") for r in out)
    assert "what remains" not in text and "cost of loading itself" not in text


def test_cores_of_its_own_are_cores_the_workers_lose():
    """2 cores, the training process using 0.75 of one, 4 workers using 0.9 at 30.8 batches/s:
    with a core kept for the training process the workers have one left, which supplies at most
    1 / (0.9 / 30.8) = 34.2 batches/s, not the 1 / (32.5 - 9.1 ms) = 42.8 the slowdown alone predicts
    (measured: 5 % faster, benchmarks/stages.py)."""
    t = BatchTime(config={"num_workers": 4}, role="pick", batch_s=1 / 30.8,
                  parts=(TimePart("blocked", 0.0014), TimePart("loop_loading", 0.0009), TimePart("step_alone", 0.0207),
                         TimePart("slowdown_runq", 0.0091), TimePart("slowdown_cpu", 0.0), TimePart("slowdown_wait", 0.0)),
                  step_alone_from="ceiling")
    out = explain_gap([t], None, False, CpuUse(workers_cores=0.9, main_cores=0.75), [], 47.3, None, 2)
    (own,) = [r for r in out if isinstance(r, Remedy)]
    assert own.predicted_batches_per_s == pytest.approx(30.8 / 0.9, rel=1e-6)
