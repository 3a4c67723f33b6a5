"""frameworks/torch_carry.py: the fingerprint that lets an online pool serve the next epoch
only where a worker forked then would see the same dataset."""
import functools

import numpy as np
import pytest

from feedprof.frameworks.torch_carry import ARRAY_BYTES, ITEMS, state_fingerprint

torch = pytest.importorskip("torch")


class Images(torch.utils.data.Dataset):
    def __init__(self):
        self.level = 0
        self.files = [f"img{i}.jpg" for i in range(10_000)]
        self.labels = np.zeros(10_000, dtype=np.int64)
        self.mean = torch.zeros(3)
        self.transform = functools.partial(np.clip, a_min=0, a_max=1)

    def __len__(self):
        return len(self.files)


class Scale:
    __slots__ = ("factor",)

    def __init__(self, factor):
        self.factor = factor


def _changes(mutate, make=Images):
    ds = make()
    before = state_fingerprint(ds, None, None)
    assert state_fingerprint(ds, None, None) == before  # (the same state, the same fingerprint)
    mutate(ds)
    return state_fingerprint(ds, None, None) != before


@pytest.mark.parametrize("mutate", [
    lambda ds: setattr(ds, "level", 1),  # a curriculum
    lambda ds: ds.files.append("new.jpg"),  # a dataset that grows
    lambda ds: ds.files.__setitem__(ITEMS - 1, "other.jpg"),  # an item among those hashed
    lambda ds: ds.labels.__setitem__(5, 3),  # an array changed in place
    lambda ds: ds.mean.add_(1),  # a tensor changed in place (its version counter)
    lambda ds: setattr(ds, "transform", functools.partial(np.clip, a_min=0, a_max=2)),  # a partial's keywords
    lambda ds: setattr(ds, "extra", {"epoch": 2}),  # a new attribute
], ids=["attribute", "grown_list", "list_item", "array", "tensor", "partial", "new_attribute"])
def test_a_change_a_fresh_worker_would_see_changes_the_fingerprint(mutate):
    assert _changes(mutate)


def test_objects_it_holds_are_followed_through_subsets_slots_and_closures():
    ds = Images()
    sub = torch.utils.data.Subset(ds, [1, 2, 3])
    before = state_fingerprint(sub, None, None)
    ds.level = 3  # the wrapped dataset's state
    assert state_fingerprint(sub, None, None) != before

    scale = Scale(1.0)
    collate = (lambda batch: [x * scale.factor for x in batch])
    before = state_fingerprint(ds, collate, None)
    scale.factor = 2.0  # a value the collate_fn captured, in a __slots__ object
    assert state_fingerprint(ds, collate, None) != before


def test_a_large_array_is_hashed_by_its_ends_and_costs_no_copy():
    big = np.zeros(4 * ARRAY_BYTES // 8, dtype=np.float64)
    before = state_fingerprint(big)
    big[len(big) // 2] = 1.0  # (its middle is not read: the one change it cannot see)
    assert state_fingerprint(big) == before
    big[-1] = 1.0
    assert state_fingerprint(big) != before


def test_a_cyclic_or_huge_structure_ends_the_walk():
    a = {"self": None, "items": list(range(100_000))}
    a["self"] = a
    assert state_fingerprint(a) == state_fingerprint(a)


EPOCH = {"n": 0}


class ReadsAGlobal(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return i + EPOCH["n"]  # a counter the loop sets each epoch: fresh workers fork with its value


def test_a_module_level_value_the_datasets_code_reads_is_part_of_its_state():
    ds = ReadsAGlobal()
    before = state_fingerprint(ds, None, None)
    EPOCH["n"] = 1
    try:
        assert state_fingerprint(ds, None, None) != before
    finally:
        EPOCH["n"] = 0
