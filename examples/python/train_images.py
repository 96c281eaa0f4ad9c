#!/usr/bin/env python3
r"""Train torchvision's ResNet on a folder of images, with forkload's loader
or PyTorch's, and say how much of each step waited for data.

The folder is ImageFolder's layout (a subfolder per class), which
`forkload gen images` writes:

    forkload gen images /tmp/imgs --samples 1000 --classes 10
    python3 train_images.py /tmp/imgs --loader forkload
    python3 train_images.py /tmp/imgs --loader torch

and on a GPU, ResNet-50 in mixed precision at 224 x 224 with a worker per
CPU core (the defaults of --device cuda):

    python3 train_images.py /tmp/imgs --device cuda --arch resnet50 --amp

Both loaders get the same model (ResNet-18, or ResNet-50 with --arch, its
weights initialised from --seed, nothing downloaded), the same optimiser,
batch size, number of workers and transform: torchvision's training
transform at --size (RandomResizedCrop, a flip with probability 0.5,
ToTensor and Normalize with ImageNet's mean and std), shuffled, with
persistent workers and the last incomplete batch dropped.

- --loader torch: torchvision.datasets.ImageFolder with that transform,
  in torch.utils.data.DataLoader; the workers run PIL and torchvision.
- --loader forkload: forkload.datasets.ImageFolder(root, size,
  crop="random", hflip=0.5, float=True) in forkload.DataLoader; the
  workers decode, crop, flip and normalise in C, with no Python, straight
  into the batch's shared memory.

The crops drawn differ between the two (torchvision draws from torch's
generator in each worker, forkload from fl_sample_seed), so the losses are
alike, not equal.

Each step is timed from the call to next(loader) to the return of the
optimiser's step; the time blocked in next() is the step's data wait. On
a GPU the loop reads the last step's loss after queuing the next one, so
that one step stays in flight while the next batch is fetched, and an
epoch's time ends at a synchronize. Per epoch, and over the run without its
first --warmup steps (the workers' start and the first batches), it
prints images/s and the data-wait share (the sum of the waits over the
sum of the steps), then one line to parse:

    train_images: loader=forkload arch=resnet18 device=cpu ...
        images_per_s=23.8 data_wait_share=0.0040 step_ms=1344.5 loss=1.4172

(one line, folded here).

On a GPU (--device cuda, where torch.cuda.is_available()), with
pin_memory=True and non_blocking copies, it also reports the GPU's idle
share (1 - the time CUDA events measured between a step's copy and its
optimiser step, over the wall time), which the data wait approximates,
and the bandwidth of the host-to-device copies of the batches (pinned
where the loader pinned them; the line says whether they were). --amp
runs the model in mixed precision (autocast, float16, with a
GradScaler). tests/python/test_train_example.py runs a few steps of each
loader; `make bench` runs both beside each other.
"""

import argparse
import math
import os
import sys
import time

import torch
from torch import nn


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Train a ResNet on an image folder with forkload's "
        "loader or PyTorch's; report images/s and the data-wait share.")
    p.add_argument("root", help="the image folder (a subfolder per class), "
                   "as `forkload gen images DIR` writes it")
    p.add_argument("--loader", choices=("forkload", "torch"),
                   default="forkload", help="whose DataLoader (forkload)")
    p.add_argument("--arch", choices=("resnet18", "resnet50"),
                   default="resnet18", help="torchvision's model, weights "
                   "initialised from --seed (resnet18)")
    p.add_argument("--size", type=int, default=None,
                   help="the crop's height and width (64 on the CPU, 224 "
                   "on a GPU)")
    p.add_argument("--batch-size", type=int, default=32,
                   help="images per batch (32)")
    p.add_argument("--workers", type=int, default=None,
                   help="loader workers (2 on the CPU, every CPU core on a "
                   "GPU)")
    p.add_argument("--epochs", type=int, default=1, help="epochs (1)")
    p.add_argument("--steps", type=int, default=0,
                   help="stop after this many steps in all (0: no limit)")
    p.add_argument("--warmup", type=int, default=2,
                   help="steps left out of the overall figures: the "
                   "workers' start and first batches (2)")
    p.add_argument("--lr", type=float, default=0.02,
                   help="SGD's learning rate, momentum 0.9 (0.02)")
    p.add_argument("--seed", type=int, default=0,
                   help="torch.manual_seed before the model and the "
                   "loader (0)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model runs (cpu)")
    p.add_argument("--amp", action="store_true",
                   help="cuda: mixed precision (autocast to float16)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads in the training process "
                   "(0: torch's default)")
    p.add_argument("--quiet", action="store_true",
                   help="print the summary line alone")
    args = p.parse_args(argv)
    gpu = args.device == "cuda"
    if args.size is None:
        args.size = 224 if gpu else 64
    if args.workers is None:
        args.workers = (len(os.sched_getaffinity(0)) if gpu else 2)
    if args.batch_size < 1 or args.size < 1 or args.workers < 0 or \
            args.epochs < 1 or args.steps < 0 or args.warmup < 0:
        p.error("--batch-size, --size and --epochs must be at least 1, "
                "--workers, --steps and --warmup at least 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch.cuda.is_available() is False here "
                f"(torch {torch.__version__})")
    if args.amp and args.device != "cuda":
        p.error("--amp needs --device cuda")
    return args


