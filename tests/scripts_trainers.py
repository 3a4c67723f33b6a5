"""Tiny training scripts written the way Lightning, transformers and torchdata
document them; each sample waits 20 ms on "storage" (a sleep), so the loop is
unambiguously input-bound on a shared 2-core machine and more workers help."""

LIGHTNING = '''
import time

import lightning as L
import lightning.pytorch.trainer.connectors.data_connector as data_connector
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

# Lightning suggests num_workers = CPUs - 1 and stays silent below 3 CPUs: pretend to
# be an 8-CPU machine so that its warning is given here too.
data_connector.suggested_max_num_workers = lambda local_world_size: 7


class RemoteDataset(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.02)  # a read from slow storage
        return torch.full((8,), (i % 10) / 10), i % 2  # (not drawn: at 0 workers a draw would be the script's own)


class DataModule(L.LightningDataModule):
    def __init__(self, batch_size=4, num_workers=0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers

    def train_dataloader(self):
        return DataLoader(RemoteDataset(), batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers)


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    # DDP, even on one CPU device: Lightning rebuilds the loader to add a DistributedSampler
    trainer = L.Trainer(max_epochs=5, accelerator="cpu", devices=1, strategy="ddp", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Classifier(), datamodule=DataModule())
'''

TRANSFORMERS = '''
import time

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RemoteTextDataset(Dataset):
    """Tokenized examples, each read from slow storage."""

    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.02)
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": i % 2}


config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=32, num_labels=2)
model = BertForSequenceClassification(config)
training_args = TrainingArguments(
    output_dir="trainer-out",
    per_device_train_batch_size=4,
    num_train_epochs=2,
    dataloader_num_workers=0,
    report_to="none",
    save_strategy="no",
    use_cpu=True,
)
trainer = Trainer(model=model, args=training_args, train_dataset=RemoteTextDataset())
trainer.train()
'''

STATEFUL = '''
import argparse
import time

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader


class RemoteSamples(Dataset):
    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.02)  # a read from object storage
        return torch.full((8,), float(i))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many steps and print the rate")
    args = parser.parse_args()
    loader = StatefulDataLoader(RemoteSamples(), batch_size=4, shuffle=True, num_workers=args.workers)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step, t0 = 0, None
    for epoch in range(args.epochs):
        for batch in loader:
            loss = model(batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == 10:  # workers started: time from here
                t0 = time.perf_counter()
            if step % 100 == 0:
                checkpoint = {"loader": loader.state_dict(), "step": step}
            if args.steps and step == args.steps:
                print(f"RATE {(step - 10) / (time.perf_counter() - t0):.2f}")
                return


if __name__ == "__main__":
    main()
'''

NODES = '''
import time

import torch
import torchdata.nodes as tn


def fetch(i):
    time.sleep(0.02)  # one sample over the network
    return torch.full((8,), float(i))


def collate(items):
    return torch.stack(items)


node = tn.IterableWrapper(range(4000))
node = tn.ParallelMapper(node, map_fn=fetch, num_workers=1, method="process")
node = tn.Batcher(node, batch_size=4)
node = tn.Mapper(node, collate)
node = tn.Prefetcher(node, prefetch_factor=2)
loader = tn.Loader(node)

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    for batch in loader:
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
'''
