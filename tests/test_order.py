"""What a recommendation changes beyond speed: the order of samples a seeded script sees
(tune/space_order.py). The claim itself is shown first, on a real DataLoader."""
import hashlib

import pytest

from feedprof.render.words import say
from feedprof.store import Framework
from feedprof.store.reasons import OrderChanges
from feedprof.store.run import LoaderRecord
from feedprof.tune.space_order import order_findings


def epoch_digests(torch, DataLoader, workers, persistent, rng, epochs=3):
    """A seeded script's order, one digest per epoch; ``rng`` is where its shuffle draws."""
    from torch.utils.data import RandomSampler

    torch.manual_seed(0)
    data = list(range(64))
    kwargs = {"shuffle": True}
    if rng == "loader":
        kwargs["generator"] = torch.Generator().manual_seed(0)
    elif rng == "sampler":
        kwargs = {"sampler": RandomSampler(data, generator=torch.Generator().manual_seed(0))}
    loader = DataLoader(data, batch_size=8, num_workers=workers, persistent_workers=persistent, **kwargs)
    out = []
    for _ in range(epochs):
        order = [int(i) for batch in loader for i in batch]
        assert sorted(order) == data  # every sample once, whatever the order
        out.append(hashlib.sha1(str(order).encode()).hexdigest()[:8])
    return out


@pytest.mark.parametrize("rng", ["global", "loader", "sampler"])
def test_persistent_workers_change_a_seeded_shuffle_from_the_second_epoch(rng, e2e, torch, DataLoader):
    """Measured: 0 or 2 workers give the same order; persistent workers give another from the second epoch on
    (A B C without, A D ... with) when the shuffle draws from the generator the iterator also draws the workers'
    seed from, once instead of every epoch. A sampler with its own generator keeps the order."""
    none = epoch_digests(torch, DataLoader, 0, False, rng)
    assert epoch_digests(torch, DataLoader, 2, False, rng) == none
    kept = epoch_digests(torch, DataLoader, 2, True, rng)
    assert kept[0] == none[0]
    if rng == "sampler":
        assert kept == none
    else:
        assert kept[1] != none[1]


def _loader(rng, script_config=None):
    return LoaderRecord(loader_id=0, framework=Framework.TORCH, site="train.py:12", shuffle_rng=rng,
                        script_config=script_config or {"num_workers": 0, "persistent_workers": False})


@pytest.mark.parametrize("rng,said", [("global", True), ("loader", True), ("sampler", False), ("", False)])
def test_a_pick_that_turns_on_persistent_workers_says_the_order_changes(rng, said):
    pick = {"num_workers": 4, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": False}
    found = order_findings(pick, _loader(rng))
    assert bool(found) == said
    if said:
        (finding,) = found
        assert finding == OrderChanges(knobs=("persistent_workers",), cause="persistent_workers", shuffle_rng=rng,
                                       site="train.py:12")
        words = say(finding)
        assert "order of samples changes from the second epoch on" in words and "train.py:12" in words
        assert "sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED))" in words
    # already persistent in the script, or no workers: nothing changes
    assert order_findings(pick, _loader(rng, {"num_workers": 2, "persistent_workers": True})) == []
    assert order_findings({**pick, "num_workers": 0, "persistent_workers": False}, _loader(rng)) == []


def test_out_of_order_delivery_is_said_whatever_the_shuffle():
    pick = {"num_workers": 4, "persistent_workers": False, "in_order": False}
    (finding,) = order_findings(pick, _loader(""))
    assert finding.cause == "in_order" and "in_order=False" in say(finding)


SLOW_TAIL = """
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RemoteReads(Dataset):
    # most reads take 2 ms; one in 64 takes 300 ms (a slow tail, as on remote storage)
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.3 if i % 64 == 0 else 0.002)
        return torch.zeros(4)


loader = DataLoader(RemoteReads(), batch_size=4, num_workers=0)
for epoch in range(10):
    for x in loader:
        time.sleep(0.003)
"""


@pytest.mark.serial
@pytest.mark.parametrize("allow", [False, True])
def test_in_order_false_is_measured_where_a_slow_tail_blocks_and_recommended_only_when_allowed(
        tmp_path, allow, no_leftovers, torch):
    """One read in 64 takes 150× the others: with in-order delivery every batch behind it waits (head-of-line
    blocking, which the wait shows: a few long waits). in_order=False is measured and its gain reported; it is
    the pick only with --allow-reorder, and then the advice says the order changes."""
    import json

    from feedprof.tune.space_order import supports_in_order
    from tests.conftest import run_feedprof, write_script

    if not supports_in_order():
        pytest.skip("this torch's DataLoader has no in_order (2.6 and later)")

    script = write_script(tmp_path, "train.py", SLOW_TAIL)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "60", "--max-workers", "4",
                         "--window-seconds", "1.5", "--min-window-batches", "40", "--warmup-batches", "2",
                         "--interval", "0.1", "--quiet"] + (["--allow-reorder"] if allow else []) + [script],
                        timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((out / "results.json").read_text())
    rec = res["recommendation"]
    reordered = [t for t in res["trials"] if t["config"].get("in_order") is False]
    assert reordered and all(t["role"] == ("search" if allow else "probe") for t in reordered if t["role"] != "confirm")
    (gain,) = [r for r in rec["reasons"] if r["code"] == "in_order_gain"]
    assert gain["allowed"] is allow
    assert gain["out_of_order_batches_per_s"] > 1.5 * gain["in_order_batches_per_s"]  # 2.5× here: unambiguous
    changes = [r for r in rec["reasons"] if r["code"] == "order_changes"]
    if allow:
        assert rec["config"]["in_order"] is False and "in_order=False" in rec["paste_line"]
        assert [c["cause"] for c in changes] == ["in_order"] and "The order of samples changes" in proc.stdout
    else:
        assert "in_order" not in rec["config"] and "in_order" not in rec["paste_line"] and not changes
        assert "recommended only with --allow-reorder" in proc.stdout


