"""A Hugging Face ``Trainer`` script as people write it, on an I/O-bound
dataset: every example waits 4 ms on storage (no CPU), a tiny BERT trains on
the CPU, and ``dataloader_num_workers=0`` as written. The Trainer builds the
DataLoader from ``TrainingArguments``. Best: many workers, kept alive across
epochs (``dataloader_persistent_workers``)."""
import time

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class RemoteTextDataset(Dataset):
    """Tokenized examples, each read from slow storage."""

    def __len__(self):
        return 2000

    def __getitem__(self, i):
        time.sleep(0.004)
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (16,), generator=g), "labels": i % 2}


def main():
    torch.set_num_threads(1)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2)
    args = TrainingArguments(output_dir="/tmp/hf-trainer-io-out", per_device_train_batch_size=16,
                             num_train_epochs=100, dataloader_num_workers=0, report_to="none",
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=BertForSequenceClassification(config), args=args, train_dataset=RemoteTextDataset())
    trainer.train()


if __name__ == "__main__":
    main()
