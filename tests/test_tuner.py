"""The tuner's time budget, trial limits, rejection and resume, on a fake clock
with a fake trial runner (the real runner is exercised end to end in
test_cli_tune.py and test_faults.py)."""
import dataclasses
import os

import pytest

from feedprof.store.reasons import (BudgetCutShort, KeepScriptSettings, NothingTried, OutOfMemoryKilled,
                                    OverMemoryBudget, ShortOfCeiling)
from feedprof.store import (EpochLog, HostInfo, LoaderRecord, Outcome, Phase, Role, Run, Summary, TrialState, TuneResult,
                            Window)
from feedprof.tune.budget import MemoryBudget
from feedprof.trial.protocol import Mode
from feedprof.tune.machine import MachineFacts
from feedprof.tune.job import TuneError, TuneJob, TuneOptions
from feedprof.tune.time_budget import FINISH_RESERVE_S, TIMEOUT_OVER_BUDGET_S
from feedprof.tune.tuner import Tuner
from tests.fakes import FakeClock
from feedprof.render.words import say

SITE = "train.py:5"
MACHINE = MachineFacts(host=HostInfo(cpus_usable=2, cpus_online=2), cpus_usable=2, ram_bytes=16 * 2**30,
                       shm_bytes=4 * 2**30)  # not this machine's: the tests' own


def io_bound_rate(config):
    """Workers wait on I/O: 10 batches/s each, 400 at most (the ceiling)."""
    n = config.get("num_workers") or 0
    return 400.0 if n is None else min(400.0, 10.0 + 30.0 * n)


class FakeRunner:
    """Stands in for runner.run_trial: every trial takes ``trial_s`` on the fake clock."""

    def __init__(self, clock, trial_s=10.0, rate=io_bound_rate):
        self.clock, self.trial_s, self.rate = clock, trial_s, rate
        self.calls = []

    def __call__(self, script, argv, trial_dir, host, opts, what, on_poll, clock):
        assert clock is self.clock
        self.calls.append((what, opts))
        self.clock.advance(self.trial_s)
        config = {"num_workers": 0} if what.mode == Mode.OBSERVE else what.config
        rate = 400.0 if what.mode == Mode.CEILING else self.rate(config)
        loader = LoaderRecord(loader_id=0, framework="torch", site=SITE, call_chain=(SITE,), config=config,
                              batches=100, batches_per_epoch=10_000, batch_size=8)
        summary = Summary(batches_per_s=rate, batches_per_s_low=0.97 * rate, batches_per_s_high=1.03 * rate,
                          data_wait_fraction=max(0.0, 1 - rate / 400.0), main_cpu_pct=5.0,
                          workers_cpu_pct=2.0 * (config.get("num_workers") or 0), system_cpu_pct=10.0)
        return Run(kind="trial", loaders=(loader,), window=Window(loader_id=0), outcome=Outcome(),
                   duration_s=self.trial_s, summary=summary, cuda_used=False)


def tuner(tmp_path, clock, runner, previous=None, **opts):
    options = TuneOptions(fork_trials=False, **{"budget_s": 1000.0, **opts})
    job = TuneJob(script=str(tmp_path / "train.py"), out_dir=str(tmp_path / "out"), previous=previous)
    return Tuner(job, options, MACHINE, clock=clock, trial_runner=runner)


@pytest.fixture
def clock():
    return FakeClock(1000.0)


def test_a_tune_of_an_io_bound_script_finishes_within_its_budget(tmp_path, clock):
    runner = FakeRunner(clock)
    result = tuner(tmp_path, clock, runner).run()
    assert result.complete and result.stop_reason is None
    assert result.recommendation.config["num_workers"] >= 8
    assert result.duration_s == pytest.approx(10.0 * len(result.trials))  # the fake clock's, no real sleeping
    assert [t.phase for t in result.trials[:3]] == [Phase.BASELINE, Phase.CEILING, Phase.LADDER]