def test_in_order_is_a_knob_only_when_off_and_a_probe_unless_allowed():
    from feedprof.tune.space import TorchSpace

    space = TorchSpace({"num_workers": 0}, cpu_cap=2, max_primary=8, cuda_used=False)
    on = {"num_workers": 4, "persistent_workers": True}
    assert "in_order" not in space.legalize({**on, "in_order": True})
    assert "in_order" not in space.legalize({"num_workers": 0, "in_order": False})  # no workers: nothing to reorder
    assert space.key({**on, "in_order": False}) != space.key(on) == space.key({**on, "in_order": True})
    assert space.cost({**on, "in_order": False}) > space.cost(on)  # a tie keeps the order
    assert space.probe_only({**on, "in_order": False}) and not space.probe_only(on)
    space.allow_reorder = True
    assert not space.probe_only({**on, "in_order": False})
    assert "in_order=False" in space.describe({**on, "in_order": False})


class _Augmenting:
    """A dataset drawing its augmentation from a generator of its own (``self.rng``)."""

    def __init__(self, np):
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return float(self.rng.random())


def _draws_by_epoch(DataLoader, np, workers, persistent, epochs=2):
    loader = DataLoader(_Augmenting(np), batch_size=4, num_workers=workers, persistent_workers=persistent)
    return [[round(float(x), 6) for batch in loader for x in batch] for _ in range(epochs)]


def test_a_dataset_s_own_generator_repeats_in_fresh_workers_and_goes_on_in_persistent_ones(e2e, torch, DataLoader):
    """The claim the own_rng words make, on a real DataLoader: in the main process one stream runs
    over the whole run; 2 fresh workers start alike (batch 0 and batch 1, one from each, are equal)
    and start again every epoch; persistent workers go on from the second epoch; 4 workers give
    batch 2 other draws than 2 workers do (own_rng_workers)."""
    np = pytest.importorskip("numpy")
    main = _draws_by_epoch(DataLoader, np, 0, False)
    assert main[0] != main[1] and len(set(main[0])) == 16
    fresh = _draws_by_epoch(DataLoader, np, 2, False)
    assert fresh[0][:4] == fresh[0][4:8]  # the two workers' streams begin alike
    assert fresh[0] == fresh[1]  # every epoch the same draws again
    kept = _draws_by_epoch(DataLoader, np, 2, True)
    assert kept[0] == fresh[0] and kept[1] != kept[0]  # carried on from the second epoch
    four = _draws_by_epoch(DataLoader, np, 4, False)
    assert four[0][:4] == fresh[0][:4] and four[0][8:12] != fresh[0][8:12]  # batch 2: the third worker's first draws


