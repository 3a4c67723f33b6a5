"""One evidence model (store/evidence.py, ranked by analyse/rules.py pick): a config's rate, its
measurements' spread and its failures, whether an offline trial or a stretch of the real run
measured it; and one pick over it."""
import pytest

from feedprof.analyse import measured, rules
from feedprof.store import ConfigEvidence, Role, TrialState
from feedprof.store.online import OnlineFailure
from feedprof.tune.online_strategy import RunHistory
from tests.records import make_trial
from tests.test_online_strategy import BASE, fastest, pick, window, with_workers, workers


def offline_pick(trials, cost, tol=rules.OFFLINE.pick_tolerance):
    """The pick (rules.pick) over each config's trials pooled (analyse/measured.py)."""
    return rules.pick([m.evidence for m in measured.measured_configs(trials)], cost, tol)

RATES = {0: 20.0, 2: 40.0, 8: 150.0, 12: 155.0, 16: 157.0}  # 12 and 16 within 3 % of each other


def online(rates, repeat=2):
    h = RunHistory(baseline=BASE)
    for t, (n, rate) in enumerate(rates.items()):
        h.windows += [window(with_workers(BASE, n), rate, 0.5, t=repeat * t + k) for k in range(repeat)]
    return h


def offline(rates, repeat=1):
    return [make_trial(i * repeat + k, Role.BASELINE if n == 0 else Role.SEARCH, with_workers(BASE, n),
                       TrialState.OK, batches_per_s=rate, data_wait_fraction=0.5)
            for i, (n, rate) in enumerate(rates.items()) for k in range(repeat)]


def cost(config):
    return (workers(config),)


def test_one_evidence_set_gives_one_pick_online_and_offline():
    h, trials = online(RATES), offline(RATES)
    run_side = h.evidence()
    trial_side = [m.evidence for m in measured.measured_configs(trials)]
    assert [e.config for e in run_side] == [e.config for e in trial_side]
    assert [e.rate for e in run_side] == pytest.approx([e.rate for e in trial_side])
    assert {e.source for e in run_side} == {"run"} and {e.source for e in trial_side} == {"trials"}
    assert pick(h) == offline_pick(trials, cost).config == with_workers(BASE, 12)
    assert fastest(h) == rules.fastest(trial_side).config == with_workers(BASE, 16)


def test_a_config_that_failed_is_never_picked_whoever_measured_it():
    h = online(RATES)
    h.failures.append(OnlineFailure(rank=0, config=with_workers(BASE, 12), kind="killed", error="", t_s=9.0))
    assert pick(h) == with_workers(BASE, 16)
    judged = [ConfigEvidence(config=e.config, rate=e.rate, rates=e.rates, measurements=e.measurements,
                             failed=workers(e.config) == 12) for e in h.evidence()]
    assert rules.pick(judged, cost, 0.03).config == with_workers(BASE, 16)


def test_noisy_windows_widen_the_online_tolerance_only_up_to_the_gain():
    """Windows that spread ±8 % make 150 b/s (8 workers) as good as 157 (16): the cheaper one.
    The offline rule on the same medians, at its fixed 3 %, keeps telling them apart."""
    h = RunHistory(baseline=BASE)
    for t, (n, rate) in enumerate(RATES.items()):
        h.windows += [window(with_workers(BASE, n), rate * f, 0.5, t=3 * t + k) for k, f in enumerate((0.92, 1, 1.08))]
    assert pick(h) == with_workers(BASE, 8)
    assert offline_pick(offline(RATES), cost).config == with_workers(BASE, 12)


def test_an_online_run_recommends_what_its_search_would_pick(tmp_path):
    """A run that ended before its search settled: its recommendation is the search's own pick, by
    the search's own tolerance (3 % here, with windows this tight), not a wider one of its own:
    12 workers, where 8 (150 b/s) is 4.5 % short of the fastest (157)."""
    from feedprof.store import HostInfo
    from feedprof.tune.online import Decider, OnlineOptions
    from feedprof.tune.online_result import online_result
    from tests.test_online_strategy import LIMITS

    decider = Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=OnlineOptions(), history=online(RATES))
    result = online_result("train.py", [], HostInfo(), "", 30.0, None, decider, None, complete=True)
    assert pick(decider.history) == with_workers(BASE, 12)
    assert result.recommendation.config == with_workers(BASE, 12)


def test_an_online_result_has_no_ceiling_trial_and_says_nothing_of_a_replayed_batch(tmp_path):
    """No batch is replayed in a real run: the ceiling (the step time when data is ready) is a
    figure of the recommendation, not a trial, and the report's table has no row that says
    "one cached batch replayed"."""
    from feedprof.render.html import render_tune
    from feedprof.render.words import CEILING_TEXT
    from feedprof.store import HostInfo
    from feedprof.tune.online import Decider, OnlineOptions
    from feedprof.tune.online_result import online_result
    from tests.test_online_strategy import LIMITS

    decider = Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=OnlineOptions(), history=online(RATES))
    result = online_result("train.py", [], HostInfo(), "", 30.0, None, decider, None, complete=True)
    assert Role.CEILING not in {t.role for t in result.trials}
    assert result.recommendation.ceiling_batches_per_s == pytest.approx(decider.history.ceiling())
    assert result.recommendation.fraction_of_ceiling is not None
    page = render_tune(result)
    assert CEILING_TEXT not in page and "trials in" not in page and "configs tried in the run" in page


