"""Does ``feedprof tune`` find what an exhaustive grid finds, for a fraction of the time?

For each workload in benchmarks/workloads/:

1. ``feedprof tune`` with its defaults, ``--tunes`` times (3: a pick must hold
   when the tune is repeated; wall time: the tune's cost);
2. the exhaustive grid over the same knobs, each config one trial with the
   same trial settings the tuner uses (wall time: the grid's cost):
   PyTorch  num_workers {0,1,2,4,8,16,32} x prefetch_factor {2,4} x
            persistent_workers {False,True} (x pin_memory where CUDA is used)
   Keras    workers {1,2,4,8,16,32} x use_multiprocessing x max_queue_size {10,20}
   tf.data  num_parallel_calls {1,2,4,8,16,32,AUTOTUNE} (private threadpool as
            large past the core count) x prefetch {none, AUTOTUNE} x
            deterministic {default, False};
3. an independent re-measurement (benchmarks/independent.py: no feedprof code,
   the config forced where the script builds its loader, the training steps
   timed over 10 s windows), interleaved over repetitions, of the recommended
   config of every tune, the grid's three best, the script's own settings and
   (tf.data) AUTOTUNE: quality = a tune's pick / the best of those (medians
   over repetitions), for every tune. The first tune's pick is measured a
   second time under another name: that A/A ratio is the noise floor quality
   should be read against. Each tune's own figures (its pick's throughput,
   its speedup over the script's settings) are set beside the independent
   ones: "agreement".
4. the best of those and every tune's pick measured again, interleaved, in
   ``--final-reps`` fresh repetitions: *quality, held out* = a pick / the best
   on those alone. The best of several noisy contenders reads high in the
   repetitions it was chosen on (the winner's curse: on a plateau, quality
   there is biased low by the noise); measured again, apart from its choice,
   it does not.

The grid runs through the same tuner with ``GridStrategy`` (every config
cold, a fresh interpreter each, as a sweep by hand would: no fork server,
no ceiling, its own baseline first); the tuner forks its trials from a process
that imported the framework once (feedprof/trial/zygote.py), which is part of
what it is for. A workload whose module sets ``LAUNCH`` (ddp_io.py: torchrun,
2 ranks) is tuned, gridded and re-measured as that multi-process job.

    python benchmarks/tune_vs_grid.py                       # every workload, ~90 min on 2 cores
    python benchmarks/tune_vs_grid.py io_remote --reps 3
    python benchmarks/tune_vs_grid.py gpu_shaped hf_trainer_io --tunes 2 --no-grid   # repeatability only
    python benchmarks/tune_vs_grid.py gpu_shaped hf_trainer_io --tunes 2 --no-grid --busy 1   # a core taken
    python benchmarks/tune_vs_grid.py --tables benchmarks/results/tune-vs-grid-cpu-2core.json

Targets: every tune's pick >= 95 % of the best on every workload, feedprof's figure for it
within 15 % of the independent one (quiet, and with --busy 1 on 2 cores), every tune <= 120 s.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from busy import BusyLoad
from feedprof.analyse.diagnose import training_loader
from feedprof.analyse.measured import score
from feedprof.store.codec import write_text_atomic
from feedprof.record.host import usable_cpu_count
from feedprof.store import Phase, Role
from feedprof.trial.launch import parse_launch
from feedprof.tune.history import GridStrategy
from feedprof.tune.machine import read_machine
from feedprof.tune.job import TuneJob, TuneOptions
from feedprof.tune.tuner import Tuner
from feedprof.units import fmt_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import independent  # noqa: E402  (benchmarks/independent.py: shares no code with feedprof)

WORKLOADS = ["gpu_shaped", "io_two_loaders", "hf_trainer_io", "two_loaders", "cpu_decode", "io_remote",
             "compute_heavy", "keras_io", "tfdata_io", "tfdata_fit", "ddp_io"]
HARNESS_FRAMEWORK = {"torch": "torch", "keras": "keras", "tf.data": "tf.data"}  # feedprof's name -> the harness's
OWN, AUTO, AA = "script's own", "AUTOTUNE", "A/A"  # labels of the contenders that are not grid configs


def grid(framework: str, cuda: bool, cpu_cap: int):
    if framework == "torch":
        yield {"num_workers": 0}
        pins = (False, True) if cuda else (False,)
        for n, pf, pw, pin in itertools.product((1, 2, 4, 8, 16, 32), (2, 4), (False, True), pins):
            yield {"num_workers": n, "prefetch_factor": pf, "persistent_workers": pw, "pin_memory": pin}
    elif framework in ("keras", "tf.keras"):
        for n, mp, q in itertools.product((1, 2, 4, 8, 16, 32), (False, True), (10, 20)):
            yield {"workers": n, "use_multiprocessing": mp, "max_queue_size": q}
    elif framework == "tf.data":
        for npc, pf, det in itertools.product((1, 2, 4, 8, 16, 32, "AUTOTUNE"), (None, "AUTOTUNE"), (None, False)):
            pool = npc if isinstance(npc, int) and npc > cpu_cap else None
            yield {"num_parallel_calls": npc, "prefetch": pf, "deterministic": det, "private_threadpool_size": pool}


def workload_launch(script: str) -> tuple:
    """The workload's ``LAUNCH = (...)`` (a multi-process job's launcher), read without importing it."""
    with open(script, encoding="utf-8") as fh:
        for node in ast.parse(fh.read()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LAUNCH" for t in node.targets):
                return tuple(ast.literal_eval(node.value))
    return ()


def launcher_argv(launch: tuple) -> list:
    """torchrun from this interpreter's environment (the venv's, not whatever is on PATH)."""
    if launch and launch[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", *launch[1:]]
    return list(launch)


def tuner_for(script, work, opts, launch, strategy=None):
    job = parse_launch([*launcher_argv(launch), script]) if launch else None
    extra = {"strategy": strategy} if strategy else {}  # else the tuner's own (the ladder)
    return Tuner(TuneJob(script=script, out_dir=work, launch=job), opts, read_machine(gpu=opts.gpu), **extra)


def run_grid(script, work, topts, launch):
    """The exhaustive grid, through the tuner: (its trials, wall time without its baseline)."""
    def grid_strategy(space, opts, host):
        return GridStrategy(space, grid(space.framework, bool(space.cuda_used), space.cpu_cap))

    opts = dataclasses.replace(topts, budget_s=24 * 3600, fork_trials=False, trial_timeout_s=60)
    result = tuner_for(script, os.path.join(work, "grid"), opts, launch, grid_strategy).run()
    trials = [t for t in result.trials if t.phase == Phase.GRID]
    for t in trials:
        print(f"  grid {t.config_text:<55} {score(t) or 0:8.1f} b/s  {t.state}", flush=True)
    baseline_s = sum(t.duration_s for t in result.trials if t.role == Role.BASELINE)
    return trials, result.duration_s - baseline_s


def contenders_of(space, recs, grid_trials, framework, also=()):
    """{label: config} to re-measure: every tune's pick, the grid's three best, the configs named
    with --also, the script's own settings (None: nothing forced), AUTOTUNE for tf.data, and the
    first pick again (A/A)."""
    ranked = sorted((t for t in grid_trials if score(t)), key=score, reverse=True)
    out = {space.describe(t.config): space.legalize(t.config) for t in ranked[:3]}
    for cfg in also:
        out.setdefault(space.describe(space.legalize(cfg)), space.legalize(cfg))
    for rec in recs:
        rec_cfg = space.legalize(rec.config)
        out.setdefault(space.describe(rec_cfg), rec_cfg)
    out[OWN] = None
    if framework == "tf.data":  # the bar for tf.data: at least AUTOTUNE's throughput
        out[AUTO] = {"num_parallel_calls": "AUTOTUNE", "prefetch": "AUTOTUNE"}
    out[AA] = space.legalize(recs[0].config)
    return out


def remeasure(script, contenders, reps, loader, launch):
    """The independent harness's medians per label, and its raw summary."""
    framework = HARNESS_FRAMEWORK.get(loader.framework)
    if framework is None:
        print(f"  (the independent harness does not force {loader.framework} loaders: not re-measured)")
        return None, None, []
    site = loader.site if framework == "torch" and not launch else None  # the training loader of several
    show = lambda rep, label, r: print("  " + independent.describe_run(rep, reps, label, r), flush=True)  # noqa: E731
    out = independent.measure_interleaved(script, contenders, reps, framework=framework, site=site,
                                          window_s=5.0 if launch else 10.0, on_result=show,
                                          launch=launcher_argv(launch))
    medians = {label: v["rate_per_s"]["median"] for label, v in out["summary"].items()}
    return medians, out["summary"], [r["load_avg_1m"] for r in out["runs"]]


