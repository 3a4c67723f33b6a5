"""feedprof tune --online on the shapes real training loops have (scripts_online.SEEDED's flags),
each run as written and under feedprof and compared: per-epoch digests of the indices and of the
batches' bytes, the weights, the next number of torch's, numpy's and Python's global streams.

Loading is sleep-bound (3 ms a sample, 2 ms a step): 0 workers wait ~95 % of the time, so
"more workers" is the only verdict the windows allow, whatever the machine's load."""
import pytest

from conftest import write_script
from online_runs import both, saw
from scripts_online import SEEDED

pytest.importorskip("torch")
pytestmark = pytest.mark.seeded_online


def _both(tmp_path, *args, extra=()):
    script = write_script(tmp_path, "train.py", SEEDED)
    (plain, want), (proc, got, results) = both(tmp_path, script, *args, extra=extra)
    assert plain.returncode == 0, plain.stderr
    assert proc.returncode == 0, proc.stderr
    return want, got, results, proc.stderr


def _target_checks(results):
    online_ = results["online"]
    return [c for c in online_["order_checks"] if c["loader_id"] == online_["target_loader_id"] and c["rank"] == 0]


@pytest.mark.parametrize("args", [["--zip", "--samples", "640", "--epochs", "4"], ["--probe", "10", "--epochs", "4"],
                                  ["--lazy-sampler", "--epochs", "4"]],
                         ids=["two_iterators_of_one_loader", "probe_batch_inside_the_loop", "lazy_sampler"])
def test_an_io_bound_loop_of_any_shape_sees_what_it_would_and_gets_workers(tmp_path, no_leftovers, args):
    """zip(loader, loader), a probe next(iter(loader)) every 10 steps, a batch sampler drawing each
    batch from torch's global RNG when it is taken (the loop drawing nothing): each stream is the
    script's own, every epoch checked, and the loader written with 0 workers is advised workers."""
    want, got, results, err = _both(tmp_path, *args)
    assert saw(got) == saw(want)
    checks = _target_checks(results)
    assert [c["epoch"] for c in checks] == [1, 2, 3, 4] and all(c["same"] and c["ended"] == "exhausted"
                                                                for c in checks), checks
    assert "the same samples in the same order as the run as written in epoch(s) 1–4" in err
    if "--lazy-sampler" not in args:  # the other iterators were torch's own, untouched
        assert checks[-1]["own_iterators"] >= 4 and "torch's own, with the script's settings, untouched" in err
    assert not results["online"]["holds"] and not results["online"]["randomness"]
    assert results["recommendation"]["config"]["num_workers"] >= 1, results["recommendation"]


def _carries(results):
    online_ = results["online"]
    return [c for c in online_["carries"] if c["loader_id"] == online_["target_loader_id"] and c["rank"] == 0]


def test_feedprofs_workers_serve_the_next_epochs_where_the_dataset_is_unchanged(tmp_path, no_leftovers):
    """Written with 0 workers (the loop waits ~95 %), no persistent workers: the pool feedprof starts
    serves the next epochs too, as persistent workers would, because the dataset is as its workers
    forked it (checked at every epoch start). The loop sees what it would; the advice is persistent
    workers, which is what the run measured."""
    want, got, results, err = _both(tmp_path, "--epochs", "6")
    assert saw(got) == saw(want)
    carries = _carries(results)
    assert [c["carried"] for c in carries] == [True], carries
    rec = results["recommendation"]["config"]
    assert rec["num_workers"] >= 1 and rec["persistent_workers"] is True, rec
    assert "persistent_workers_computed" in [r["code"] for r in results["recommendation"]["reasons"]]
    assert "the dataset was as they forked it" in err


@pytest.mark.parametrize("args", [["--curriculum"], ["--epoch-feature"]], ids=["curriculum", "global_epoch_counter"])
def test_a_dataset_changed_between_epochs_gets_fresh_workers_every_epoch(tmp_path, no_leftovers, args):
    """Written without persistent workers, a dataset the loop changes before each epoch (its level;
    a module-level epoch counter its code reads): a pool never serves an epoch with a state other
    than the one fresh workers would fork with. Each epoch's workers start anew, as written."""
    want, got, results, err = _both(tmp_path, *args, "--epochs", "4")
    assert saw(got) == saw(want)
    assert [(c["carried"], c["why"]) for c in _carries(results)] in ([], [(False, "dataset_changed")])