def make_model(arch, classes):
    import torchvision

    make = getattr(torchvision.models, arch)
    try:
        return make(weights=None, num_classes=classes)
    except TypeError:  # torchvision before 0.13: no weights argument
        return make(pretrained=False, num_classes=classes)


def make_loader(args, pin):
    """The dataset and its loader, both sides alike but for the dataset."""
    common = dict(batch_size=args.batch_size, shuffle=True,
                  num_workers=args.workers, pin_memory=pin, drop_last=True,
                  persistent_workers=args.workers > 0)
    if args.loader == "torch":
        from torch.utils.data import DataLoader
        from torchvision import datasets, transforms

        transform = transforms.Compose([
            transforms.RandomResizedCrop(args.size),
            transforms.RandomHorizontalFlip(0.5),
            transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406),
                                 (0.229, 0.224, 0.225))])
        dataset = datasets.ImageFolder(args.root, transform=transform)
    else:
        import forkload
        from forkload import DataLoader

        dataset = forkload.datasets.ImageFolder(
            args.root, args.size, crop="random", hflip=0.5, float=True)
    if len(dataset) < args.batch_size:
        sys.exit(f"train_images: {args.root} holds {len(dataset)} images, "
                 f"fewer than one batch of {args.batch_size}")
    return dataset, DataLoader(dataset, **common)


class Timer:
    """Sums of one stretch of steps: images, step time, data wait, and on
    a GPU the busy time and the copies."""

    def __init__(self):
        self.steps = self.images = 0
        self.seconds = self.wait = self.busy = 0.0
        self.copy_bytes = 0
        self.copy_s = 0.0
        self.loss = 0.0

    def add(self, other):
        for k, v in vars(other).items():
            if k != "loss":
                setattr(self, k, getattr(self, k) + v)
        self.loss = other.loss

    def images_per_s(self):
        return self.images / self.seconds if self.seconds > 0 else 0.0

    def wait_share(self):
        return self.wait / self.seconds if self.seconds > 0 else 0.0