def tune_once(script, work, topts, launch, k):
    """One tune, timed from outside: (its result, its tuner, wall seconds)."""
    t0 = time.monotonic()
    tuner = tuner_for(script, os.path.join(work, f"tune-{k}"), topts, launch)
    result = tuner.run()
    tune_s = time.monotonic() - t0
    rec = result.recommendation
    print(f"tune {k + 1}: {len(result.trials)} trials in {tune_s:.0f} s -> {rec.config if rec else None}", flush=True)
    return result, tuner, tune_s


def one(name, reps, out_rows, tunes=3, grid=True, final_reps=2, also=()):
    script = os.path.join(HERE, "workloads", f"{name}.py")
    launch = workload_launch(script)
    work = tempfile.mkdtemp(prefix=f"feedprof-bench-{name}-")
    topts = TuneOptions()
    print(f"\n== {name}" + (f" (launched by {' '.join(launch)})" if launch else ""), flush=True)

    runs = [tune_once(script, work, topts, launch, k) for k in range(tunes)]
    result, tuner, tune_s = runs[0]
    rec = result.recommendation
    loader = training_loader(result.trials[0].run.ranks[0] if launch else result.trials[0].run)
    space = tuner.space
    if grid:
        grid_trials, grid_s = run_grid(script, work, topts, launch)
    else:  # the best configs the tunes measured stand in for the grid's
        grid_trials = [t for r, _, _ in runs for t in r.trials if t.role != Role.CEILING]
        grid_s = None

    contenders = contenders_of(space, [r.recommendation for r, _, _ in runs], grid_trials, loader.framework, also)
    medians, summary, loads = remeasure(script, contenders, reps, loader, launch)
    row = {"workload": name, "framework": loader.framework, "launch": list(launch),
           "recommended": space.describe(contenders[AA]), "tune_s": tune_s, "grid_s": grid_s,
           "cost": tune_s / grid_s if grid_s else None, "tune_trials": len(result.trials), "grid_trials": len(grid_trials),
           "tune_pick_batches_per_s": rec.batches_per_s, "tune_speedup": rec.speedup,
           "peak_rss_bytes": peak_rss(result, grid_trials, space, rec),
           "tunes": [{"recommended": space.describe(space.legalize(r.recommendation.config)), "tune_s": s,
                      "trials": len(r.trials), "tune_pick_batches_per_s": r.recommendation.batches_per_s,
                      "tune_speedup": r.recommendation.speedup} for r, _, s in runs]}
    if medians:
        row.update(judge(medians, contenders, row["recommended"]))
        for t in row["tunes"]:
            t.update(judge(medians, contenders, t["recommended"]))
        row["independent"] = summary
        row["load_avg_1m"] = statistics.median(loads)  # how busy the machine was while re-measuring
        if not launch:  # both of feedprof's figures against a stopwatch: whole epochs, and inside them
            row["stopwatch"] = stopwatch(script, contenders[AA], loader, rec)
        if final_reps:
            held = held_out(script, contenders, row["grid_best"], [t["recommended"] for t in row["tunes"]],
                            final_reps, loader, launch)
            row["held_out"] = held
            for t in [row, *row["tunes"]]:
                t["quality_held_out"] = _ratio_of(held["medians"], t["recommended"], row["grid_best"])
    print(verdict_line(row), flush=True)
    out_rows.append(row)