def test_the_budget_cuts_the_search_short_before_a_trial_it_cannot_afford(tmp_path, clock):
    result = tuner(tmp_path, clock, FakeRunner(clock), budget_s=35.0).run()
    # baseline, ceiling, 2 workers: 30 s; 5 s left is less than 0.8 of a 10 s trial
    assert [t.role for t in result.trials] == [Role.BASELINE, Role.CEILING, Role.SEARCH]
    assert result.complete is False
    assert result.stop_reason == BudgetCutShort(budget_s=35.0, next_config=result.stop_reason.next_config,
                                                climbing=True, needed_s=result.stop_reason.needed_s)
    assert result.stop_reason.next_config["num_workers"] > 2
    assert result.recommendation.config["num_workers"] == 2  # it still recommends from what it measured
    # the climb was still gaining: said, with the budget its next rung, a refinement and a confirmation need
    # (30 s spent + 3 trials of 10 s + 5 s to finish, rounded up to 10 s)
    assert result.stop_reason.needed_s == 70.0
    words = say(result.stop_reason, "torch")
    assert "while more workers still paid off" in words and "--budget 70 gives it the next rung" in words, words


def test_a_budget_that_runs_out_before_a_confirmation_says_the_config_was_not_measured_again(tmp_path, clock):
    """Cut before re-measuring a config (the pick's figure windows, say), the words do not
    say the search stopped short of trying it: it was tried, not confirmed."""
    full = tuner(tmp_path / "full", clock, FakeRunner(clock)).run()
    k = next(i for i, t in enumerate(full.trials) if t.role == Role.CONFIRM)
    cut = tuner(tmp_path / "cut", clock, FakeRunner(clock), budget_s=10.0 * k + 5.0).run()
    assert len(cut.trials) == k and cut.stop_reason.again
    assert cut.stop_reason.next_config == full.trials[k].config
    words = say(cut.stop_reason, "torch")
    assert "was measured again" in words and "cut the search short" not in words
    assert not cut.stop_reason.climbing and cut.stop_reason.needed_s is None


def test_a_window_only_the_figures_would_gain_from_is_left_out_without_cutting_the_tune_short(tmp_path, clock):
    whole = tuner(tmp_path / "whole", clock, FakeRunner(clock)).run()
    assert [t.phase for t in whole.trials[-2:]] == [Phase.REPORT, Phase.REPORT]  # the script's own, the pick again
    # a budget with room for every trial but that last window (10 s, +2 s for its longer window)
    budget_s = FINISH_RESERVE_S + 10.0 * (len(whole.trials) - 1) + 10.0
    result = tuner(tmp_path / "short", clock, FakeRunner(clock), budget_s=budget_s).run()
    assert len(result.trials) == len(whole.trials) - 1
    assert result.complete and result.stop_reason is None
    assert result.recommendation.config == whole.recommendation.config


def test_trial_time_limits(tmp_path, clock):
    runner = FakeRunner(clock, trial_s=10.0)
    tuner(tmp_path, clock, runner, budget_s=100.0).run()
    limits = [opts.timeout_s for _, opts in runner.calls]
    assert limits[0] == 100.0  # the baseline may take the whole budget (at least 60 s)
    assert limits[1] == 40.0  # later ones: 4 x the baseline's 10 s (at least 30 s)
    left_s = 100.0 - FINISH_RESERVE_S - 10.0 * (len(limits) - 1)  # and what is left, with little more
    assert limits[-1] == pytest.approx(max(TIMEOUT_OVER_BUDGET_S, left_s + TIMEOUT_OVER_BUDGET_S))


def test_a_config_predicted_over_the_memory_budget_is_rejected_not_run(tmp_path, clock):
    runner = FakeRunner(clock)
    t = tuner(tmp_path, clock, runner)
    t.memory = MemoryBudget(ram_bytes=10 * 2**30, shm_bytes=None, main_bytes=2**30, per_worker_bytes=2**30)
    result = t.run()
    rejected = [tr for tr in result.trials if tr.state == TrialState.REJECTED]
    assert rejected and all(isinstance(tr.cause, OverMemoryBudget) for tr in rejected)
    assert all(tr.config["num_workers"] > 6 for tr in rejected)  # (1 + 7 x 1) GiB x 1.3 > 10 GiB
    assert len(runner.calls) == len(result.trials) - len(rejected)


