"""The words for where the advice applies and what it changes beyond speed
(store/reasons/advice.py): the lines a tf.data pipeline sets its knobs on, and
a recommendation that changes the order of samples. The package (render/words/__init__.py) merges
``words()`` into its table."""
from __future__ import annotations

from typing import Any, Callable, Dict

from feedprof.store import reasons as r
from feedprof.units import fmt_rate

KEEP_ORDER = ("sampler=RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED)) in place of "
              "shuffle=True")


def _lines(sites: Any) -> str:
    sites = list(sites)
    return sites[0] if len(sites) == 1 else ", ".join(sites[:-1]) + " and " + sites[-1]


def _in_pipeline(x: r.SetInPipeline, describe: Callable) -> str:
    where = f", not at {x.loader_site}, where it is iterated" if x.loader_site and x.loader_site not in x.sites else ""
    if x.added:
        return (f"{x.knob}: the pipeline does not set it; the line below adds it at the end of the statement at "
                f"{_lines(x.sites)}{where}.")
    return f"{x.knob} is set where the pipeline is built, at {_lines(x.sites)}{where}: the line below sets it there."


def _order(x: r.OrderChanges, describe: Callable) -> str:
    knobs = " and ".join(x.knobs)
    if x.cause == "in_order":
        return (f"The order of samples changes: with in_order=False the loader hands over each batch as soon as it "
                "is ready, not in the sampler's order (the same samples each epoch, in another order; a run is "
                "no longer repeatable batch for batch).")
    loader = f"the loader at {x.site}" if x.site else "the loader"
    if x.cause in ("own_rng", "own_rng_workers", "own_rng_main"):
        return _own_rng(x, loader)
    source = ("torch's global random generator (it has no generator=)" if x.shuffle_rng == "global"
              else "its generator=, the one its iterator also draws the workers' seed from")
    also = ("; draws from the global generator elsewhere in the script shift as well" if x.shuffle_rng == "global"
            else "; a generator= on the DataLoader is not enough, as the workers' seed is drawn from it too")
    return (f"The order of samples changes from the second epoch on with {knobs}: {loader} shuffles from "
            f"{source}, and with persistent workers its iterator, with its one draw of the workers' seed, is made "
            "once instead of every epoch, so a seeded run sees another order than it did before (runs compared "
            "with earlier ones, or resumed from a checkpoint, differ). To keep the order, give the sampler a "
            f"generator of its own: {KEEP_ORDER}{also}.")


def _own_rng(x: r.OrderChanges, loader: str) -> str:
    held = " and ".join(x.generators) or "a random generator"
    if x.cause == "own_rng_main":
        return (f"The dataset's random draws change with 0 workers: the dataset of {loader} holds its own {held}, "
                "which as written each worker drew from a copy of (its streams beginning alike, and starting again "
                "every epoch unless persistent); in the main process it draws one stream over the whole run. Runs "
                "compared with earlier ones differ.")
    if x.cause == "own_rng_workers":
        carried = (" With persistent workers the copies also carry on from the second epoch instead of starting "
                   "again every epoch." if "persistent_workers" in x.knobs else "")
        return (f"The dataset's random draws fall on other samples with another worker count: the dataset of "
                f"{loader} holds its own {held}, each worker draws from its own copy of it (unless a worker_init_fn "
                "reseeds it), and batches go to the workers in turn, so each batch gets another worker's draws "
                f"(the same augmentations, on other samples).{carried} Runs compared with earlier ones differ.")
    if "num_workers" in x.knobs:
        restart = ("" if "persistent_workers" in x.knobs
                   else ", and without persistent workers they start again from it every epoch")
        return (f"The dataset's random draws change with workers: the dataset of {loader} holds its own {held}, "
                "which as written draws in the main process, one stream over the whole run. In workers, each "
                "worker starts from a copy of the main process's generator as it was when they started (unless a "
                f"worker_init_fn reseeds it), so the workers' streams begin alike{restart}. To keep the draws "
                "varied, seed each worker's copy in a worker_init_fn, e.g. from "
                "torch.utils.data.get_worker_info().seed.")
    return (f"The dataset's random draws change from the second epoch on with {' and '.join(x.knobs)}: the dataset "
            f"of {loader} holds its own {held}. As written, every epoch's fresh workers start from the main "
            "process's copy of it, so each epoch repeats the same stream of draws (the same augmentations, "
            "whatever samples they fall on), unless a worker_init_fn reseeds it; persistent workers carry their "
            "copies on, so a seeded run draws other ones from the second epoch on. Often that is what was meant; "
            "runs compared with earlier ones differ.")


def _in_order_gain(x: r.InOrderGain, describe: Callable) -> str:
    figures = (f"in_order=False measured {fmt_rate(x.out_of_order_batches_per_s)} against "
               f"{fmt_rate(x.in_order_batches_per_s)} in order (at {describe(x.config)})")
    if x.allowed:
        return f"{figures}: a slow sample no longer holds back the batches behind it (--allow-reorder)."
    return (f"{figures}, where slow samples hold back the batches behind them; it changes the order of samples, "
            "so it is recommended only with --allow-reorder.")


def _follow_workers(x: r.SamplesFollowWorkers, describe: Callable) -> str:
    dataset = f"{x.dataset}, an IterableDataset," if x.dataset else "The dataset, an IterableDataset,"
    how = ("feedprof switched it only between epochs, as --allow-resharding allowed, so each epoch's samples were "
           "those of the worker count in force" if x.switched
           else "it was measured with its own settings only (--allow-resharding lets feedprof switch it between epochs)")
    return (f"{dataset} decides what each worker yields: with another worker count an epoch's samples, their batches "
            f"and their order change, unless it shards by a fixed key (each record read by exactly one worker); "
            f"{how}. The advice changes them the same way.")


def words() -> Dict[type, Callable[[Any, Callable], str]]:
    return {r.SetInPipeline: _in_pipeline, r.OrderChanges: _order, r.InOrderGain: _in_order_gain,
            r.SamplesFollowWorkers: _follow_workers}