def test_persistent_workers_keep_the_dataset_they_started_with(tmp_path, no_leftovers):
    """A curriculum (dataset.level = epoch) with persistent workers as written: the script's own
    workers keep level 0; the loader is switched in its first epoch only and keeps the workers in
    force after it, so every epoch's batches are the run as written's."""
    want, got, results, err = _both(tmp_path, "--workers", "2", "--persistent", "--curriculum", "--epochs", "4")
    assert saw(got) == saw(want)
    online_ = results["online"]
    assert {s["config"]["num_workers"] for s in online_["switches"]} - {2}, online_["switches"]  # switched...
    holds = online_["holds"]
    assert [(h["why"], h["epoch"]) for h in holds] == [("persistent_first_epoch", 2)]  # ... in epoch 1 only
    assert all(s["t_s"] <= holds[0]["t_s"] for s in online_["switches"] if s["why"] != "held")
    assert all(c["same"] for c in _target_checks(results))
    assert "switched in its first epoch only" in err


@pytest.mark.parametrize("args, where, stream", [
    (["--augment"], "rng_loading", "torch"), (["--collate-mask"], "rng_loading", "numpy"),
    (["--own-rng"], "rng_loading", "own"), (["--lazy-sampler", "--loop-draws"], "rng_sampler", "torch")],
    ids=["dataset_draws_torch_rand", "collate_masks_with_numpy", "dataset_draws_its_own_generator",
         "lazy_sampler_and_mixup_in_the_loop"])
def test_a_loader_whose_switch_moves_random_draws_is_not_switched(tmp_path, no_leftovers, args, where, stream):
    """Draws in the main process at 0 workers (augmentation, a random mask in collate_fn), or a
    lazily drawing sampler while the loop draws too: seen before any switch, the loader keeps the
    script's settings, everything is as written, and the summary and the advice say why."""
    want, got, results, err = _both(tmp_path, *args)
    assert saw(got) == saw(want)
    online_ = results["online"]
    assert {s["config"]["num_workers"] for s in online_["switches"]} == {0}
    assert [(r["where"], r["streams"], r["moved_at_s"]) for r in online_["randomness"]] == [(where, [stream], None)]
    assert [h["why"] for h in online_["holds"]] == [where]
    assert all(c["same"] and not c["rng_moved"] for c in _target_checks(results))
    assert "the tuned loader was not switched" in err and "--allow-rng-change switches it anyway" in err
    rec = results["recommendation"]
    caveat = next(r for r in rec["reasons"] if r["code"] == "random_draws_move")
    assert caveat["held"] and caveat["predicted_workers"] >= 2, caveat
    # the advice is the count its own settings' wait predicts, marked predicted, with its paste line
    assert rec["verdict"]["kind"] == "predicted" and rec["predicted"] and rec["batches_per_s"] is None
    assert rec["config"]["num_workers"] == caveat["predicted_workers"]
    n = caveat["predicted_workers"]
    assert f"num_workers={n}" in rec["paste_line"] or f"--workers {n}" in rec["paste_line"], rec["paste_line"]
    assert "held at num_workers=0" in err and "--allow-rng-change lets the run try" in err  # said as it happened


def test_allow_rng_change_switches_and_says_what_changed(tmp_path, no_leftovers):
    """With --allow-rng-change the augmenting loader is switched: its draws move into the workers,
    so from then on nothing is claimed as the run as written's, and the summary says what moved."""
    want, got, results, err = _both(tmp_path, "--augment", "--epochs", "4", extra=["--allow-rng-change"])
    assert got["epochs"][0] == want["epochs"][0]  # epoch 1's order was drawn before the switch ...
    assert got["epochs"][1:] != want["epochs"][1:] and got["weights"] != want["weights"]  # ... the rest follows
    online_ = results["online"]
    moved = online_["randomness"][0]
    assert moved["allowed"] and moved["moved_at_s"] is not None and not online_["holds"]
    assert all(c["same"] and c["rng_moved"] for c in _target_checks(results))  # the sampler's order, moved stream
    assert "randomness moved at" in err and "as the run as written in epoch" not in err
    assert results["recommendation"]["config"]["num_workers"] >= 2
    assert any(r["code"] == "random_draws_move" and r["moved"] for r in results["recommendation"]["reasons"])