def test_resume_tells_the_saved_trials_and_asks(tmp_path, clock):
    first = tuner(tmp_path, clock, FakeRunner(clock), budget_s=35.0).run()
    runner = FakeRunner(clock)
    saved = TuneResult(**{**{f.name: getattr(first, f.name) for f in dataclasses.fields(first)}})
    again = tuner(tmp_path, clock, runner, previous=saved, budget_s=1000.0).run()
    assert again.trials[:3] == first.trials  # kept, not re-run
    first_new = runner.calls[0][0]
    assert first_new.mode == Mode.INJECT and first_new.config == first.stop_reason.next_config
    assert again.duration_s == pytest.approx(10.0 * len(again.trials))  # the first run's time counts
    said = [repr(n) for n in again.notes]
    assert len(set(said)) == len(said)  # the strategy's notes are derived again, not repeated
    assert first.notes and all(repr(n) in said for n in first.notes if n.code != "busy_machine")


class KillingRunner(FakeRunner):
    """The OOM killer takes any config with ``killed_from`` workers or more; the
    script's own loader asks for ``own`` workers."""

    def __init__(self, clock, killed_from, own):
        super().__init__(clock)
        self.killed_from, self.own = killed_from, own

    def __call__(self, script, argv, trial_dir, host, opts, what, on_poll, clock):
        run = super().__call__(script, argv, trial_dir, host, opts, what, on_poll, clock)
        config = {"num_workers": self.own} if what.mode == Mode.OBSERVE else what.config
        if what.mode == Mode.CEILING or (config.get("num_workers") or 0) < self.killed_from:
            return dataclasses.replace(run, loaders=(dataclasses.replace(run.loaders[0], config=config),))
        loader = dataclasses.replace(run.loaders[0], config=config, batches=1)
        return dataclasses.replace(run, loaders=(loader,), summary=Summary(), outcome=Outcome(
            state=TrialState.KILLED, cause=OutOfMemoryKilled(signal="SIGKILL"), exit_code=-9))


def test_a_tune_goes_on_when_the_scripts_own_workers_are_killed(tmp_path, clock):
    result = tuner(tmp_path, clock, KillingRunner(clock, killed_from=6, own=8)).run()
    base = result.trials[0]
    assert base.state == TrialState.KILLED and base.config["num_workers"] == 8
    assert result.complete and result.recommendation.config["num_workers"] == 5  # the best that survived
    assert result.recommendation.verdict.kind == "survives"
    assert result.recommendation.verdict.baseline_state == "killed"
    assert max(t.config["num_workers"] for t in result.trials[1:]) < 8


def test_a_tune_where_nothing_survives_ends_as_the_baseline_did(tmp_path, clock):
    with pytest.raises(TuneError) as err:
        tuner(tmp_path, clock, KillingRunner(clock, killed_from=0, own=4)).run()
    assert err.value.reason.state == "killed" and isinstance(err.value.reason.cause, OutOfMemoryKilled)
    assert err.value.exit_code == 1


def test_the_tuner_works_within_the_machine_facts_it_is_given(tmp_path, clock, monkeypatch):
    def read_the_machine(*args, **kwargs):
        raise AssertionError("the tuner read this machine itself")

    for name in ("usable_cpu_count", "local_world_size", "machine_info"):
        monkeypatch.setattr(f"feedprof.record.host.{name}", read_the_machine)
    facts = dataclasses.replace(MACHINE, cpus_usable=8, local_world_size=2)
    job = TuneJob(script=str(tmp_path / "train.py"), out_dir=str(tmp_path / "out"))
    t = Tuner(job, TuneOptions(fork_trials=False, budget_s=100.0), facts, clock=clock, trial_runner=FakeRunner(clock))
    assert t.cpu_cap == 4 and t.memory.ram_bytes == facts.ram_bytes and t.memory.shm_bytes == facts.shm_bytes
    assert t.run().host == facts.host


