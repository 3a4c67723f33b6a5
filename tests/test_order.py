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
