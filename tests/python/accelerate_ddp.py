"""tests/python/test_fw_accelerate.py's script, run under torchrun on 2 CPU
ranks: Hugging Face Accelerate with forkload's loader and with torch's, two
ways, each rank writing argv[1]/rank<R>.json.

- "prepared": accelerator.prepare(model, optimizer, loader). Accelerate
  builds a loader of its own (DataLoaderShard) around a new
  torch.utils.data.DataLoader made from the loader's arguments, with a
  batch sampler that gives each rank every other batch: the batches are
  read by torch's workers, whoever's loader was passed.
- "sampler": what keeps forkload's workers: the loader is made with a
  DistributedSampler for accelerator.num_processes and
  accelerator.process_index, set_epoch at each epoch, and only the model
  and optimiser are prepared.

Each sample says whether a forkload worker read it.
"""

import json
import os
import sys

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DistributedSampler

import forkload
from loader_helpers import Regression

SAMPLES, BATCH, EPOCHS = 40, 4, 2


def train(accelerator, how, whose):
    DataLoader = forkload.DataLoader if whose == "forkload" else \
        torch.utils.data.DataLoader
    torch.manual_seed(0)
    dataset = Regression(SAMPLES)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    sampler = None
    if how == "prepared":
        loader = DataLoader(dataset, batch_size=BATCH, shuffle=True,
                            num_workers=2)
        model, optimizer, loader = accelerator.prepare(model, optimizer,
                                                       loader)
        # The loader Accelerate made, or the one given where it passed that
        # through untouched (one it did not recognise as torch's).
        inner = getattr(loader, "base_dataloader", loader)
    else:
        sampler = DistributedSampler(
            dataset, num_replicas=accelerator.num_processes,
            rank=accelerator.process_index, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler,
                            num_workers=2)
        model, optimizer = accelerator.prepare(model, optimizer)
        inner = loader
    batches, from_forkload = [], []
    for epoch in range(EPOCHS):
        if sampler is not None:
            sampler.set_epoch(epoch)
        elif hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        for batch in loader:
            batches.append(batch["i"].tolist())
            from_forkload.extend(batch["fl"].tolist())
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(batch["x"]), batch["y"])
            accelerator.backward(loss)
            optimizer.step()
    return {"loader": f"{type(inner).__module__}.{type(inner).__qualname__}",
            "batches": batches, "from_forkload": from_forkload,
            "weights": [p.detach().flatten().tolist()
                        for p in model.parameters()]}


def main(out):
    accelerator = Accelerator(cpu=True)
    record = {"rank": accelerator.process_index,
              "world": accelerator.num_processes,
              "distributed_type": str(accelerator.distributed_type),
              "pid": os.getpid()}
    for how in ("prepared", "sampler"):
        for whose in ("forkload", "torch"):
            record[f"{how}-{whose}"] = train(accelerator, how, whose)
    with open(os.path.join(out, f"rank{record['rank']}.json"), "w") as f:
        json.dump(record, f)
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
