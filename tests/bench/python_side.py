"""make bench's Python rows: forkload.DataLoader beside torch's DataLoader.

    PYTHONPATH=BUILDDIR/python PYTHON tests/bench/python_side.py \
        [--smoke] [--rounds N] [--only ROW,...] [--forkload BIN] \
        [--train-script PATH]

`make bench` runs it after the C rows (tests/bench/bench.c), with the
interpreter configure built the module for and the build tree's package
first on PYTHONPATH; `make bench-smoke` runs it with --smoke. The rows,
each forkload's side beside PyTorch's in the same run:

  overhead  1 KiB samples, batch 64, 2 persistent workers:
            forkload.datasets.NpyArray over a .npy of 1 KiB rows (no Python
            in the workers) against torch's DataLoader over a Dataset
            returning a 1 KiB tensor; batches/s, goal >= 20x.
  dummy     the guides' DummyDataset (a Python Dataset returning
            torch.randn(3, 224, 224) and a label), batch 64, 4 persistent
            workers: the same dataset object in both loaders; samples/s,
            goal >= 2x.
  sleep     the same with a 1 ms time.sleep in __getitem__; goal >= 1x.
  first     the dummy row's dataset, batch 64, 4 workers that are not
            persistent: a fresh loader for each epoch, as a loop over
            epochs without persistent_workers has; the seconds from
            iter() to the first batch, goal: no more than PyTorch's (no
            sample is read before the workers, and each segment grows to
            the 38 MB batches at its first batch); and samples/s over
            whole epochs, their starts included, goal >= 1x.
  images    torchvision's training transform at 224 (RandomResizedCrop, a
            flip, ToTensor, Normalize), 2 persistent workers, batch 32,
            over 320 JPEGs from `forkload gen images`:
            forkload.datasets.ImageFolder(crop="random", hflip=0.5,
            float=True) against torchvision's ImageFolder; images/s, goal
            >= 3x; and the peak of the summed PSS (/proc/PID/smaps_rollup)
            of the consumer and its workers, sampled every 20 ms during the
            row, goal: forkload's no more than PyTorch's.
  text      dynamic padding, as a text model is fed: 4096 token sequences
            of lengths from 1 to 2048 (log-normal, median 148), shuffled,
            batch 32, 2 persistent workers, a collate_fn that pads each
            batch to its longest sequence with an attention mask (Hugging
            Face's DataCollatorWithPadding's output); no sample_bytes given:
            forkload reads no sample to size them, and grows segments as
            batches need;
            samples/s, goal >= 1x, and the peak PSS of all processes, goal:
            forkload's no more than PyTorch's.
  train     examples/python/train_images.py --loader forkload against
            --loader torch on the CPU (ResNet-18, 64 x 64, batch 32, 2
            workers, 2 epochs of that folder, the first 2 steps left out):
            the share of the step time spent waiting for data, goal:
            forkload's below 5% where torch's is above 30% (n/a where
            torch's is not: a run bound by the model's step); and images/s.

Each side of each row runs in a fresh interpreter (this script with
--child), so that one side's memory and workers never meet the other's,
and the rounds alternate forkload and PyTorch; the table gives medians of
the rounds, the ratio, and PASS/FAIL against the goal, in bench.c's
layout. Each consumer reads one value of every sample (and the labels)
into a checksum that must come out right, so that no side wins by not
touching its data. A loader runs a warm-up epoch first, then epochs until
at least a second has passed (a tenth with --smoke).

--smoke runs tiny sizes in this one process, without the train row and
without torchvision (the image row's PyTorch side is left out where it is
missing), in a few seconds, so that CI keeps the script from rotting; its
figures mean nothing. Without torch, it says so and measures nothing.
Batches stay small enough for a /dev/shm of 64 MB (forkload shares by fd,
its default, and PyTorch by file descriptor too).
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
ROWS = ("overhead", "dummy", "sleep", "first", "images", "text", "train")
MIN_SECONDS = 1.0  # timed epochs run at least this long (smoke: a tenth)


class BenchError(Exception):
    """A measurement ran but gave a wrong result."""


def check(what, got, want):
    if got != want:
        raise BenchError(f"{what}: got {got!r}, want {want!r}")


# ---------------------------------------------------------------- sizes


def sizes(smoke):
    """Each row's configuration, full or --smoke."""
    if smoke:
        return {
            "overhead": dict(n=640, batch=64, workers=2),
            "dummy": dict(n=64, batch=16, workers=4, shape=[3, 16, 16],
                          sleep=0.0),
            "sleep": dict(n=64, batch=16, workers=4, shape=[3, 16, 16],
                          sleep=0.001),
            "first": dict(n=64, batch=16, workers=4, shape=[3, 16, 16]),
            "images": dict(n=16, batch=8, workers=2, size=32),
            "text": dict(n=256, batch=32, workers=2, most=2048),
            "train": None,
        }
    return {
        "overhead": dict(n=64000, batch=64, workers=2),
        "dummy": dict(n=1024, batch=64, workers=4, shape=[3, 224, 224],
                      sleep=0.0),
        "sleep": dict(n=1024, batch=64, workers=4, shape=[3, 224, 224],
                      sleep=0.001),
        "first": dict(n=512, batch=64, workers=4, shape=[3, 224, 224]),
        "images": dict(n=320, batch=32, workers=2, size=224),
        "text": dict(n=4096, batch=32, workers=2, most=2048),
        "train": dict(size=64, batch=32, workers=2, epochs=2, warmup=2),
    }


