"""The seeded training scripts the online-tuning tests run, as users write them:
a map-style dataset that waits on "storage", a model, SGD, shuffling from
torch's global RNG (or the loader's own generator). Each writes what it saw
(per-epoch digests of the sample indices and of the batches' bytes, the final
weights, the next draw of torch's, numpy's and Python's global streams) to the
JSON file named by --report, so a run under feedprof can be compared with the
run as written.

SEEDED's flags are the shapes of real loops: two iterators of one loader
(--zip), a probe batch inside the loop (--probe K), random draws in the main
process (--augment, --collate-mask, --own-rng at 0 workers), an episodic sampler drawing
each batch lazily (--lazy-sampler) with the loop drawing too (--loop-draws), a
dataset changed between epochs (--curriculum, with --persistent), a loop that
breaks out of each epoch (--steps N), and a stand-in for a torch whose iterator
changed (--torch-changed)."""

SEEDED = '''
import argparse, hashlib, json, os, random, signal, sys, time
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

p = argparse.ArgumentParser()
p.add_argument("--report", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--samples", type=int, default=960)
p.add_argument("--batch-size", type=int, default=16)
p.add_argument("--fetch-ms", type=float, default=3.0)
p.add_argument("--step-ms", type=float, default=2.0)
p.add_argument("--workers", type=int, default=0)
p.add_argument("--persistent", action="store_true")
p.add_argument("--generator", action="store_true")
p.add_argument("--kill-above", type=int, default=None)  # a worker dies (SIGKILL) when more than this many run
p.add_argument("--fail-at", type=int, default=None)  # the dataset raises at this index in the last epoch
p.add_argument("--exit", type=int, default=0)
p.add_argument("--bad-record", type=int, default=None)  # raises every epoch; the loop skips it
p.add_argument("--augment", action="store_true")  # random noise drawn where the sample is loaded
p.add_argument("--augment-from", type=int, default=0)  # ... from this epoch on (a schedule)
p.add_argument("--batch-sampler", action="store_true")  # its own, drawing its order eagerly in __iter__
p.add_argument("--rebuild", action="store_true")  # a new DataLoader every epoch, at the same line
p.add_argument("--zip", action="store_true")  # paired views: for a, b in zip(loader, loader)
p.add_argument("--probe", type=int, default=0)  # every K steps a probe batch: next(iter(loader))
p.add_argument("--collate-mask", action="store_true")  # collate_fn masks at random (numpy.random)
p.add_argument("--own-rng", action="store_true")  # the dataset draws noise from a generator it holds (self.rng)
p.add_argument("--lazy-sampler", action="store_true")  # episodic: each batch's samples drawn when it is taken
p.add_argument("--loop-draws", action="store_true")  # mixup in the loop: torch.rand and randperm every step
p.add_argument("--curriculum", action="store_true")  # dataset.level = epoch before each epoch
p.add_argument("--epoch-feature", action="store_true")  # the dataset reads the loop's epoch counter (a global)
p.add_argument("--steps", type=int, default=0)  # break out of each epoch after this many steps
p.add_argument("--torch-changed", action="store_true")  # a stand-in for a torch whose iterator changed
p.add_argument("--cuda", action="store_true")  # the model on CUDA, batches moved there (tests/test_real_gpu.py)
args = p.parse_args()
DEVICE = torch.device("cuda" if args.cuda else "cpu")

if args.torch_changed:  # this torch reads its sampler once more when its workers stop (harmless as written)
    from torch.utils.data import dataloader as dl

    _shutdown = dl._MultiProcessingDataLoaderIter._shutdown_workers

    def _shutdown_workers(self):
        if not getattr(self, "_shutdown", True):
            try:
                self._next_index()
            except StopIteration:
                pass
        _shutdown(self)

    dl._MultiProcessingDataLoaderIter._shutdown_workers = _shutdown_workers
EPOCH = {"n": 0}


class Storage(Dataset):
    level = 0  # --curriculum: set by the loop before each epoch

    def __init__(self):
        self.rng = np.random.default_rng(1) if args.own_rng else None

    def __len__(self):
        return args.samples

    def __getitem__(self, i):
        info = get_worker_info()
        if args.kill_above is not None and info is not None and info.num_workers > args.kill_above and i % 5 == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.bad_record is not None and i == args.bad_record:
            raise KeyError(f"bad record {i}")
        time.sleep(args.fetch_ms / 1000)
        x = torch.full((8,), float(i) / args.samples + self.level)
        if args.augment and self.augmenting():
            x = x + 0.01 * torch.rand(8)
        if self.rng is not None:
            x = x + float(self.rng.normal())
        return x, i

    def augmenting(self):
        return True


class Scheduled(Storage):
    """Reads the loop's epoch counter, a module-level value: each epoch's fresh workers see its value."""

    def __getitem__(self, i):
        if args.fail_at is not None and i == args.fail_at and EPOCH["n"] == args.epochs - 1:
            raise ValueError(f"corrupt record {i}")
        x, i = super().__getitem__(i)
        return (x + EPOCH["n"] if args.epoch_feature else x), i

    def augmenting(self):
        return EPOCH["n"] >= args.augment_from


class Shuffled:
    """A batch sampler whose order is drawn when iter() is called (not lazily)."""

    def __len__(self):
        return args.samples // args.batch_size

    def __iter__(self):
        order = torch.randperm(args.samples).tolist()
        return iter([order[k:k + args.batch_size] for k in range(0, len(self) * args.batch_size, args.batch_size)])


class Episodes:
    """A batch sampler drawing each batch's samples when the batch is taken (episodic sampling)."""

    def __len__(self):
        return args.samples // args.batch_size

    def __iter__(self):
        for _ in range(len(self)):
            yield torch.randint(0, args.samples, (args.batch_size,)).tolist()


def masked(samples):
    """A collate_fn that masks features at random, from numpy's global stream."""
    x, idx = torch.utils.data.default_collate(samples)
    return x * torch.from_numpy((np.random.rand(*x.shape) > 0.2).astype("float32")), idx


torch.manual_seed(0)
np.random.seed(0)
random.seed(0)
DS = Scheduled() if args.fail_at is not None or args.augment_from or args.epoch_feature else Storage()
model = torch.nn.Linear(8, 1).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(7) if args.generator else None


def make_loader():
    if args.batch_sampler or args.lazy_sampler:
        return DataLoader(DS, batch_sampler=Episodes() if args.lazy_sampler else Shuffled(), num_workers=args.workers,
                          persistent_workers=args.persistent)
    return DataLoader(DS, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                      persistent_workers=args.persistent, generator=gen,
                      collate_fn=masked if args.collate_mask else None)


def batches(loader):
    """The loader's batches; a bad record's batch is skipped, as a loop that catches the error does."""
    it = iter(loader)
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except KeyError:
            continue


def steps(loader):
    """(x, idx) per step: one iterator, or two side by side (paired views of one dataset)."""
    if not args.zip:
        yield from batches(loader)
        return
    for (a, ia), (b, ib) in zip(loader, loader):
        yield torch.cat([a, b]), torch.cat([ia, ib])


loader = make_loader()
digests, contents = [], []
t0 = time.time()
for epoch in range(args.epochs):
    EPOCH["n"] = epoch
    DS.level = epoch if args.curriculum else 0
    h, hb = hashlib.sha256(), hashlib.sha256()
    if args.rebuild:
        loader = make_loader()
    for step, (x, idx) in enumerate(steps(loader)):
        h.update(idx.numpy().tobytes())
        hb.update(x.numpy().tobytes())
        if args.probe and step % args.probe == 0:  # a look at one batch, as a logging hook takes it
            px, pidx = next(iter(loader))
            h.update(b"probe" + pidx.numpy().tobytes())
            hb.update(px.numpy().tobytes())
        x = x.to(DEVICE, non_blocking=True)
        if args.loop_draws:  # mixup
            lam = torch.rand(1)
            x = lam * x + (1 - lam) * x[torch.randperm(len(x))]
        loss = (model(x) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_ms / 1000)
        if args.steps and step + 1 == args.steps:
            break
    digests.append(h.hexdigest()[:16])
    contents.append(hb.hexdigest()[:16])
params = (model.weight, model.bias)
w = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in params)).hexdigest()
with open(args.report, "w") as fh:
    json.dump({"epochs": digests, "batches": contents, "weights": w[:16], "next_rand": torch.rand(1).item(),
               "next_np": float(np.random.rand()), "next_py": random.random(), "train_s": time.time() - t0}, fh)
sys.exit(args.exit)
'''

