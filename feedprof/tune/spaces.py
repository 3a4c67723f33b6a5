"""Every framework's search space, by the framework its loader is (tune/space.py says what a
space answers; space_tf.py and space_torchdata.py build on it)."""
from __future__ import annotations

from typing import Optional

from feedprof.store import Framework
from feedprof.tune.space import Config, Space, TorchSpace
from feedprof.tune.space_ray_data import RayDataSpace
from feedprof.tune.space_tf import KerasSpace, TfDataSpace, TfKerasSpace
from feedprof.tune.space_torchdata import NodesSpace


def make_space(framework: Framework, baseline: Config, cpu_cap: int, max_primary: int,
               cuda_used: Optional[bool]) -> Space:
    spaces = {Framework.TORCH: TorchSpace, Framework.KERAS: KerasSpace, Framework.TF_KERAS: TfKerasSpace,
              Framework.TF_DATA: TfDataSpace, Framework.TORCHDATA_NODES: NodesSpace, Framework.RAY_DATA: RayDataSpace}
    try:
        cls = spaces[framework]
    except KeyError:
        raise ValueError(f"feedprof cannot tune {framework!r} loaders yet") from None
    return cls(baseline, cpu_cap, max_primary, cuda_used)
