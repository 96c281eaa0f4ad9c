"""tests/python/test_fw_lightning.py's script: PyTorch Lightning's Trainer,
strategy='ddp' on 2 CPU processes, trains a linear model on a loader made
in train_dataloader(), forkload's or torch's (argv[1]); each rank writes
argv[2]/rank<R>.json.

Run as a script: Lightning's ddp launcher starts rank 1 as
`python <this file> <its arguments>`, rank 0 being this process.  The
loader is made with shuffle=True: Lightning replaces its RandomSampler with
a DistributedSampler by re-creating type(loader) from the loader's
arguments.  Each sample says whether a forkload worker read it, so the
JSON shows what the rank actually iterated.
"""

import json
import os
import sys

import lightning as L
import torch
from torch import nn

import forkload
from loader_helpers import Regression


class Model(L.LightningModule):
    def __init__(self, loader):
        super().__init__()
        self.loader = loader
        self.layer = nn.Linear(4, 1)
        self.batches, self.losses, self.from_forkload = [], [], []

    def train_dataloader(self):
        # forkload's own keyword too: Lightning must pass it on.
        if self.loader == "forkload":
            return forkload.DataLoader(Regression(40), batch_size=4,
                                       shuffle=True, num_workers=2,
                                       sharing="file_system")
        return torch.utils.data.DataLoader(Regression(40), batch_size=4,
                                           shuffle=True, num_workers=2)

    def training_step(self, batch, batch_idx):
        self.batches.append(batch["i"].tolist())
        self.from_forkload.extend(batch["fl"].tolist())
        loss = nn.functional.mse_loss(self.layer(batch["x"]), batch["y"])
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(loader, out):
    L.seed_everything(0, workers=True, verbose=False)
    model = Model(loader)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp",
                        max_epochs=2, logger=False,
                        enable_checkpointing=False,
                        enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(model)
    dl = trainer.train_dataloader
    record = {"rank": trainer.global_rank, "world": trainer.world_size,
              "pid": os.getpid(),
              "loader": f"{type(dl).__module__}.{type(dl).__qualname__}",
              "sampler": type(dl.sampler).__name__,
              "worker_init_fn": dl.worker_init_fn is not None,
              "sharing": getattr(dl, "sharing", None),
              "batches": model.batches, "losses": model.losses,
              "from_forkload": model.from_forkload,
              "weights": [p.detach().flatten().tolist()
                          for p in model.parameters()]}
    with open(os.path.join(out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