# ---------------------------------------------------------------- datasets

try:
    import torch
    from torch.utils.data import Dataset
    # The overhead row's Python side is the C bench's (its directory is
    # this script's, first on sys.path).
    from torch_side import ModuloDataset
except ImportError:
    torch = None
    Dataset = object


class DummyDataset(Dataset):
    """The guides' DummyDataset: a random 3 x 224 x 224 float tensor and a
    label, after an optional sleep."""

    def __init__(self, n, shape=(3, 224, 224), sleep=0.0):
        self.n, self.shape, self.sleep = n, tuple(shape), sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        return torch.randn(self.shape), i % 10


class TextDataset(Dataset):
    """Token sequences of lengths from 1 to `most`, log-normal (median
    148, as sentences and short documents are), fixed by the index: sample
    i is {"input_ids": int64 ids, "label": i % 2}."""

    def __init__(self, n, most):
        g = torch.Generator().manual_seed(33)
        lengths = torch.empty(n).log_normal_(5.0, 1.0, generator=g)
        self.lengths = lengths.clamp(1, most).long().tolist()

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        ids = (torch.arange(self.lengths[i], dtype=torch.int64) * 31 + i) \
            % 30522
        return {"input_ids": ids, "label": i % 2}


def pad_collate(samples):
    """Pads to the batch's longest, as DataCollatorWithPadding does."""
    n = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.int64)
    mask = torch.zeros(len(samples), n, dtype=torch.int64)
    for k, s in enumerate(samples):
        m = len(s["input_ids"])
        ids[k, :m] = s["input_ids"]
        mask[k, :m] = 1
    return {"input_ids": ids, "attention_mask": mask,
            "labels": torch.tensor([s["label"] for s in samples])}


def write_npy(path, n):
    """n rows of 256 float32, row i all i % 251."""
    import numpy as np

    rows = (np.arange(n) % 251).astype(np.float32)
    np.save(path, np.repeat(rows[:, None], 256, axis=1))


