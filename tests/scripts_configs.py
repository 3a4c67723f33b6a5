"""Training scripts whose loader settings live in a config system, written the
way projects using each system write them (issue 23, item 2). Sleep-bound."""

DATASET = '''
import time

import torch
from torch.utils.data import Dataset


class Slow(Dataset):
    def __len__(self):
        return 240

    def __getitem__(self, i):
        time.sleep(0.008)
        return torch.zeros(4)
'''

# Hydra: conf/config.yaml picks the data group's option; the key lives in conf/data/slow.yaml
HYDRA_APP = '''
import time

import hydra
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from data import Slow


def build_loader(data_cfg):
    return DataLoader(Slow(), batch_size=data_cfg.batch_size, num_workers=data_cfg.num_workers)


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    loader = build_loader(cfg.data)
    for epoch in range(cfg.epochs):
        for batch in loader:
            time.sleep(0.001)


if __name__ == "__main__":
    main()
'''

HYDRA_CONFIG = '''
defaults:
  - data: slow
  - _self_

epochs: 3
'''

HYDRA_DATA = '''
batch_size: 4
num_workers: 0
'''

LIGHTNING_CLI = '''
import time

import lightning as L
import torch
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader

from data import Slow


class Model(L.LightningModule):
    def __init__(self, lr: float = 0.01):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        time.sleep(0.001)
        return self.layer(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class SlowData(L.LightningDataModule):
    def __init__(self, batch_size: int = 4, num_workers: int = 0):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        return DataLoader(Slow(), batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)


def cli_main():
    LightningCLI(Model, SlowData)


if __name__ == "__main__":
    cli_main()
'''

# yacs: defaults in the project's config module, command-line options merged in
YACS_DEFAULTS = '''
from yacs.config import CfgNode as CN

_C = CN()
_C.SOLVER = CN()
_C.SOLVER.EPOCHS = 3
_C.DATALOADER = CN()
_C.DATALOADER.NUM_WORKERS = 0
_C.DATALOADER.BATCH_SIZE = 4


def get_cfg_defaults():
    return _C.clone()
'''

YACS_TRAIN = '''
import argparse
import time

from torch.utils.data import DataLoader

from config.defaults import get_cfg_defaults
from data import Slow


def setup(args):
    cfg = get_cfg_defaults()
    cfg.merge_from_list(args.opts)
    cfg.freeze()
    return cfg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("opts", default=None, nargs=argparse.REMAINDER)
    cfg = setup(parser.parse_args())
    loader = DataLoader(Slow(), batch_size=cfg.DATALOADER.BATCH_SIZE, num_workers=cfg.DATALOADER.NUM_WORKERS)
    for epoch in range(cfg.SOLVER.EPOCHS):
        for batch in loader:
            time.sleep(0.001)


if __name__ == "__main__":
    main()
'''

YAML_TRAIN = '''
import time

import yaml
from torch.utils.data import DataLoader

from data import Slow

config = yaml.safe_load(open("train.yaml"))
loader = DataLoader(Slow(), batch_size=4, num_workers=config["loader"]["workers"])
for batch in loader:
    time.sleep(0.001)
'''

YAML_CONFIG = '''
model:
  width: 8
loader:
  workers: 0
'''