def test_an_online_result_holds_each_configs_evidence_and_no_stand_in_trials(tmp_path):
    """The run's configs are saved as the evidence the recommendation was made from (one shape
    for both searches), not as trials whose figures were made up from windows; the report's
    table and chart are drawn from it, and the file reads back the same."""
    from feedprof.render import plots
    from feedprof.render.html import render_tune
    from feedprof.store import HostInfo, TuneResult
    from feedprof.store.codec import from_dict, to_dict
    from feedprof.tune.online import Decider, OnlineOptions
    from feedprof.tune.online_result import online_result
    from tests.test_online_strategy import LIMITS

    decider = Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=OnlineOptions(), history=online(RATES))
    result = online_result("train.py", [], HostInfo(), "", 30.0, None, decider, None, complete=True)
    assert result.trials == ()
    assert [workers(e.config) for e in result.evidence] == list(RATES)
    assert {e.source for e in result.evidence} == {"run"}
    assert [e.rate for e in result.evidence] == pytest.approx(list(RATES.values()))
    assert all(e.measurements == 2 and len(e.rates) == 2 for e in result.evidence)
    assert from_dict(TuneResult, to_dict(result)).evidence == result.evidence
    chart = plots.throughput_data(result)
    assert [b.value for b in chart.bars] == pytest.approx(list(RATES.values()))
    assert [workers(e.config) for e, b in zip(result.evidence, chart.bars) if b.picked] == [12]
    page = render_tune(result)
    assert "5 configs tried in the run" in page and "the script's own settings" in page


def test_an_offline_result_holds_the_same_evidence_its_recommendation_was_made_from():
    """Offline, each config's trials pooled (repeats too) into the record an online tune writes:
    the recommendation's figure is the evidence's, and its trial is the evidence's latest."""
    from feedprof.analyse.from_trials import TrialMeasurements
    from feedprof.analyse.recommend import recommend_from
    from feedprof.tune.space import TorchSpace

    trials = offline(RATES, repeat=2)
    space = TorchSpace(BASE, cpu_cap=2, max_primary=32, cuda_used=False)
    configs = TrialMeasurements(trials, space).configs()
    assert [e.measurements for e in configs] == [2] * len(RATES) and {e.source for e in configs} == {"trials"}
    rec = recommend_from(TrialMeasurements(trials, space), space)
    chosen = next(e for e in configs if e.config == rec.config)
    assert rec.batches_per_s == pytest.approx(chosen.figure) and rec.trial_index == chosen.trial_index
    assert workers(rec.config) == 12


def test_offline_evidence_marks_a_config_that_failed_and_keeps_one_that_never_measured():
    """results.json's evidence is every config the trials ran: one killed once and measured once
    is ``failed`` (it is never picked), one that only failed is there with no measurement."""
    trials = offline({0: 20.0, 4: 80.0})
    trials += [make_trial(2, Role.SEARCH, with_workers(BASE, 4), TrialState.KILLED),
               make_trial(3, Role.SEARCH, with_workers(BASE, 8), TrialState.KILLED)]
    by_workers = {workers(e.config): e for e in measured.evidence_of_trials(trials)}
    assert sorted(by_workers) == [0, 4, 8]
    assert not by_workers[0].failed and by_workers[4].failed and by_workers[4].rate == pytest.approx(80.0)
    assert by_workers[8].failed and by_workers[8].rate is None and by_workers[8].measurements == 0


def test_a_jobs_samples_per_batch_are_every_ranks():
    """A job's summary counts every rank's batch (its samples/s over its batches/s): the evidence
    keeps that, not one rank's batch size."""
    trial = make_trial(0, Role.BASELINE, BASE, TrialState.OK, batches_per_s=10.0, samples_per_s=640.0,
                       batch_size=32, batches_measured=100)
    e = measured.evidence_of_trials([trial])[0]
    assert e.samples_per_batch == pytest.approx(64.0)


def test_online_evidence_keeps_a_config_that_failed_before_its_first_window_and_draws_no_bar_for_it(tmp_path):
    from feedprof.render import plots
    from feedprof.render.html import evidence_table
    from feedprof.store import HostInfo
    from feedprof.tune.online import Decider, OnlineOptions
    from feedprof.tune.online_result import online_result
    from tests.test_online_strategy import LIMITS

    h = online(RATES)
    h.failures.append(OnlineFailure(rank=0, config=with_workers(BASE, 24), kind="killed", error="", t_s=11.0))
    decider = Decider(trial_dir=str(tmp_path), limits=LIMITS, opts=OnlineOptions(), history=h)
    result = online_result("train.py", [], HostInfo(), "", 30.0, None, decider, None, complete=True)
    last = result.evidence[-1]
    assert workers(last.config) == 24 and last.failed and last.measurements == 0 and last.rate is None
    assert plots.throughput_data(result).bars[-1].value is None
    assert "a worker was killed" in evidence_table(result)


def test_online_thread_workers_get_no_cpu_verdict_from_their_windows():
    """Keras thread workers run in the training process: their windows read no process of their
    own, so the space's rule says nothing (as offline, without the job's CPU)."""
    from feedprof.analyse.measurements import CpuUse
    from feedprof.tune.space_tf import KerasSpace

    space = KerasSpace({"workers": 1, "use_multiprocessing": False, "max_queue_size": 10}, cpu_cap=2,
                       max_primary=32, cuda_used=False)
    threads = {"workers": 8, "use_multiprocessing": False, "max_queue_size": 10}
    assert space.cpu_verdict(threads, CpuUse(workers_cores=0.0)) is None
    assert space.cpu_verdict({**threads, "use_multiprocessing": True}, CpuUse(workers_cores=0.4)) is False