class CrossingRunner(FakeRunner):
    """The confirmation's long window crosses an epoch boundary and sees 2 s
    of validation between epochs (1000-batch epochs); no other trial does."""

    def __call__(self, script, argv, trial_dir, host, opts, what, on_poll, clock):
        run = super().__call__(script, argv, trial_dir, host, opts, what, on_poll, clock)
        crossed = opts.window_batches > TuneOptions().window_batches and what.mode != Mode.CEILING
        epochs = EpochLog(t_start_s=(0.0, 5.0), n_epochs=(1, 1), first_batch_s=(0.1, 0.1), n_batches=(1000, 10),
                          between_s=(2.0,), n_between=(1,)) if crossed else EpochLog()
        loader = dataclasses.replace(run.loaders[0], batches_per_epoch=1000, epochs=epochs)
        rate = run.summary.batches_per_s  # one that crossed has the time between epochs in its figures
        loop_rate = 1000 / (1000 / rate + 2.0) if crossed else None
        summary = dataclasses.replace(run.summary, effective_batches_per_s=loop_rate, sustained_batches_per_s=loop_rate)
        return dataclasses.replace(run, loaders=(loader,), summary=summary)


def test_the_time_between_epochs_one_trial_saw_is_charged_to_every_trial(tmp_path, clock):
    result = tuner(tmp_path, clock, CrossingRunner(clock)).run()
    ran = [t for t in result.trials if t.run is not None]
    crossed = [t for t in ran if t.run.loaders[0].epochs.n_between]
    assert crossed and all(t.epoch_gap_s is None for t in crossed)  # each counts what it saw itself
    assert all(t.epoch_gap_s == 2.0 for t in ran if t not in crossed)  # the rest are charged it
    base = result.trials[0]  # 10 batches/s: a 1000-batch epoch takes 100 s, then 2 s of validation
    assert result.recommendation.baseline_batches_per_s == pytest.approx(1000 / (100 + 2), rel=0.01)
    assert base.epoch_gap_s == 2.0


def test_a_tune_writes_its_files_and_prints_its_recommendation(tmp_path, monkeypatch, clock):
    """app.run_tune around the tuner (fake trials): results.json, report.html, the words."""
    import io

    from feedprof import app

    real = app.Tuner
    monkeypatch.setattr(app, "Tuner", lambda job, options, machine, observer=None: real(
        job, options, MACHINE, observer=observer, clock=clock, trial_runner=FakeRunner(clock)))
    out = io.StringIO()
    job = TuneJob(script=str(tmp_path / "train.py"), out_dir=str(tmp_path / "out"))
    result = app.run_tune(job, TuneOptions(fork_trials=False, budget_s=200.0),
                          app.Outputs(progress=False, out=out, err=io.StringIO()))
    assert result is not None and result.recommendation is not None
    assert (tmp_path / "out" / "results.json").exists() and (tmp_path / "out" / "report.html").exists()
    assert "Recommendation for" in out.getvalue() and "Paste this" in out.getvalue()


def test_a_tune_whose_budget_ran_out_before_any_setting_says_nothing_was_tried(tmp_path, monkeypatch, clock):
    """Only the script's own settings and the ceiling fit the budget: the words say that
    nothing was tried and which budget would try something, never that the script's own
    settings were the best found. The suggested budget is the one the search needs."""
    import io
    import json

    from feedprof import app
    from feedprof.render.words import headline, say

    real = app.Tuner
    monkeypatch.setattr(app, "Tuner", lambda job, options, machine, observer=None: real(
        job, options, MACHINE, observer=observer, clock=clock, trial_runner=FakeRunner(clock)))
    out = io.StringIO()
    job = TuneJob(script=str(tmp_path / "train.py"), out_dir=str(tmp_path / "out"))
    # baseline 10 s, ceiling 10 s; then 30 - 5 (reserve) - 20 = 5 s left, less than a 10 s trial
    result = app.run_tune(job, TuneOptions(fork_trials=False, budget_s=30.0),
                          app.Outputs(progress=False, out=out, err=io.StringIO()))
    assert [t.role for t in result.trials] == [Role.BASELINE, Role.CEILING]
    rec = result.recommendation
    assert rec.verdict.kind == "nothing_tried" and rec.input_bound == "highly"
    # spent 20 s, + 2 rungs of 10 s, + the 5 s reserve = 45 s, rounded up
    assert NothingTried(budget_s=30.0, spent_s=20.0, ceiling=True, trial_s=10.0, rungs=2, needed_s=50.0,
                        budget_ran_out=True) in rec.reasons
    assert not any(isinstance(x, (KeepScriptSettings, ShortOfCeiling)) for x in rec.reasons)
    words = out.getvalue()
    assert "no loader setting tried does better" not in words and "already the best found" not in words
    assert headline(rec.verdict, "torch") in words and "no loader setting was tried" in headline(rec.verdict)
    said = say(next(x for x in rec.reasons if isinstance(x, NothingTried)))
    assert said in words
    assert said.startswith("The 30 s budget ran out before any loader setting was tried: the script's own "
                           "settings and the compute ceiling took 20.0 s, and a trial of one setting takes about "
                           "10.0 s. Give --budget 50 to try at least the worker ladder's first 2 rungs")
    # no paste (it would be the script's own settings), and the budget said once, not again as a note
    assert rec.paste_line == "" and "Paste this" not in words and "No line to paste" not in words
    assert "cut the search short" not in words and words.count("budget") == 2  # "ran out", "Give --budget"
    saved = json.loads((tmp_path / "out" / "results.json").read_text())["recommendation"]
    assert saved["verdict"]["kind"] == "nothing_tried"
    assert {"code": "nothing_tried", "budget_s": 30.0, "spent_s": 20.0, "ceiling": True, "trial_s": 10.0,
            "rungs": 2, "needed_s": 50.0, "budget_ran_out": True} in saved["reasons"]

    # The budget it names tries the ladder's first rungs.
    again = tuner(tmp_path / "again", clock, FakeRunner(clock), budget_s=50.0).run()
    assert len([t for t in again.trials if t.role == Role.SEARCH]) >= 2
    assert again.recommendation.verdict.kind == "faster"
    assert not any(isinstance(x, NothingTried) for x in again.recommendation.reasons)


