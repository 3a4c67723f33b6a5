"""The DataLoader patch beside another tool's: a wrapper of DataLoader.__init__ written as
(*args, **kwargs) without functools.wraps hides the knobs from the signature feedprof binds.
The loader is then observed with the settings it took, and nothing is injected (it used to
raise KeyError: 'num_workers' inside the script's own DataLoader(...) call)."""
from typing import Any, List

import torch
from torch.utils.data import DataLoader

from feedprof.frameworks.contract import LoaderHandle, Plan
from feedprof.frameworks.torch import patch_loader_class


class FakeController:
    """What patch_loader_class asks of a controller: every loader is the target, given 2 workers."""

    def __init__(self) -> None:
        self.created_infos: List[Any] = []

    def user_chain(self, caller: Any, direct: bool = True) -> tuple:
        return ("train.py:1",)

    def plan(self, framework: str, caller: Any) -> Plan:
        return Plan(framework=framework, chain=("train.py:1",), is_target=True, inject={"num_workers": 2},
                    replay=False)

    def created(self, plan: Plan, info: Any, loader: Any = None) -> LoaderHandle:
        self.created_infos.append(info)
        return LoaderHandle(plan=plan, info=info, ref=None)

    def iterate(self, handle: LoaderHandle, make_iter: Any) -> Any:
        return make_iter()


def _hiding_wrapper(cls: type) -> type:
    orig = cls.__init__

    def __init__(self, *args, **kwargs):  # another tool's, as the independent harness writes it
        orig(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def test_knobs_hidden_by_another_wrapper_are_observed_not_injected():
    cls = _hiding_wrapper(type("Wrapped", (DataLoader,), {}))
    ctl = FakeController()
    patch_loader_class(cls, ctl)
    loader = cls(torch.arange(8), batch_size=4, num_workers=0)
    assert loader.num_workers == 0  # nothing injected: the knobs could not be bound
    assert ctl.created_infos[0].script_config["num_workers"] == 0
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_visible_knobs_are_injected():
    cls = type("Plain", (DataLoader,), {})
    ctl = FakeController()
    patch_loader_class(cls, ctl)
    loader = cls(torch.arange(8), batch_size=4, num_workers=0)
    assert loader.num_workers == 2
    assert ctl.created_infos[0].script_config["num_workers"] == 0
