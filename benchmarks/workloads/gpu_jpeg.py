"""An input-bound GPU job, as people write it: JPEG files decoded and augmented
on the CPU in the dataset (random crop, flip, normalise), a ResNet-18 on
CUDA, batches moved with ``.to(device, non_blocking=True)``, and
``num_workers`` from a flag that defaults to 0.

Needs no download: the JPEGs are generated once (PIL) into ``--data`` and
reused. Decoding and augmenting a sample takes ~2 ms of one core (dev VM),
~130 ms a batch of 64, while a ResNet-18 step on an H100 takes a few ms: the
GPU waits at the baseline. Without CUDA the same loop runs on the CPU
(slowly; for checks).

    python benchmarks/workloads/gpu_jpeg.py --epochs 1
    feedprof tune benchmarks/workloads/gpu_jpeg.py

Remedies beyond the loader's knobs, off by default (benchmarks/gpu_beyond.py applies the one
feedprof ranks first and times it): --own-cores K keeps K cores for the training process (its
threads pinned there, the loader's workers on the rest); --gpu-decode reads each JPEG's bytes in
the dataset and decodes and augments the batch on the GPU (torchvision.io.decode_jpeg); --uint8
copies uint8 samples to the GPU and normalises them there (a quarter of the bytes).
"""
import argparse
import io
import os
import random

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def make_jpegs(folder: str, n: int, side: int = 320) -> list:
    """``n`` JPEGs of smooth noise (so they compress like photos), made once."""
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f"{i:05d}.jpg") for i in range(n)]
    rng = np.random.default_rng(0)
    for path in paths:
        if os.path.exists(path):
            continue
        small = rng.integers(0, 256, (side // 16, side // 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize((side, side), Image.BICUBIC)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=90)
        with open(path + ".tmp", "wb") as fh:  # atomic: a second job may make the same files
            fh.write(buf.getvalue())
        os.replace(path + ".tmp", path)
    return paths


class JpegFolder(Dataset):
    def __init__(self, paths: list, crop: int = 224, uint8: bool = False):
        self.paths, self.crop, self.uint8 = paths, crop, uint8

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        img = Image.open(self.paths[i]).convert("RGB")
        w, h = img.size
        scale = random.uniform(0.35, 1.0)  # a random-resized crop, as ImageNet training does
        cw, ch = int(w * scale), int(h * scale)
        x0, y0 = random.randint(0, w - cw), random.randint(0, h - ch)
        img = img.crop((x0, y0, x0 + cw, y0 + ch)).resize((self.crop, self.crop), Image.BILINEAR)
        if random.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        if self.uint8:  # (--uint8: normalised on the device, a quarter of the bytes to copy)
            return torch.from_numpy(np.asarray(img).transpose(2, 0, 1).copy()), i % 1000
        arr = (np.asarray(img, dtype=np.float32) / 255.0 - MEAN) / STD
        return torch.from_numpy(arr.transpose(2, 0, 1).copy()), i % 1000


class JpegBytes(Dataset):
    """The --gpu-decode dataset: each sample is its file's bytes (the decode moves to the GPU)."""

    def __init__(self, paths: list):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as fh:
            return torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8), i % 1000


def bytes_collate(samples):
    return [s[0] for s in samples], torch.tensor([s[1] for s in samples])


def decode_on_device(raw: list, device, crop: int = 224):
    """Decode a batch of JPEGs on the GPU, then crop, flip and normalise each there."""
    import torchvision
    from torch.nn import functional as F

    images = torchvision.io.decode_jpeg(raw, device=device)
    mean = torch.tensor(MEAN, device=device).view(3, 1, 1)
    std = torch.tensor(STD, device=device).view(3, 1, 1)
    out = []
    for img in images:
        _, h, w = img.shape
        scale = random.uniform(0.35, 1.0)
        ch, cw = int(h * scale), int(w * scale)
        y0, x0 = random.randint(0, h - ch), random.randint(0, w - cw)
        x = img[:, y0:y0 + ch, x0:x0 + cw].float().div_(255).unsqueeze(0)
        x = F.interpolate(x, size=(crop, crop), mode="bilinear", align_corners=False)[0]
        if random.random() < 0.5:
            x = x.flip(-1)
        out.append((x - mean) / std)
    return torch.stack(out)


def own_cores(k: int):
    """Keep k of this process's cores for the training process; the loader's workers get the rest
    (returned: a worker_init_fn that moves each worker there)."""
    allowed = sorted(os.sched_getaffinity(0))
    if k <= 0 or k >= len(allowed):
        return None
    mine, theirs = set(allowed[:k]), set(allowed[k:])
    os.sched_setaffinity(0, mine)
    torch.set_num_threads(k)
    return lambda worker_id: os.sched_setaffinity(0, theirs)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18(classes: int = 1000) -> nn.Module:
    layers, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                         nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(512, classes))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--data", default=os.path.join(os.path.expanduser("~"), ".cache", "feedprof-gpu-jpeg"))
    ap.add_argument("--own-cores", type=int, default=0, help="cores kept for the training process")
    ap.add_argument("--gpu-decode", action="store_true", help="decode and augment on the GPU")
    ap.add_argument("--uint8", action="store_true", help="copy uint8 samples to the GPU, normalise there")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    paths = make_jpegs(args.data, args.images)
    init = own_cores(args.own_cores)
    model = resnet18().to(device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = JpegBytes(paths) if args.gpu_decode else JpegFolder(paths, uint8=args.uint8)
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        drop_last=True, worker_init_fn=init, collate_fn=bytes_collate if args.gpu_decode else None)
    for epoch in range(args.epochs):
        for x, y in loader:
            if args.gpu_decode:
                x = decode_on_device(x, device)
            x = x.to(device, non_blocking=True)
            if args.uint8:
                x = (x.float().div_(255) - mean) / std
            x = x.contiguous(memory_format=torch.channels_last)
            y = y.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