def stopwatch(script, config, loader, rec, epochs=2):
    """The first tune's pick timed by the harness over whole epochs (epoch starts and what the loop
    does between epochs included) and in windows inside them, beside feedprof's two figures for it:
    the rate over whole epochs (the recommendation's batches/s) and while the loop trains."""
    framework = HARNESS_FRAMEWORK.get(loader.framework)
    if framework is None:
        return None
    site = loader.site if framework == "torch" else None
    r = independent.measure(script, framework, config, site=site, window_s=5.0, windows=1, epochs=epochs)
    print(f"  stopwatch: {r['state']}; {len(r['epochs'])} whole epochs {r['epoch_rate_per_s']} steps/s "
          f"(feedprof {rec.batches_per_s}); windows {r['rate_per_s']} (feedprof while training "
          f"{rec.training_batches_per_s})", flush=True)
    return {"state": r["state"], "epoch_rate_per_s": r["epoch_rate_per_s"], "window_rate_per_s": r["rate_per_s"],
            "epochs": len(r["epochs"]), "feedprof_epoch_per_s": rec.batches_per_s,
            "feedprof_training_per_s": rec.training_batches_per_s,
            "epoch_ratio": rec.batches_per_s / r["epoch_rate_per_s"] if r["epoch_rate_per_s"] else None,
            "training_ratio": (rec.training_batches_per_s / r["rate_per_s"]
                               if rec.training_batches_per_s and r["rate_per_s"] else None)}


