"""Findings about where the advice applies and what it changes beyond speed
(the lines a tf.data pipeline sets its knobs on; the order of samples; an
IterableDataset's samples, which follow the worker count)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional, Tuple

from feedprof.store.reasons.base import Config, Reason


@dataclass(frozen=True)
class SetInPipeline(Reason):
    """tf.data: ``knob`` is set where the pipeline is built (``sites``: the lines of the calls that set it), not
    at the loop or fit that iterates it (``loader_site``); ``added``: the pipeline does not set it, and the paste
    adds it to the statement at ``sites[0]``."""

    code: ClassVar[str] = "set_in_pipeline"
    knob: str = ""
    sites: Tuple[str, ...] = ()
    loader_site: str = ""
    added: bool = False


@dataclass(frozen=True)
class OrderChanges(Reason):
    """The recommended ``knobs`` change the order of samples the script sees (or its random streams).
    ``cause``: "persistent_workers" (the loader's iterator, and its one draw of the workers' seed from the
    generator the sampler shuffles with, is made once instead of every epoch: the order changes from the
    second epoch on), "in_order" (batches are handed over as they are ready), "own_rng" (persistent workers
    carry on the random ``generators`` the dataset holds, where each epoch's fresh workers started from the
    main process's copy: the dataset's draws change from the second epoch on), "own_rng_workers" (another
    worker count: batches go to the workers in turn, so each gets another worker's copy's draws), "own_rng_main"
    (0 workers where the script had some: one stream in the main process). ``shuffle_rng``: where the
    loader at ``site`` draws its order (LoaderRecord.shuffle_rng)."""

    code: ClassVar[str] = "order_changes"
    knobs: Tuple[str, ...] = ()
    cause: str = ""
    shuffle_rng: str = ""
    site: str = ""
    generators: Tuple[str, ...] = ()


@dataclass(frozen=True)
class InOrderGain(Reason):
    """``in_order=False`` measured at ``config`` (the other settings): its throughput against in-order
    delivery's there, and whether it may be recommended (``allowed``: the user passed ``--allow-reorder``)."""

    code: ClassVar[str] = "in_order_gain"
    config: Config = field(default_factory=dict)
    in_order_batches_per_s: Optional[float] = None
    out_of_order_batches_per_s: Optional[float] = None
    allowed: bool = False


@dataclass(frozen=True)
class SamplesFollowWorkers(Reason):
    """An IterableDataset (``dataset``) decides what each worker yields: at another worker count an epoch's
    samples, their batches and their order change, unless the dataset shards by a fixed key. Online it is
    switched only between epochs and only with --allow-resharding (``switched``: its worker count changed in
    the run); the advice changes them the same way."""

    code: ClassVar[str] = "samples_follow_workers"
    dataset: str = ""
    switched: bool = False
