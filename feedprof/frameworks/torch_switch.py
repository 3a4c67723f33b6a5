"""torch's DataLoader as a contract.Switcher, over its own online driver (torch_online.py):

    a map-style dataset   switched at any batch boundary: the epoch's index order is drawn
                          once, as the unmodified loader draws it, and every pool reads it
    an IterableDataset    switched only between epochs, and only with --allow-resharding: its
                          worker count decides what each worker yields, so an epoch's samples
                          (their batches, their order) follow it unless the dataset shards by a
                          fixed key. Within an epoch the pool that started it serves it all.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from feedprof.frameworks.contract import SwitchAllowed, Tuning
from feedprof.frameworks.torch_online import OnlineEpoch, OnlineLoader, online_capable
from feedprof.store.codes import Framework, SwitchAt
from feedprof.store.online import ITERABLE_RANKS


class TorchOnlineLoader(OnlineLoader):
    """torch_online.OnlineLoader as the contract's OnlineLoader."""

    framework = Framework.TORCH
    switch_at = SwitchAt.BATCH

    def epoch(self, own: Optional[Callable[[], Iterator]] = None) -> OnlineEpoch:
        return super().epoch()


class EpochSwitchedLoader(TorchOnlineLoader):
    """An IterableDataset's loader: a new config takes over only when an epoch starts."""

    switch_at = SwitchAt.EPOCH

    # Its epoch is what its workers yield: torch takes indices it never serves (the sampler is
    # endless) and skips a worker that ran out, so neither the order check nor the hand-back
    # accounting applies. Its samples follow the worker count, as --allow-resharding allowed and
    # the run says; no order is claimed for it.
    checks_order = False

    def epoch(self, own: Optional[Callable[[], Iterator]] = None) -> OnlineEpoch:
        ep = super().epoch(own)
        if _world_size() > 1:  # a replayed epoch would give this rank more steps than the others
            self.hold(ITERABLE_RANKS)
        return ep

    def replays_on_failure(self) -> Optional[int]:
        """A pool that failed mid-epoch took its place in the stream with it: the pool that takes
        over (the script's own settings) starts the dataset's iterator again, so the batches the
        loop had of this epoch come again (then the rest of it)."""
        return self.ledger.received if self.ledger is not None else 0

    def serve(self, config: Dict[str, Any]) -> Any:
        if self.pool is not None and self.pool_epoch == self.epochs:  # this epoch's pool serves it to its end
            config = self.pool.config
        return super().serve(config)


class TorchSwitcher:
    """contract.Switcher for torch.utils.data.DataLoader."""

    framework = Framework.TORCH

    def switch_capable(self, loader: Any, allowed: SwitchAllowed) -> Optional[str]:
        why_not = online_capable(loader)
        if why_not == "iterable_dataset" and allowed.resharding:
            # its first epoch runs as written, and persistent workers are held after it: never switched
            return "persistent_iterable" if loader.persistent_workers else _own_iterator(loader)
        return why_not

    def online_loader(self, loader: Any, tuning: Tuning, loader_id: int, script_config: Dict[str, Any],
                      chain: Tuple[str, ...], allowed: SwitchAllowed) -> TorchOnlineLoader:
        import torch.utils.data as tud

        cls = EpochSwitchedLoader if isinstance(loader.dataset, tud.IterableDataset) else TorchOnlineLoader
        return cls(loader, tuning, loader_id, script_config, chain=chain)


def _world_size() -> int:
    """The job's ranks: torch.distributed's, or, before it is set up, its launcher's (record/ranks.py
    reads torchrun, srun, MPI and Horovod alike)."""
    import os

    import torch.distributed as dist

    from feedprof.record.ranks import rank_from_env

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    info = rank_from_env(os.environ)
    return info.world_size if info is not None else 1


def _own_iterator(loader: Any) -> Optional[str]:
    import torch.utils.data as tud

    if type(loader)._get_iterator is not tud.DataLoader._get_iterator:
        return "own_iterator"  # a subclass with its own iterator (StatefulDataLoader)
    return None


SWITCHER = TorchSwitcher()
