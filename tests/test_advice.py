"""A trainer's advice checked against the measurements, and threads against
processes (pure: recommendations made from trial records)."""
from feedprof.analyse.recommend import recommend
from feedprof.store.reasons import TrainerAdviceChecked, TrainerSuggestedWorkers, ThreadsVersusProcesses
from feedprof.render.words import say
from feedprof.store import Outcome, Phase, Role, Run, TrialState
from feedprof.tune.space import TorchSpace
from feedprof.tune.space_torchdata import NodesSpace
from tests.records import make_trial

LIGHTNING_SAID = TrainerSuggestedWorkers(trainer="lightning", loader="train_dataloader", num_workers=0, suggested=7)


def trial(space, index, role, config, rate, wait, rss=None, notes=()):
    run = Run(kind="trial", outcome=Outcome(state=TrialState.OK), notes=tuple(notes)) if role == Role.BASELINE else None
    return make_trial(index=index, role=role, phase=Phase.BASELINE if role == Role.BASELINE else Phase.LADDER,
                 config=space.legalize(config), state=TrialState.OK, batches_per_s=rate, batches_per_s_low=rate,
                 batches_per_s_high=rate, data_wait_fraction=wait, peak_rss_bytes=rss, run=run)


def advice_of(rec):
    return next(r for r in rec.reasons if isinstance(r, TrainerAdviceChecked))


def test_lightning_warning_borne_out_when_the_loop_waits():
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    trials = [trial(space, 0, Role.BASELINE, {"num_workers": 0}, 10.0, 0.8, notes=[LIGHTNING_SAID]),
              trial(space, 1, Role.CEILING, {"num_workers": 0}, 100.0, 0.0),
              trial(space, 2, Role.SEARCH, {"num_workers": 8}, 90.0, 0.1),
              trial(space, 3, Role.SEARCH, {"num_workers": 7}, 80.0, 0.1)]
    advice = advice_of(recommend(trials, space))
    assert advice.agrees and (advice.suggested, advice.picked_workers) == (7, 8)
    assert advice.suggested_batches_per_s == 80.0 and advice.picked_batches_per_s == 90.0
    words = say(advice)
    assert "measurements agree that the loader is the bottleneck (the loop waits 80 % of the time)" in words
    assert "num_workers=7 measured 80.0 batches/s" in words


def test_lightning_warning_not_borne_out_when_the_loop_does_not_wait():
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    trials = [trial(space, 0, Role.BASELINE, {"num_workers": 0}, 98.0, 0.01, notes=[LIGHTNING_SAID]),
              trial(space, 1, Role.CEILING, {"num_workers": 0}, 100.0, 0.0),
              trial(space, 2, Role.SEARCH, {"num_workers": 2}, 97.0, 0.01)]
    rec = recommend(trials, space)
    advice = advice_of(rec)
    assert rec.config["num_workers"] == 0 and not advice.agrees and advice.input_bound == "not"
    assert "do not bear it out: the loop waits for data 1 % of the time" in say(advice)


def test_no_trainer_warning_no_finding():
    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)
    trials = [trial(space, 0, Role.BASELINE, {"num_workers": 0}, 10.0, 0.8),
              trial(space, 1, Role.SEARCH, {"num_workers": 8}, 90.0, 0.1)]
    assert not [r for r in recommend(trials, space).reasons if isinstance(r, TrainerAdviceChecked)]


def test_threads_that_do_as_well_are_picked_with_the_memory_difference():
    space = NodesSpace({"num_workers": 1, "method": "process"}, cpu_cap=2, max_primary=32, cuda_used=False)
    mib = 1 << 20
    trials = [trial(space, 0, Role.BASELINE, {"num_workers": 1, "method": "process"}, 10.0, 0.9, rss=300 * mib),
              trial(space, 1, Role.SEARCH, {"num_workers": 16, "method": "process"}, 150.0, 0.2, rss=4000 * mib),
              trial(space, 2, Role.SEARCH, {"num_workers": 16, "method": "thread"}, 149.0, 0.2, rss=260 * mib)]
    rec = recommend(trials, space)
    assert rec.config == {"num_workers": 16, "method": "thread", "prefetch_factor": None}  # cheaper, as fast
    versus = next(r for r in rec.reasons if isinstance(r, ThreadsVersusProcesses))
    assert versus.threads_do_as_well and (versus.thread_rss_bytes, versus.process_rss_bytes) == (260 * mib, 4000 * mib)
    assert "threads do at least as well as processes (149 batches/s vs 150 batches/s)" in say(versus)
    assert "about 233.8 MiB per worker process" in say(versus)
    # a map function that holds the GIL: processes win, and the words say why
    trials[2] = trial(space, 2, Role.SEARCH, {"num_workers": 16, "method": "thread"}, 40.0, 0.8, rss=260 * mib)
    rec = recommend(trials, space)
    versus = next(r for r in rec.reasons if isinstance(r, ThreadsVersusProcesses))
    assert rec.config["method"] == "process" and not versus.threads_do_as_well
    assert "processes are 3.75× as fast as threads" in say(versus)
    # and the secondary step measures the other method at the best worker count
    assert space.secondary(trials[1], 0.03, trials)[0][0]["method"] == "thread"


def test_threads_against_processes_is_reported_when_the_deep_prefetch_wins():
    # the method is compared at the shallow prefetch, then prefetch 4 wins: the
    # finding still compares threads and processes at the pick's worker count
    space = NodesSpace({"num_workers": 1, "method": "process", "prefetch_factor": 2},
                       cpu_cap=2, max_primary=32, cuda_used=False)
    pf2, pf4 = {"prefetch_factor": 2}, {"prefetch_factor": 4}
    trials = [trial(space, 0, Role.BASELINE, {"num_workers": 1, "method": "process", **pf2}, 10.0, 0.9),
              trial(space, 1, Role.SEARCH, {"num_workers": 12, "method": "process", **pf2}, 100.0, 0.3),
              trial(space, 2, Role.SEARCH, {"num_workers": 12, "method": "thread", **pf2}, 120.0, 0.2),
              trial(space, 3, Role.SEARCH, {"num_workers": 12, "method": "thread", **pf4}, 150.0, 0.1)]
    rec = recommend(trials, space)
    assert rec.config == {"num_workers": 12, "method": "thread", "prefetch_factor": 4}
    versus = next(r for r in rec.reasons if isinstance(r, ThreadsVersusProcesses))
    assert (versus.workers, versus.thread_batches_per_s, versus.process_batches_per_s) == (12, 150.0, 100.0)