DDP = '''
import argparse, gc, hashlib, json, os, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

p = argparse.ArgumentParser()
p.add_argument("--report", required=True)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--samples", type=int, default=1280)
p.add_argument("--fetch-ms", type=float, default=3.0)
args = p.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()


class Storage(Dataset):
    def __len__(self):
        return args.samples

    def __getitem__(self, i):
        time.sleep(args.fetch_ms / 1000)
        return torch.full((8,), float(i) / args.samples), i


torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sampler = DistributedSampler(Storage(), shuffle=True, seed=3)
loader = DataLoader(Storage(), batch_size=16, sampler=sampler, num_workers=0)
digests = []
t0 = time.time()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    h = hashlib.sha256()
    for x, idx in loader:
        h.update(idx.numpy().tobytes())
        loss = (model(x) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.002)
    digests.append(h.hexdigest()[:16])
w = hashlib.sha256(model.module.weight.detach().numpy().tobytes()).hexdigest()[:16]
with open(f"{args.report}.{rank}", "w") as fh:
    json.dump({"epochs": digests, "weights": w, "train_s": time.time() - t0}, fh)
# (gloo's abort at exit under load: see SLURM_DDP in tests/scripts_jobs.py)
dist.barrier()
del model, opt
gc.collect()
dist.destroy_process_group()
'''

IN_LOOP = '''
import hashlib, json, sys, time
import torch
import feedprof
from torch.utils.data import DataLoader, Dataset


class Storage(Dataset):
    def __len__(self):
        return 960

    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.full((4,), float(i)), i


torch.manual_seed(0)
loader = DataLoader(Storage(), batch_size=16, shuffle=True)
tune = sys.argv[2] == "tune"
digests = []
with feedprof.profile(tune=tune) as prof:
    for epoch in range(5):
        h = hashlib.sha256()
        for x, idx in prof.watch(loader):  # (watched anew every epoch, as loops often do)
            h.update(idx.numpy().tobytes())
            time.sleep(0.002)
        digests.append(h.hexdigest()[:16])
out = {"epochs": digests, "next_rand": torch.rand(1).item()}
if tune:
    result = prof.tuned()
    out["workers"] = result.recommendation.config["num_workers"]
    out["switches"] = len(result.online.switches)
    prof.report(sys.argv[1] + ".html")
json.dump(out, open(sys.argv[1], "w"))
'''