def train(args):
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    device = torch.device(args.device)
    dataset, loader = make_loader(args, pin=cuda)
    model = make_model(args.arch, len(dataset.classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr,
                                momentum=0.9, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    scaler = None
    if args.amp:
        make_scaler = getattr(torch.amp, "GradScaler", None)
        scaler = make_scaler("cuda") if make_scaler is not None \
            else torch.cuda.amp.GradScaler()
    model.train()

    say = (lambda *a: None) if args.quiet else print
    say(f"{args.loader}: {len(dataset)} images in {len(dataset.classes)} "
        f"classes, {args.arch} on {args.device}"
        f"{' (amp)' if args.amp else ''}, {args.size}x{args.size}, batch "
        f"{args.batch_size}, {args.workers} workers, "
        f"{len(loader)} steps an epoch")

    overall, epochs = Timer(), []
    pinned = None
    step = 0
    done = False
    for epoch in range(args.epochs):
        this = Timer()
        steps = []  # per step: (Timer, its loss tensor, its CUDA events)
        it = iter(loader)
        start = time.perf_counter()
        while True:
            if args.steps and step >= args.steps:
                done = True
                break
            t0 = time.perf_counter()
            try:
                images, labels = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            one = Timer()
            one.steps, one.images, one.wait = 1, len(labels), t1 - t0
            events = None
            if cuda:
                if pinned is None:
                    pinned = images.is_pinned()
                events = [torch.cuda.Event(enable_timing=True)
                          for _ in range(3)]
                one.copy_bytes = (images.element_size() * images.nelement()
                                  + labels.element_size() * labels.nelement())
                events[0].record()
                images = images.to(device, non_blocking=True)
                labels = labels.to(device, non_blocking=True)
                events[1].record()
            optimizer.zero_grad(set_to_none=True)
            if args.amp:
                with torch.autocast(device_type="cuda", dtype=torch.float16):
                    loss = loss_fn(model(images), labels)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss = loss_fn(model(images), labels)
                loss.backward()
                optimizer.step()
            if cuda:
                events[2].record()
                # The last step's loss: one step stays in flight on the
                # GPU while the next batch is fetched, as in a loop that
                # logs each loss.
                if steps:
                    steps[-1][1].item()
            steps.append((one, loss.detach(), events))
            one.seconds = time.perf_counter() - t0
            step += 1
            del images, labels
        if cuda:
            torch.cuda.synchronize()
            if steps:  # the wait for the last step is that step's
                steps[-1][0].seconds += time.perf_counter() - start - sum(
                    s[0].seconds for s in steps)
        for i, (one, loss, events) in enumerate(steps):
            one.loss = loss.item()
            if not math.isfinite(one.loss):
                sys.exit(f"train_images: epoch {epoch + 1}, step {i + 1}: "
                         f"the loss is {one.loss}")
            if events is not None:
                one.copy_s = events[0].elapsed_time(events[1]) / 1e3
                one.busy = events[0].elapsed_time(events[2]) / 1e3
            this.add(one)
            if len(epochs) > 0 or i >= args.warmup:
                overall.add(one)
        if this.steps:
            epochs.append(this)
            say(f"epoch {epoch + 1}: {this.steps} steps, {this.images} "
                f"images in {this.seconds:.2f} s, "
                f"{this.images_per_s():.1f} images/s, data wait "
                f"{100 * this.wait_share():.1f}% of the step time, "
                f"loss {this.loss:.4f}")
        if done:
            break
    if overall.steps == 0:  # a run no longer than its warm-up
        for e in epochs:
            overall.add(e)
    return overall, pinned


def summary(args, overall, pinned):
    fields = [("loader", args.loader), ("arch", args.arch),
              ("device", args.device), ("amp", int(args.amp)),
              ("size", args.size), ("batch_size", args.batch_size),
              ("workers", args.workers), ("steps", overall.steps),
              ("images", overall.images),
              ("seconds", f"{overall.seconds:.3f}"),
              ("images_per_s", f"{overall.images_per_s():.1f}"),
              ("data_wait_share", f"{overall.wait_share():.4f}"),
              ("step_ms",
               f"{1e3 * overall.seconds / max(overall.steps, 1):.1f}"),
              ("loss", f"{overall.loss:.4f}")]
    if args.device == "cuda":
        idle = 1 - overall.busy / overall.seconds if overall.seconds else 0
        mbps = overall.copy_bytes / overall.copy_s / 1e6 \
            if overall.copy_s > 0 else 0
        fields += [("gpu_idle_share", f"{max(idle, 0.0):.4f}"),
                   ("h2d_MB_per_s", f"{mbps:.0f}"),
                   ("pinned", int(bool(pinned)))]
    return "train_images: " + " ".join(f"{k}={v}" for k, v in fields)


def main(argv=None):
    args = parse_args(argv)
    if not os.path.isdir(args.root):
        sys.exit(f"train_images: {args.root} is not a folder; "
                 f"`forkload gen images {args.root} --samples 1000` "
                 "writes one")
    overall, pinned = train(args)
    if not args.quiet:
        print(f"overall, after {args.warmup} warm-up steps: "
              f"{overall.images_per_s():.1f} images/s, data wait "
              f"{100 * overall.wait_share():.1f}% of the step time"
              + (", GPU idle {:.1f}%".format(
                  100 * max(1 - overall.busy / overall.seconds, 0))
                 if args.device == "cuda" and overall.seconds else ""))
    print(summary(args, overall, pinned), flush=True)


if __name__ == "__main__":
    main()