def test_a_tune_that_tried_nothing_because_there_was_nothing_to_try_keeps_its_words(tmp_path, clock):
    """The baseline at the ceiling: a complete tune with nothing to try is not 'nothing tried'.
    Its pick is the script's own settings: said, and nothing to paste."""
    from feedprof.render.progress import format_recommendation

    result = tuner(tmp_path, clock, FakeRunner(clock, rate=lambda config: 400.0)).run()
    assert result.complete and result.recommendation.verdict.kind != "nothing_tried"
    assert not any(isinstance(x, NothingTried) for x in result.recommendation.reasons)
    assert any(isinstance(x, KeepScriptSettings) for x in result.recommendation.reasons)
    assert result.recommendation.paste_line == ""
    words = format_recommendation(result.recommendation, result)
    assert "already the best found" in words and "Paste this" not in words


def test_a_connection_reset_between_ranks_is_measured_again_not_held_against_the_config(tmp_path, clock):
    """gloo's "Connection reset by peer" in one rank of a job's trial: the infrastructure's. The config
    is measured once more, the first attempt set aside with its files and said, and the search goes on
    as if it had not happened (the same trials as a tune where no connection was lost)."""
    from feedprof.store.reasons import RankFailed, RanksLostConnection, ScriptFailed

    class LosesOneConnection(FakeRunner):
        lost = False

        def __call__(self, script, argv, trial_dir, host, opts, what, on_poll, clock):
            run = super().__call__(script, argv, trial_dir, host, opts, what, on_poll, clock)
            os.makedirs(trial_dir)
            if what.mode == Mode.INJECT and not self.lost:
                self.lost = True
                error = "Traceback ...\nConnectionResetError: [Errno 104] Connection reset by peer"
                return dataclasses.replace(run, outcome=Outcome(state=TrialState.FAILED, cause=RankFailed(
                    rank=0, cause=ScriptFailed(error=error))))
            return run

    clean = tuner(tmp_path / "clean", clock, FakeRunner(clock)).run()
    lossy = tuner(tmp_path / "lossy", clock, LosesOneConnection(clock)).run()
    assert [t.config for t in lossy.trials] == [t.config for t in clean.trials]
    assert all(t.state == TrialState.OK for t in lossy.trials)
    assert lossy.recommendation.config == clean.recommendation.config
    lost = [n for n in lossy.notes if isinstance(n, RanksLostConnection)]
    assert len(lost) == 1 and lost[0].rank == 0 and "Connection reset by peer" in lost[0].error
    assert os.path.isdir(lost[0].trial_dir) and lost[0].trial_dir.endswith("02-search-connection-lost")
    words = say(lost[0], "torch")
    assert "measured again" in words and "the infrastructure's, not the config's" in words, words