def held_out(script, contenders, best, picks, reps, loader, launch):
    """The best contender and every pick, measured again in ``reps`` fresh interleaved repetitions
    (apart from the repetitions the best was chosen on): {"medians": {label: b/s}, "load_avg_1m"}."""
    labels = list(dict.fromkeys([best, *picks]))
    print(f"  held out: {' | '.join(labels)} again, {reps} repetitions", flush=True)
    medians, _, loads = remeasure(script, {label: contenders[label] for label in labels}, reps, loader, launch)
    return {"medians": medians or {}, "load_avg_1m": statistics.median(loads) if loads else None}


def _ratio_of(medians, label, best):
    a, b = medians.get(label), medians.get(best)
    return a / b if a and b else None


def judge(medians, contenders, rec_label):
    """Quality, noise floor and agreement from the independent medians."""
    pick, own = medians[rec_label], medians[OWN]
    grid_labels = [k for k in contenders if k not in (OWN, AUTO, AA)]
    best = max(grid_labels, key=lambda k: medians[k] or 0)
    out = {"grid_best": best, "quality": pick / medians[best] if pick and medians[best] else None,
           "aa_noise": medians[AA] / pick if pick and medians[AA] else None,
           "independent_pick_per_s": pick, "independent_own_per_s": own,
           "independent_speedup": pick / own if pick and own else None,
           "vs_autotune": pick / medians[AUTO] if AUTO in medians and medians[AUTO] else None}
    return out


def agreement(row):
    """The tune's own figures over the independent ones (1.00: they agree)."""
    rate = row.get("tune_pick_batches_per_s"), row.get("independent_pick_per_s")
    speed = row.get("tune_speedup"), row.get("independent_speedup")
    return (rate[0] / rate[1] if all(rate) else None), (speed[0] / speed[1] if all(speed) else None)


def peak_rss(result, grid_trials, space, rec):
    """Peak memory of the pick (its tune trial) and of AUTOTUNE (its grid trial), where measured."""
    out = {"recommended": result.trials[rec.trial_index].peak_rss_bytes}
    for t in grid_trials:
        if t.config.get("num_parallel_calls") == "AUTOTUNE" and t.config.get("prefetch") == "AUTOTUNE" \
                and t.config.get("deterministic") is None:
            out["AUTOTUNE"] = t.peak_rss_bytes
    return out


def verdict_line(row):
    if row.get("quality") is None:
        return f"{row['workload']}: recommended {row['recommended']}; tune {row['tune_s']:.0f} s = " \
               f"{_vs_grid(row)} (not re-measured)"
    rate_ag, speed_ag = agreement(row)
    return (f"{row['workload']}: recommended {row['recommended']} = {100 * row['quality']:.1f} % of the best "
            f"re-measured ({row['grid_best']}; A/A noise floor {100 * row['aa_noise']:.0f} %); tune "
            f"{row['tune_s']:.0f} s{_vs_grid(row)}; feedprof's "
            f"pick rate / independent {_ratio(rate_ag)}, speedup {_ratio(speed_ag)}"
            + (f"; held out {100 * row['quality_held_out']:.1f} %" if row.get("quality_held_out") else "")
            + _stopwatch_words(row.get("stopwatch"))
            + (f"; {100 * row['vs_autotune']:.0f} % of AUTOTUNE's throughput" if row.get("vs_autotune") else ""))


def _stopwatch_words(sw):
    if not sw:
        return ""
    return (f"; over whole epochs feedprof / stopwatch {_ratio(sw['epoch_ratio'])}, while training "
            f"{_ratio(sw['training_ratio'])}")


def _vs_grid(row):
    return f" = {100 * row['cost']:.0f} % of the grid's {row['grid_s']:.0f} s" if row.get("grid_s") else " (no grid)"


