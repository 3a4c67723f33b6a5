"""What a recommendation reports, on hand-built trials: the pick's figure from
the window that confirmed it (not the best of those it was chosen on), the
stopwatch rate of a window, the time between epochs charged to trials that
never crossed a boundary, and who used the CPUs."""
import dataclasses

import pytest

from feedprof.analyse.measured import score, sustained

from feedprof.analyse.recommend import recommend
from feedprof.store import LoaderRecord, Phase, Role, TrialState, Window
from feedprof.tune.space import TorchSpace
from tests.records import make_trial

SPACE = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=32, cuda_used=False)


def trial(index, n, rate, role=Role.SEARCH, phase=Phase.LADDER, sustained_rate=None, **fields):
    return make_trial(index=index, role=role, phase=phase, config=SPACE.legalize({"num_workers": n}),
                      state=TrialState.OK, batches_per_s=rate, batches_per_s_low=0.95 * rate,
                      batches_per_s_high=1.05 * rate, sustained_batches_per_s=sustained_rate, **fields)


def test_the_picks_figure_comes_from_its_confirmation_window():
    """Chosen at 114 (the best of noisy windows), confirmed at 93: the figure
    and the speedup are the confirmation's, and the words say so."""
    trials = [trial(0, 0, 50.0, Role.BASELINE, Phase.BASELINE), trial(1, 0, 200.0, Role.CEILING, Phase.CEILING),
              trial(2, 2, 114.0), trial(3, 4, 100.0), trial(4, 2, 93.0, Role.CONFIRM, Phase.CONFIRM)]
    rec = recommend(trials, SPACE)
    assert rec.config["num_workers"] == 2
    assert rec.batches_per_s == pytest.approx(93.0)
    assert rec.speedup == pytest.approx(93.0 / 50.0)
    figures = next(r for r in rec.reasons if r.code == "pick_figures")
    assert figures.confirm_windows == 1 and figures.chosen_at_batches_per_s == pytest.approx(103.5)


def test_a_pick_never_confirmed_says_its_figure_is_the_one_it_was_chosen_on():
    trials = [trial(0, 0, 50.0, Role.BASELINE, Phase.BASELINE), trial(1, 2, 114.0)]
    figures = next(r for r in recommend(trials, SPACE).reasons if r.code == "pick_figures")
    assert figures.confirm_windows == 0 and figures.batches_per_s == pytest.approx(114.0)


def test_figures_are_the_stopwatch_rate_ranking_is_the_median_of_chunks():
    """A window with one slow hiccup: chunks' median 100, batches over wall time 90."""
    t = trial(0, 2, 100.0, sustained_rate=90.0)
    assert score(t) == pytest.approx(100.0)
    assert sustained(t) == pytest.approx(90.0)


def with_epochs(t, batches_per_epoch):
    loader = LoaderRecord(loader_id=0, framework="torch", batches_per_epoch=batches_per_epoch)
    run = dataclasses.replace(t.run, loaders=(loader,), window=Window(loader_id=0))
    return dataclasses.replace(t, run=run)


def test_the_time_between_epochs_is_charged_per_epoch():
    """500-batch epochs at 180 batches/s (2.78 s) and 2.7 s of validation
    between epochs, measured by another trial: the figure halves."""
    t = with_epochs(trial(0, 32, 180.0, sustained_rate=180.0), 500)
    charged = dataclasses.replace(t, epoch_gap_s=2.7)
    assert score(t) == pytest.approx(180.0)
    assert score(charged) == pytest.approx(500 / (500 / 180.0 + 2.7))
    assert sustained(charged) == pytest.approx(500 / (500 / 180.0 + 2.7))
    assert score(dataclasses.replace(trial(0, 32, 180.0), epoch_gap_s=2.7)) == pytest.approx(180.0)  # no epoch known


def test_the_cpu_findings_say_who_used_the_cpus():
    trials = [trial(0, 0, 10.0, Role.BASELINE, Phase.BASELINE),
              trial(1, 8, 60.0, workers_cpu_pct=40.0, main_cpu_pct=150.0, other_cpu_cores=0.1)]
    idle = next(r for r in recommend(trials, SPACE).reasons if r.code == "workers_leave_cpu_idle")
    assert (idle.workers_cores, idle.main_cores, idle.other_cores) == (0.4, 1.5, 0.1)


def test_the_speedup_is_from_windows_measured_side_by_side():
    """The machine got busier: the script's own settings read 50 at the start and
    40 beside the pick's confirmation (93): the speedup is 93 / 40."""
    trials = [trial(0, 0, 50.0, Role.BASELINE, Phase.BASELINE), trial(1, 2, 114.0),
              trial(2, 2, 93.0, Role.CONFIRM, Phase.CONFIRM), trial(3, 0, 40.0, Role.CONFIRM, Phase.CONFIRM)]
    rec = recommend(trials, SPACE)
    assert rec.baseline_batches_per_s == pytest.approx(40.0)
    assert rec.speedup == pytest.approx(93.0 / 40.0)
