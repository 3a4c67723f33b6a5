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
    proc = run_feedprof(["tune", script, "--out", str(out), "--budget", "60", "--max-workers", "4",
                         "--window-seconds", "1.5", "--min-window-batches", "40", "--warmup-batches", "2",
                         "--interval", "0.1", "--quiet"] + (["--allow-reorder"] if allow else []), timeout=300)
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