def _ratio(x):
    return f"{x:.2f}" if x is not None else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", default=WORKLOADS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tunes", type=int, default=3, help="tunes per workload (default 3)")
    ap.add_argument("--no-grid", action="store_true",
                    help="no grid: the best configs the tunes measured are re-measured beside their picks")
    ap.add_argument("--final-reps", type=int, default=2,
                    help="repetitions of the best and the picks measured again for the held-out quality (0: none)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "tune-vs-grid-cpu-2core.json"))
    ap.add_argument("--tables", metavar="JSON", help="print the tables of a saved run, run nothing")
    ap.add_argument("--also", action="append", default=[], metavar="CONFIG",
                    help="a config (JSON) re-measured beside the picks, e.g. '{\"num_workers\": 8}'")
    ap.add_argument("--busy", type=float, default=0.0, metavar="CORES",
                    help="run a fixed CPU load of this many cores beside everything (1: one core of a 2-core "
                         "machine), as other work on a shared machine does; its measured share is recorded")
    args = ap.parse_args()
    if args.tables:
        with open(args.tables, encoding="utf-8") as fh:
            print_tables(json.load(fh)["rows"])
        return
    unknown = [w for w in args.workloads if not os.path.isfile(os.path.join(HERE, "workloads", f"{w}.py"))]
    if unknown:
        ap.error(f"no such workload: {', '.join(unknown)} (benchmarks/workloads/)")
    rows = []
    with BusyLoad(args.busy) as load:
        for name in args.workloads:
            one(name, args.reps, rows, args.tunes, grid=not args.no_grid, final_reps=args.final_reps,
                also=[json.loads(c) for c in args.also])
            save(args.out, rows, load.measured())  # after every workload: an interrupted run keeps what it measured
    print_tables(rows)
    if args.busy:
        print(f"\nbusy: a load of {args.busy:g} core(s) ran beside everything; it used {load.measured():.2f} "
              "core(s) on average")


def print_tables(rows):
    """The README tables. Independent throughput is the median of the repetitions,
    with the slowest and fastest beside it."""
    def spread(r, label):
        v = r.get("independent", {}).get(label, {}).get("rate_per_s")
        return f"{v['median']:.0f} ({v['min']:.0f}–{v['max']:.0f})" if v and v["median"] else "?"

    def pct(x):
        return f"{100 * x:.0f} %" if x is not None else "?"

    print("\n| workload | recommended | best re-measured | b/s, recommended | b/s, best | quality | A/A | tune "
          "| grid | cost |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        grid_s = f"{r['grid_s']:.0f} s" if r.get("grid_s") else "no grid"
        print(f"| {r['workload']} | {r['recommended']} | {r.get('grid_best', '?')} | {spread(r, r['recommended'])} | "
              f"{spread(r, r.get('grid_best'))} | {pct(r.get('quality'))} | {pct(r.get('aa_noise'))} | "
              f"{r['tune_s']:.0f} s ({r['tune_trials']} trials) | {grid_s} ({r['grid_trials']}) | "
              f"{pct(r['cost'])} |")
    print("\n| workload | feedprof: pick b/s | independent | ratio | feedprof: speedup | independent | ratio | load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rate_ag, speed_ag = agreement(r)
        num = lambda x, u="": f"{x:.1f}{u}" if x is not None else "?"  # noqa: E731
        print(f"| {r['workload']} | {num(r['tune_pick_batches_per_s'])} | {num(r.get('independent_pick_per_s'))} | "
              f"{_ratio(rate_ag)} | {num(r['tune_speedup'], '×')} | {num(r.get('independent_speedup'), '×')} | "
              f"{_ratio(speed_ag)} | {num(r.get('load_avg_1m'))} |")
    print("\n| workload | tune | recommended | quality | held out | feedprof: pick b/s | independent | ratio "
          "| tune time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for k, t in enumerate(r.get("tunes", ())):
            rate_ag, _ = agreement(t)
            num = lambda x: f"{x:.1f}" if x is not None else "?"  # noqa: E731
            print(f"| {r['workload']} | {k + 1} | {t['recommended']} | {pct(t.get('quality'))} | "
                  f"{pct(t.get('quality_held_out'))} | "
                  f"{num(t['tune_pick_batches_per_s'])} | {num(t.get('independent_pick_per_s'))} | {_ratio(rate_ag)} | "
                  f"{t['tune_s']:.0f} s ({t['trials']} trials) |")
    tfdata = [r for r in rows if r.get("vs_autotune") is not None]
    if tfdata:
        print("\n| workload | recommended | throughput vs AUTOTUNE | peak RSS, recommended | peak RSS, AUTOTUNE |")
        print("|---|---|---|---|---|")
        for r in tfdata:
            rss = r["peak_rss_bytes"]
            print(f"| {r['workload']} | {r['recommended']} | {pct(r['vs_autotune'])} | "
                  f"{fmt_bytes(rss.get('recommended'))} | {fmt_bytes(rss.get('AUTOTUNE'))} |")


def save(path, rows, busy_cores=0.0):
    data = {"command": " ".join(["python"] + sys.argv), "machine": platform.node(),
            "cpus": usable_cpu_count(), "busy_cores": round(busy_cores, 2), "rows": rows}
    write_text_atomic(path, json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