def test_describe_names_the_generators_a_dataset_holds(torch, DataLoader):
    import random

    from feedprof.frameworks.torch import describe

    np = pytest.importorskip("numpy")
    assert describe(DataLoader(_Augmenting(np), batch_size=4)).own_rng == ("numpy.random.Generator",)
    both = _Augmenting(np)
    both.extra = {"py": random.Random(1), "torch": torch.Generator()}
    assert describe(DataLoader(both, batch_size=4)).own_rng == ("numpy.random.Generator", "random.Random",
                                                                "torch.Generator")
    assert describe(DataLoader(list(range(8)), batch_size=4)).own_rng == ()


@pytest.mark.parametrize("script_workers", [0, 2])
def test_a_pick_that_moves_or_keeps_a_dataset_s_own_generator_says_its_draws_change(script_workers):
    own = ("numpy.random.Generator",)
    script = {"num_workers": script_workers, "persistent_workers": False}
    loader = LoaderRecord(loader_id=0, framework=Framework.TORCH, site="train.py:12", own_rng=own,
                          script_config=script)
    persistent = {"num_workers": 4, "persistent_workers": True, "prefetch_factor": 2, "pin_memory": False}
    (finding,) = order_findings(persistent, loader)
    cause = "own_rng" if script_workers == 0 else "own_rng_workers"  # (the script's 2 workers: 4 is another count)
    assert finding == OrderChanges(knobs=("num_workers", "persistent_workers"), cause=cause, site="train.py:12",
                                   generators=own)
    words = say(finding)
    assert "numpy.random.Generator" in words and "train.py:12" in words
    if script_workers == 0:
        assert "draws in the main process" in words and "worker_init_fn" in words
        (fresh,) = order_findings({**persistent, "persistent_workers": False}, loader)
        assert fresh.knobs == ("num_workers",) and "start again from it every epoch" in say(fresh)
    else:
        assert "fall on other samples" in words and "carry on from the second epoch" in words
        (fresh,) = order_findings({**persistent, "persistent_workers": False}, loader)  # 2 -> 4 fresh workers
        assert fresh == OrderChanges(knobs=("num_workers",), cause="own_rng_workers", site="train.py:12",
                                     generators=own)
        assert "carry on" not in say(fresh)
        (kept,) = order_findings({**persistent, "num_workers": 2}, loader)  # the script's 2, now persistent
        assert kept.cause == "own_rng" and kept.knobs == ("persistent_workers",)
        assert "repeats the same stream" in say(kept)
        assert order_findings({**persistent, "num_workers": 2, "persistent_workers": False}, loader) == []
    back = order_findings({**persistent, "num_workers": 0, "persistent_workers": False}, loader)
    if script_workers == 0:
        assert back == []  # as written
    else:
        assert back == [OrderChanges(knobs=("num_workers",), cause="own_rng_main", site="train.py:12",
                                     generators=own)]
        assert "one stream over the whole run" in say(back[0])


OWN_RNG_IO = """
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class Crops(Dataset):
    def __init__(self):
        self.rng = np.random.default_rng(0)  # the crop offsets: a generator of the dataset's own

    def __len__(self):
        return 2048

    def __getitem__(self, i):
        time.sleep(0.004)  # a read from storage
        return torch.full((4,), float(self.rng.integers(0, 8)))


loader = DataLoader(Crops(), batch_size=4, num_workers=0)
for epoch in range(30):
    for x in loader:
        time.sleep(0.002)
"""


@pytest.mark.serial
def test_a_tune_that_moves_a_dataset_s_own_generator_into_workers_says_so(tmp_path, no_leftovers, torch):
    """An I/O-bound loader written with 0 workers whose dataset draws its crops from self.rng:
    the advice is more workers, and it says what that does to the draws (results.json and words)."""
    import json

    from tests.conftest import run_feedprof, write_script

    script = write_script(tmp_path, "train.py", OWN_RNG_IO)
    out = tmp_path / "out"
    proc = run_feedprof(["tune", "--out", str(out), "--budget", "45", "--max-workers", "8", script], timeout=300)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads((out / "results.json").read_text())["recommendation"]
    assert rec["config"]["num_workers"] >= 2, rec["config"]
    (own,) = [r for r in rec["reasons"] if r["code"] == "order_changes" and r["cause"] == "own_rng"]
    assert own["generators"] == ["numpy.random.Generator"] and own["knobs"][0] == "num_workers"
    assert "The dataset's random draws change with workers" in proc.stdout