def gen_images(forkload_bin, root, n):
    """n JPEGs of ImageNet's sizes in 4 class folders (bench.c's)."""
    subprocess.run([forkload_bin, "gen", "images", root, "--samples", str(n),
                    "--classes", "4", "--force"], check=True,
                   stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------- memory


def descendants(pid):
    """pid's children, grandchildren...: /proc/*/stat's parent ids (this
    kernel may lack /proc/PID/task/TID/children)."""
    parent = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parent[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        found += kids
        todo += kids
    return found


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:  # gone, or not ours
        pass
    return 0


class PeakPss:
    """The peak of the summed PSS of this process and its descendants,
    sampled every 20 ms in a thread while the with-block runs."""

    def __init__(self, interval=0.02):
        self.interval, self.peak_kb = interval, 0
        self._stop = threading.Event()

    def _sample(self):
        me = os.getpid()
        while True:
            total = pss_kb(me) + sum(pss_kb(p) for p in descendants(me))
            self.peak_kb = max(self.peak_kb, total)
            if self._stop.wait(self.interval):
                return

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------- timing


def timed_epochs(loader, epoch, min_s):
    """A warm-up epoch, then epochs until min_s have passed; each epoch()
    returns its (units, checksum). Returns units per second."""
    epoch(loader)
    units, start = 0, time.perf_counter()
    while True:
        units += epoch(loader)
        seconds = time.perf_counter() - start
        if seconds >= min_s:
            return units / seconds


def make_loader(side, dataset, batch, workers, shuffle=False,
                persistent=True):
    if side == "forkload":
        from forkload import DataLoader
    else:
        from torch.utils.data import DataLoader
    return DataLoader(dataset, batch_size=batch, shuffle=shuffle,
                      num_workers=workers,
                      persistent_workers=persistent and workers > 0)


def row_overhead(side, cfg, work, min_s):
    n = cfg["n"]
    if side == "forkload":
        import forkload.datasets
        dataset = forkload.datasets.NpyArray(os.path.join(work, "rows.npy"))
    else:
        dataset = ModuloDataset(n)
    loader = make_loader(side, dataset, cfg["batch"], cfg["workers"])
    want = float(sum(i % 251 for i in range(n)))

    def epoch(loader):
        batches, total = 0, 0.0
        for b in loader:
            total += b[:, 0].sum().item()
            batches += 1
        check("overhead checksum", total, want)
        return batches

    rate = timed_epochs(loader, epoch, min_s)
    del loader
    return {"batches_per_s": rate}


def row_dummy(side, cfg, work, min_s):
    n = cfg["n"]
    dataset = DummyDataset(n, cfg["shape"], cfg["sleep"])
    loader = make_loader(side, dataset, cfg["batch"], cfg["workers"])
    want = sum(i % 10 for i in range(n))

    def epoch(loader):
        samples, labels, first = 0, 0, 0.0
        for x, y in loader:
            first += x[:, 0, 0, 0].sum().item()
            labels += int(y.sum())
            samples += len(y)
        check("dummy labels", labels, want)
        if not math.isfinite(first):
            raise BenchError(f"dummy: the first values sum to {first}")
        return samples

    rate = timed_epochs(loader, epoch, min_s)
    del loader
    return {"samples_per_s": rate}


def row_first(side, cfg, work, min_s):
    n = cfg["n"]
    dataset = DummyDataset(n, cfg["shape"])
    firsts, samples, start = [], 0, time.perf_counter()
    while len(firsts) < 3 or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        loader = make_loader(side, dataset, cfg["batch"], cfg["workers"],
                             persistent=False)
        it = iter(loader)
        x, y = next(it)
        firsts.append(time.perf_counter() - t0)
        got = len(y) + sum(len(y) for _, y in it)
        check("first: samples of an epoch", got, n)
        samples += got
        del it, loader, x, y
    return {"first_s": median(firsts),
            "samples_per_s": samples / (time.perf_counter() - start)}


def row_images(side, cfg, work, min_s):
    root = os.path.join(work, "images")
    size = cfg["size"]
    with PeakPss() as mem:
        if side == "forkload":
            import forkload.datasets
            dataset = forkload.datasets.ImageFolder(
                root, size, crop="random", hflip=0.5, float=True)
        else:
            from torchvision import datasets, transforms
            dataset = datasets.ImageFolder(root, transform=transforms.Compose(
                [transforms.RandomResizedCrop(size),
                 transforms.RandomHorizontalFlip(0.5),
                 transforms.ToTensor(),
                 transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]))
        loader = make_loader(side, dataset, cfg["batch"], cfg["workers"],
                             shuffle=True)
        want = sum(dataset.targets)

        def epoch(loader):
            samples, labels, first = 0, 0, 0.0
            for x, y in loader:
                check("image shape", tuple(x.shape[1:]), (3, size, size))
                first += x[:, 0, 0, 0].sum().item()
                labels += int(y.sum())
                samples += len(y)
            check("image labels", labels, want)
            if not math.isfinite(first):
                raise BenchError(f"images: the first values sum to {first}")
            return samples

        rate = timed_epochs(loader, epoch, min_s)
        del loader
    return {"images_per_s": rate, "peak_pss_mb": mem.peak_kb / 1024}


def row_text(side, cfg, work, min_s):
    with PeakPss() as mem:
        dataset = TextDataset(cfg["n"], cfg["most"])
        if side == "forkload":
            from forkload import DataLoader
        else:
            from torch.utils.data import DataLoader
        loader = DataLoader(dataset, batch_size=cfg["batch"], shuffle=True,
                            num_workers=cfg["workers"],
                            persistent_workers=True, collate_fn=pad_collate)
        tokens, labels = sum(dataset.lengths), sum(i % 2 for i in
                                                    range(cfg["n"]))

        def epoch(loader):
            samples, got_tokens, got_labels = 0, 0, 0
            for b in loader:
                got_tokens += int(b["attention_mask"].sum())
                got_labels += int(b["labels"].sum())
                samples += len(b["labels"])
            check("text tokens", got_tokens, tokens)
            check("text labels", got_labels, labels)
            return samples

        rate = timed_epochs(loader, epoch, min_s)
        del loader
    return {"samples_per_s": rate, "peak_pss_mb": mem.peak_kb / 1024}


def row_train(side, cfg, work, train_script):
    cmd = [sys.executable, train_script, os.path.join(work, "images"),
           "--loader", side, "--size", str(cfg["size"]),
           "--batch-size", str(cfg["batch"]), "--workers", str(cfg["workers"]),
           "--epochs", str(cfg["epochs"]), "--warmup", str(cfg["warmup"]),
           "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"{' '.join(cmd)}: exit {r.returncode}: "
                         f"{r.stderr.strip()}")
    for line in r.stdout.splitlines():
        if line.startswith("train_images: "):
            f = dict(kv.split("=", 1) for kv in line.split()[1:])
            if not math.isfinite(float(f["loss"])):
                raise BenchError(f"train: the loss is {f['loss']}")
            return {"images_per_s": float(f["images_per_s"]),
                    "data_wait_pct": 100 * float(f["data_wait_share"])}
    raise BenchError(f"train: no summary line in {r.stdout!r}")


def measure(row, side, cfg, work, min_s, train_script=None):
    if row == "overhead":
        return row_overhead(side, cfg, work, min_s)
    if row in ("dummy", "sleep"):
        return row_dummy(side, cfg, work, min_s)
    if row == "first":
        return row_first(side, cfg, work, min_s)
    if row == "images":
        return row_images(side, cfg, work, min_s)
    if row == "text":
        return row_text(side, cfg, work, min_s)
    return row_train(side, cfg, work, train_script)


def measure_child(row, side, cfg, work, min_s):
    """One side of one row in a fresh interpreter (this script, --child)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", row, side,
           json.dumps({"cfg": cfg, "work": work, "min_s": min_s})]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"{row} ({side}): exit {r.returncode}: "
                         f"{r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- table


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def cells(name, metric, decimals, f, pt, ratio, target, verdict):
    print(f"{name:<22} {metric:<14} {f:12.{decimals}f} {pt:>12} {ratio:>9}"
          f"  {target:<26} {verdict}", flush=True)


def row_line(name, metric, fl, pt, target="", passes=None, smoke=False,
             decimals=1, note=None):
    """bench.c's print_row: the medians, the ratio, the verdict (none
    with --smoke, or without PyTorch's side)."""
    if not fl:
        print(f"{name:<22} {'-':<14} {note or 'not run':>12}", flush=True)
        return
    f = median(fl)
    p = median(pt) if pt else None
    ptxt, ratio = "-", "-"
    if p is not None:
        ptxt = f"{p:.{decimals}f}"
        if p > 0:
            r = f / p
            digits = 1 - math.floor(math.log10(r)) if 0 < r < 0.01 else 2
            ratio = f"{r:.{digits}f}x"
    verdict = "-"
    if passes is not None and p is not None and not smoke:
        ok = passes(f, p)
        verdict = "n/a" if ok is None else "PASS" if ok else "FAIL"
    cells(name, metric, decimals, f, ptxt, ratio, target, verdict)
    if note:
        print(f"  {note}", flush=True)


# ---------------------------------------------------------------- main


def versions():
    out = [f"python {sys.version.split()[0]} ({sys.executable})"]
    if torch is not None:
        out.append(f"torch {torch.__version__}")
    try:
        import torchvision
        out.append(f"torchvision {torchvision.__version__}")
    except ImportError:
        out.append("no torchvision")
    return ", ".join(out)


def have_torchvision():
    try:
        import torchvision
    except ImportError:
        return False
    return torchvision is not None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, in this process, a few seconds")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default=",".join(ROWS),
                   help="rows to run, comma-separated: " + ", ".join(ROWS))
    p.add_argument("--forkload", default="examples/forkload",
                   help="the forkload program, to write the image folder")
    p.add_argument("--train-script",
                   default=os.path.join(HERE, "..", "..", "examples",
                                        "python", "train_images.py"))
    p.add_argument("--child", nargs=3, metavar=("ROW", "SIDE", "JSON"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    # PyTorch's advice (and forkload's) where 4 workers exceed the CPUs.
    warnings.filterwarnings("ignore", "This DataLoader will create",
                            UserWarning)

    if args.child:
        row, side, spec = args.child
        spec = json.loads(spec)
        print(json.dumps(measure(row, side, spec["cfg"], spec["work"],
                                 spec["min_s"])))
        return 0

    print("\nforkload.DataLoader vs torch DataLoader, from Python, medians "
          f"of {1 if args.smoke else args.rounds} round(s)"
          + (" (smoke sizes: figures are not comparable)"
             if args.smoke else ""), flush=True)
    if torch is None:
        print(f"python rows: skipped: {sys.executable} cannot import torch "
              "(Debian's python3-torch)")
        return 0
    try:
        import forkload
    except ImportError as e:
        print(f"python rows: skipped: {sys.executable} cannot import "
              f"forkload ({e}); is the build tree's python/ on PYTHONPATH?")
        return 0
    print(f"{versions()}, forkload {forkload.__version__}")
    tv = have_torchvision()
    rows = [r for r in args.only.split(",") if r]
    for r in rows:
        if r not in ROWS:
            p.error(f"--only: no row {r!r}; rows: {', '.join(ROWS)}")
    cfgs = sizes(args.smoke)
    rounds = 1 if args.smoke else max(1, args.rounds)
    min_s = MIN_SECONDS / 10 if args.smoke else MIN_SECONDS
    results = {r: {"forkload": [], "torch": []} for r in ROWS}
    skipped = {}
    if "train" in rows:
        if args.smoke:
            skipped["train"] = ("--smoke "
                                "(tests/python/test_train_example.py runs it)")
        elif not tv:
            skipped["train"] = "no torchvision (python3-torchvision)"
    work = tempfile.mkdtemp(prefix="forkload-bench-py-")
    try:
        if "overhead" in rows:
            write_npy(os.path.join(work, "rows.npy"), cfgs["overhead"]["n"])
        if "images" in rows or ("train" in rows and "train" not in skipped):
            try:
                gen_images(args.forkload, os.path.join(work, "images"),
                           cfgs["images"]["n"])
            except subprocess.CalledProcessError as e:
                # A build without libjpeg and libspng writes no images.
                why = f"{args.forkload} gen images failed (exit " \
                    f"{e.returncode}): no image support in this build?"
                for r in ("images", "train"):
                    skipped.setdefault(r, why)
        for _ in range(rounds):
            for r in rows:
                if r in skipped:
                    continue
                for side in ("forkload", "torch"):
                    if side == "torch" and r == "images" and not tv:
                        continue
                    if args.smoke:
                        res = measure(r, side, cfgs[r], work, min_s,
                                      args.train_script)
                    elif r == "train":
                        res = row_train(side, cfgs[r], work,
                                        args.train_script)
                    else:
                        res = measure_child(r, side, cfgs[r], work, min_s)
                    results[r][side].append(res)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def col(r, side, key):
        return [x[key] for x in results[r][side]]

    print(f"\n{'workload':<22} {'metric':<14} {'forkload':>12} "
          f"{'pytorch':>12} {'ratio':>9}  {'target':<26} verdict")
    s = args.smoke
    if "overhead" in rows:
        row_line("py overhead (npy)", "batches/s",
                 col("overhead", "forkload", "batches_per_s"),
                 col("overhead", "torch", "batches_per_s"),
                 ">= 20x PyTorch", lambda f, p: f >= 20 * p, s)
    if "dummy" in rows:
        row_line("py dummy 3x224", "samples/s",
                 col("dummy", "forkload", "samples_per_s"),
                 col("dummy", "torch", "samples_per_s"),
                 ">= 2x PyTorch", lambda f, p: f >= 2 * p, s)
    if "sleep" in rows:
        row_line("py dummy sleep 1 ms", "samples/s",
                 col("sleep", "forkload", "samples_per_s"),
                 col("sleep", "torch", "samples_per_s"),
                 ">= 1x PyTorch", lambda f, p: f >= p, s)
    if "first" in rows:
        row_line("py first batch, fresh", "s",
                 col("first", "forkload", "first_s"),
                 col("first", "torch", "first_s"),
                 "<= PyTorch's", lambda f, p: f <= p, s, decimals=3)
        row_line("  epochs, starts incl.", "samples/s",
                 col("first", "forkload", "samples_per_s"),
                 col("first", "torch", "samples_per_s"),
                 ">= 1x PyTorch", lambda f, p: f >= p, s)
    if "images" in rows and "images" in skipped:
        print(f"{'py images train (RRC)':<22} {'-':<14} "
              f"not run: {skipped['images']}")
    elif "images" in rows:
        note = None if tv else "no torchvision: PyTorch's side not run"
        row_line("py images train (RRC)", "images/s",
                 col("images", "forkload", "images_per_s"),
                 col("images", "torch", "images_per_s"),
                 ">= 3.5x torchvision", lambda f, p: f >= 3.5 * p, s,
                 note=note)
        row_line("  peak PSS, all procs", "MB",
                 col("images", "forkload", "peak_pss_mb"),
                 col("images", "torch", "peak_pss_mb"),
                 "<= PyTorch's", lambda f, p: f <= p, s)
    if "text" in rows:
        row_line("py text dyn. padding", "samples/s",
                 col("text", "forkload", "samples_per_s"),
                 col("text", "torch", "samples_per_s"),
                 ">= 1x PyTorch", lambda f, p: f >= p, s)
        row_line("  peak PSS, all procs", "MB",
                 col("text", "forkload", "peak_pss_mb"),
                 col("text", "torch", "peak_pss_mb"),
                 "<= PyTorch's", lambda f, p: f <= p, s)
    if "train" in rows:
        if "train" in skipped:
            print(f"{'py train resnet18':<22} {'-':<14} "
                  f"not run: {skipped['train']}")
        else:
            c = cfgs["train"]
            row_line(f"py train resnet18 {c['size']}", "data wait %",
                     col("train", "forkload", "data_wait_pct"),
                     col("train", "torch", "data_wait_pct"),
                     "< 5% where PyTorch > 30%",
                     lambda f, p: f < 5 if p > 30 else None, s,
                     note=None if s or median(col("train", "torch",
                                                  "data_wait_pct") or [99]) > 30
                     else "n/a: PyTorch's run is not data-bound here (the "
                     "model's step, not its loader, sets the pace), so the "
                     "goal's condition does not hold")
            row_line("  train", "images/s",
                     col("train", "forkload", "images_per_s"),
                     col("train", "torch", "images_per_s"), smoke=s)
    print("py rows: "
          + ("in this process (--smoke)" if s else
             "each side in a fresh interpreter")
          + f", a warm-up epoch, then epochs for at least {min_s:g} s; "
          "train: "
          "examples/python/train_images.py on the CPU, "
          + ("not run" if "train" in skipped or "train" not in rows else
             f"{cfgs['train']['epochs']} epochs of {cfgs['images']['n']} "
             f"images, batch {cfgs['train']['batch']}, "
             f"{cfgs['train']['workers']} workers, the first "
             f"{cfgs['train']['warmup']} steps left out"), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, subprocess.CalledProcessError) as e:
        print(f"python_side: {e}", file=sys.stderr)
        sys.exit(1)
