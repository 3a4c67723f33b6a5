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


class Level:
    def __init__(self):
        self.level = 0

    def apply(self, x):
        return x * self.level


@pytest.mark.parametrize("before,after", [
    (lambda x: x - 1, lambda x: x + 1),  # one lambda for another
    (functools.partial(np.clip, a_min=0), functools.partial(np.tanh)),  # a partial's function
    (np.tanh, np.sin),  # one ufunc for another
    (abs, round),  # one builtin for another
], ids=["lambda", "partial_func", "ufunc", "builtin"])
def test_a_transform_swapped_for_another_changes_the_fingerprint(before, after):
    ds = Images()
    ds.transform = before
    first = state_fingerprint(ds, None, None)
    ds.transform = after
    assert state_fingerprint(ds, None, None) != first


def test_a_bound_methods_object_is_followed():
    ds, cur = Images(), Level()
    ds.transform = cur.apply
    before = state_fingerprint(ds, None, None)
    cur.level = 3
    assert state_fingerprint(ds, None, None) != before


def test_a_value_read_from_the_users_own_module_is_part_of_the_state(tmp_path):
    import importlib.util

    (tmp_path / "cfg_mod.py").write_text("EPOCH = 0\nMODEL = object()\n")
    (tmp_path / "ds_mod.py").write_text(
        "import cfg_mod\n\nclass DS:\n    def __getitem__(self, i):\n        return i + cfg_mod.EPOCH\n")
    import sys
    sys.path.insert(0, str(tmp_path))
    try:
        spec = importlib.util.spec_from_file_location("ds_mod", tmp_path / "ds_mod.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        import cfg_mod
        ds = mod.DS()
        before = state_fingerprint(ds, None, None)
        cfg_mod.MODEL = object()  # (not read by the dataset's code: not its state)
        assert state_fingerprint(ds, None, None) == before
        cfg_mod.EPOCH = 4
        assert state_fingerprint(ds, None, None) != before
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("cfg_mod", None)


@pytest.mark.parametrize("make_rng", [
    lambda: np.random.default_rng(0), lambda: np.random.RandomState(0), lambda: torch.Generator().manual_seed(0),
    lambda: __import__("random").Random(0),
], ids=["numpy_generator", "random_state", "torch_generator", "python_random"])
def test_a_generator_of_its_own_rules_out_carrying(make_rng):
    from feedprof.frameworks.torch_carry import OWN_RNG, state_of

    ds = Images()
    assert state_of(ds, None, None).why_not == ""
    ds.aug = {"rng": make_rng()}
    assert state_of(ds, None, None).why_not == OWN_RNG


def test_more_state_than_the_walk_covers_rules_out_carrying():
    from feedprof.frameworks.torch_carry import STATE_UNSEEN, state_of

    ds = Images()
    ds.annotations = [{"boxes": [[i, i, i, i] for i in range(40)], "id": k} for k in range(64)]  # a COCO-like index
    assert state_of(ds, None, None).why_not == STATE_UNSEEN
    deep = Images()
    node = deep
    for _ in range(8):
        node.child = Level()
        node = node.child
    assert state_of(deep, None, None).why_not == STATE_UNSEEN


def test_an_object_the_walk_cannot_read_vouches_for_nothing_and_raises_nothing():
    from feedprof.frameworks.torch_carry import STATE_UNSEEN, state_of

    class Odd(Images):
        @property
        def __dict__(self):  # (a lazy proxy whose attributes raise)
            raise RuntimeError("not loaded")

    assert state_of(Odd(), None, None).why_not == STATE_UNSEEN
    assert state_of(Odd()).generators == ()
