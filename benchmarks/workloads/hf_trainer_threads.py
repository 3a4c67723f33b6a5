"""A Hugging Face ``Trainer`` script as most are written: torch's intra-op
threads left at their default (one per core), batches of 32, an I/O-bound
dataset (every example waits 4 ms on storage, no CPU), a tiny BERT on the CPU,
``dataloader_num_workers=0``. Loading is about half of a step. With one core
busy, torch's two threads then share the other, and anything that changes how
the job is scheduled beside the busy process changes its speed: the workload
that showed `feedprof profile` halving a job (benchmarks/overhead.py --cli).
Best: many workers, kept alive across epochs."""
import argparse
import time

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RemoteTextDataset(Dataset):
    """Tokenized examples, each read from slow storage."""

    def __len__(self):
        return 4000

    def __getitem__(self, i):
        time.sleep(0.004)
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": i % 2}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=100)
    a = ap.parse_args()
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2)
    args = TrainingArguments(output_dir="/tmp/hf-trainer-threads-out", per_device_train_batch_size=32,
                             num_train_epochs=a.epochs, dataloader_num_workers=a.workers, report_to="none",
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=RemoteTextDataset())
    trainer.train()


if __name__ == "__main__":
    main()
