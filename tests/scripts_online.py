"""The seeded training scripts the online-tuning tests run, as users write them:
a map-style dataset that waits on "storage", a model, SGD, shuffling from
torch's global RNG (or the loader's own generator). Each writes what it saw
(per-epoch digests of the sample indices, the final weights, the global RNG's
next draw) to the JSON file named by --report, so a run under feedprof can be
compared with the run as written."""

SEEDED = '''
import argparse, hashlib, json, os, signal, sys, time
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
p.add_argument("--batch-sampler", action="store_true")  # its own, drawing its order eagerly in __iter__
p.add_argument("--rebuild", action="store_true")  # a new DataLoader every epoch, at the same line
args = p.parse_args()
EPOCH = {"n": 0}


class Storage(Dataset):
    def __len__(self):
        return args.samples

    def __getitem__(self, i):
        info = get_worker_info()
        if args.kill_above is not None and info is not None and info.num_workers > args.kill_above and i % 5 == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        if args.fail_at is not None and i == args.fail_at and EPOCH["n"] == args.epochs - 1:
            raise ValueError(f"corrupt record {i}")
        if args.bad_record is not None and i == args.bad_record:
            raise KeyError(f"bad record {i}")
        time.sleep(args.fetch_ms / 1000)
        x = torch.full((8,), float(i) / args.samples)
        if args.augment:
            x = x + 0.01 * torch.rand(8)
        return x, i


class Shuffled:
    """A batch sampler whose order is drawn when iter() is called (not lazily)."""

    def __len__(self):
        return args.samples // args.batch_size

    def __iter__(self):
        order = torch.randperm(args.samples).tolist()
        return iter([order[k:k + args.batch_size] for k in range(0, len(self) * args.batch_size, args.batch_size)])


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
gen = torch.Generator().manual_seed(7) if args.generator else None


def make_loader():
    if args.batch_sampler:
        return DataLoader(Storage(), batch_sampler=Shuffled(), num_workers=args.workers)
    return DataLoader(Storage(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                      persistent_workers=args.persistent, generator=gen)


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


loader = make_loader()
digests = []
t0 = time.time()
for epoch in range(args.epochs):
    EPOCH["n"] = epoch
    h = hashlib.sha256()
    if args.rebuild:
        loader = make_loader()
    for x, idx in batches(loader):
        h.update(idx.numpy().tobytes())
        loss = (model(x) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(args.step_ms / 1000)
    digests.append(h.hexdigest()[:16])
w = hashlib.sha256(model.weight.detach().numpy().tobytes() + model.bias.detach().numpy().tobytes()).hexdigest()
with open(args.report, "w") as fh:
    json.dump({"epochs": digests, "weights": w[:16], "next_rand": torch.rand(1).item(),
               "train_s": time.time() - t0}, fh)
sys.exit(args.exit)
'''

DDP = '''
import argparse, hashlib, json, os, time
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
