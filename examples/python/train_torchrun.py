#!/usr/bin/env python3
r"""Data-parallel training under torchrun, each rank reading its own part of
the data through a DistributedSampler, with forkload's loader or PyTorch's.

    torchrun --standalone --nproc_per_node 2 train_torchrun.py --loader forkload
    torchrun --standalone --nproc_per_node 2 train_torchrun.py --loader torch

Each rank joins the process group torchrun describes in its environment
(gloo: CPU only), wraps a small linear model in DistributedDataParallel and
trains it for --epochs on a synthetic regression of --samples points, each
sample drawn from its index and jittered with the worker's own torch
generator (as a random augmentation would be). The sampler is torch's
DistributedSampler (shuffled, seed --seed, set_epoch at each epoch); the
loader forkload.DataLoader or torch.utils.data.DataLoader with the same
arguments: --workers forked workers, --batch-size.

forkload's loader recognises the DistributedSampler and draws the rank's
shard of torch's permutation in C: both loaders give each rank the same
batches, the same jitter, and so the same weights, bit for bit.

Each rank prints one line,

    train_torchrun: loader=forkload rank=0 world=2 batches=10 loss=0.0123

and with --out DIR writes DIR/rank<R>.json: the loader's class, the
indices of each batch, the loss of each step and the final weights (floats
as Python writes them, exactly). tests/python/test_fw_torchrun.py runs it
with each loader and compares the two.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler


class Regression(Dataset):
    """Sample i: x, 4 floats drawn from a generator seeded with i, plus a
    jitter drawn from the process's own generator (a worker's, seeded by
    the loader); y = x . (1, -2, 0.5, 3) + 1; and i itself."""

    def __init__(self, n):
        self.n = n
        self.w = torch.tensor([1.0, -2.0, 0.5, 3.0])

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(4, generator=g)
        y = (x * self.w).sum(0, keepdim=True) + 1.0
        x = x + 0.01 * torch.randn(4)
        return {"x": x, "y": y, "i": i}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--loader", choices=("forkload", "torch"),
                   default="forkload", help="whose DataLoader (forkload)")
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0,
                   help="the model's, the sampler's and the loader's seed")
    p.add_argument("--out", help="a folder for rank<R>.json")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    dataset = Regression(args.samples)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                 shuffle=True, seed=args.seed)
    if args.loader == "forkload":
        from forkload import DataLoader
    else:
        from torch.utils.data import DataLoader
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.workers)

    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()
    batches, losses = [], []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            batches.append(batch["i"].tolist())
            optimizer.zero_grad()
            loss = loss_fn(model(batch["x"]), batch["y"])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())

    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    print(f"train_torchrun: loader={args.loader} rank={rank} world={world} "
          f"batches={len(batches)} loss={losses[-1]:.4f}", flush=True)
    if args.out:
        record = {"loader": f"{type(loader).__module__}."
                            f"{type(loader).__qualname__}",
                  "is_torch_dataloader": isinstance(
                      loader, torch.utils.data.DataLoader),
                  "pid": os.getpid(), "rank": rank, "world": world,
                  "batches": batches, "losses": losses, "weights": weights}
        with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
            json.dump(record, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