def test_draws_that_begin_after_the_first_switch_are_seen_and_said(tmp_path, no_leftovers):
    """Augmentation switched on from epoch 3 (a schedule), at 0 workers: nothing drew before the
    first switch, so the loader was switched; the workers' draws show the loading's draws left the
    script's process: the run falls back to its own settings, and from then on nothing is claimed."""
    want, got, results, err = _both(tmp_path, "--augment", "--augment-from", "2", "--epochs", "4")
    assert got["epochs"][:3] == want["epochs"][:3]  # the orders drawn before the draws moved
    online_ = results["online"]
    seen = online_["randomness"]
    assert [(r["where"], r["streams"]) for r in seen] == [("rng_loading", ["torch"])] and seen[0]["moved_at_s"]
    assert [h["why"] for h in online_["holds"]] == ["rng_loading"]
    checks = _target_checks(results)
    assert all(c["same"] for c in checks) and [c["rng_moved"] for c in checks] == [False, False, True, True]
    assert "randomness moved at" in err and "epoch(s) 1–2 (checked batch by batch" in err


def test_a_loop_that_breaks_out_of_its_epochs_is_advised_workers(tmp_path, no_leftovers):
    """`if step + 1 == steps: break` every epoch (100 of 150 batches): each epoch is checked as far
    as the loop went, no window spans the start of the next epoch's workers (charged once, as
    start-up), and the loader written with 0 workers (the loop waits ~94 % of its time, 3.4 s an
    epoch; workers that take up to 1 s to start still halve it) is advised workers."""
    args = ("--steps", "100", "--epochs", "6", "--samples", "2400", "--fetch-ms", "2")
    want, got, results, err = _both(tmp_path, *args)
    assert saw(got) == saw(want)
    checks = _target_checks(results)
    assert len(checks) == 6 and all(c["same"] and c["ended"] == "left" and c["delivered_batches"] == 100
                                    for c in checks), checks
    assert results["recommendation"]["config"]["num_workers"] >= 2, results["recommendation"]


def test_a_torch_that_changed_falls_back_to_the_scripts_settings(tmp_path, no_leftovers):
    """A stand-in for a torch whose iterator reads its sampler once more when its workers stop
    (harmless as written): at the first switch torch's counts and feedprof's disagree, the batch it
    took is served anyway, the epoch is not claimed, and the run keeps the script's settings."""
    want, got, results, err = _both(tmp_path, "--workers", "1", "--torch-changed")
    assert saw(got) == saw(want)
    online_ = results["online"]
    assert [h["why"] for h in online_["holds"]] == ["check_failed"]
    assert "took" in online_["holds"][0]["detail"]
    checks = _target_checks(results)
    assert not checks[0]["same"] and checks[0]["problem"] and all(c["same"] for c in checks[1:])
    assert "a check failed" in err and "epoch 1 failed its check" in err
    assert any(r["code"] == "switching_stopped" for r in results["recommendation"]["reasons"])


def test_augmentation_in_the_scripts_own_workers_is_said_once_it_moved(tmp_path, no_leftovers):
    """Workers written as 2 that draw augmentation (torch.rand in __getitem__): switching changes
    which worker stream draws for which sample, as any other worker count would; the samples and
    their order stay the run as written's, and the summary says the augmented values moved."""
    want, got, results, err = _both(tmp_path, "--workers", "2", "--augment")
    assert got["epochs"] == want["epochs"] and got["next_rand"] == want["next_rand"]
    assert got["batches"] != want["batches"]  # the augmented values
    online_ = results["online"]
    assert [(r["where"], r["streams"]) for r in online_["randomness"]] == [("rng_workers", ["torch"])]
    assert online_["randomness"][0]["moved_at_s"] is not None and not online_["holds"]
    assert all(c["same"] and not c["rng_moved"] for c in _target_checks(results))
    assert "randomness moved at" in err and "the samples and their order do not" in err
