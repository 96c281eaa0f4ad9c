"""PyTorch side of the forkload vs. DataLoader benchmark.

tests/bench/bench.c runs this script as a subprocess, once per measurement:

    /usr/bin/python3 tests/bench/torch_side.py WORKLOAD [CONFIG] [--smoke]

WORKLOAD is one of overhead, bandwidth, tutorial (CONFIG w0, w4, w4p or
w4b), hol (CONFIG in or out), startup, npydir (CONFIG: a directory of .npy
files, one sample each, read with np.load in every worker: the seed's case),
resume (CONFIG: that directory; --position N: the batch to resume at,
reached by restarting and skipping), lmdb (CONFIG: an LMDB environment
read with python3-lmdb, opened in each worker), images (CONFIG: a folder
of JPEGs in ImageFolder's layout, written by the C side; --transform
train or eval: torchvision's ImageNet transforms), tokens (CONFIG: a
directory of llm.c token shards, shard_*.bin, read the usual way: a numpy
memmap of each, windows of 1025 tokens sliced and converted to int64
tensors), webdataset (CONFIG: tar shards, comma-separated, read with
tarfile in an IterableDataset) and scale (CONFIG: the sample count n;
RandomSampler's shuffle of n indices, timed from iter() to the first
batch in two epochs).  Each workload mirrors the C side
exactly: same sample count and size, batch size, workers, prefetch
factor, persistence and per-sample delay.  The consumer reads the first
value of every sample into a checksum, which is checked against its
known value so that neither side can win by not touching the data
(images: the labels' sum, the pixels being random; tokens: each window's
first input and last target).

The result is exactly one line of JSON on stdout; exit status 0.  On any
failure a message goes to stderr and the exit status is 1.  --smoke shrinks
every size so that a run takes about a second (only to check the script).
Uses the default fork start method and file_descriptor sharing strategy.
"""

import argparse
import inspect
import json
import math
import sys
import time
import warnings

import torch
from torch.utils.data import (DataLoader, Dataset, IterableDataset,
                              get_worker_info)
from torch.utils.data._utils import fetch

SAMPLE_3x224 = 3 * 224 * 224 * 4  # bytes in one bandwidth sample
LATENCY_SPIN_S = 300e-6  # busy-wait before each timed next() call
LATENCY_SKIP = 10  # next() calls left out at the start of that epoch
RESUMES = 5  # restarts per run of resume, as on the C side
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class BenchError(Exception):
    """A measurement ran but gave a wrong result."""


# ---------------------------------------------------------------- datasets


class ModuloDataset(Dataset):
    """N samples of 256 float32 (1 KiB), every value i % 251 (overhead)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((256,), float(i % 251))


class CloneDataset(Dataset):
    """N samples of shape (3, 224, 224), each a full copy of one source."""

    def __init__(self, n):
        self.n = n
        self.src = torch.rand(3, 224, 224)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.src.clone()


class SleepyDataset(Dataset):
    """The seed tutorial's dataset: N samples, each after a 5 ms sleep.

    Each sample is generated on access: a new (3, 224, 224) float32 tensor
    (602,112 bytes) filled with i % 251, as the C side's get fills its
    sample in place; --smoke passes (16,).
    """

    def __init__(self, n, shape=(3, 224, 224)):
        self.n = n
        self.shape = shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.005)
        return torch.full(self.shape, float(i % 251))


class BatchedSleepyDataset(SleepyDataset):
    """Like SleepyDataset, but a whole batch costs a single 5 ms sleep.

    The python3-torch 1.13 of Debian 12 already has the __getitems__ hook
    in torch/utils/data/_utils/fetch.py (_MapDatasetFetcher calls it with
    the batch's index list when auto-collation is on; upstream only got it
    in 2.0), so this uses it directly rather than emulating it with a
    BatchSampler and batch_size=None.  main() checks that the hook is there.
    """

    def __getitems__(self, indices):
        time.sleep(0.005)
        return [torch.full(self.shape, float(i % 251)) for i in indices]


class IndexDataset(Dataset):
    """N samples, each its own index (scale): nothing to load, so that what
    is timed is the sampler and the workers."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class HolDataset(Dataset):
    """16-float samples; worker 0 takes 1 ms a sample, the others 0.1 ms."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        time.sleep(0.001 if info is not None and info.id == 0 else 0.0001)
        return torch.full((16,), float(i))


# ---------------------------------------------------------------- helpers


def first_values(batch):
    """The first value of every sample in the batch, as a 1-D view."""
    return batch.reshape(batch.shape[0], -1)[:, 0]


def run_epoch(loader):
    """Iterate one epoch; return (batches, samples, checksum)."""
    batches = samples = 0
    checksum = 0.0
    for batch in loader:
        checksum += first_values(batch).sum().item()
        batches += 1
        samples += batch.shape[0]
    return batches, samples, checksum


def timed_epochs(loader, epochs):
    """Run epochs; return (seconds, batches, samples, checksum)."""
    batches = samples = 0
    checksum = 0.0
    start = time.perf_counter()
    for _ in range(epochs):
        b, s, c = run_epoch(loader)
        batches += b
        samples += s
        checksum += c
    return time.perf_counter() - start, batches, samples, checksum


def spin(seconds):
    """Busy-wait, so that the workers get ahead without a sleep's jitter."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def next_latencies_us(loader):
    """One epoch; return (per-next() times in us, checksum).

    Before each next() the consumer spins for LATENCY_SPIN_S; only the
    next() call itself is timed.  The first LATENCY_SKIP calls are dropped.
    """
    times = []
    checksum = 0.0
    it = iter(loader)
    while True:
        spin(LATENCY_SPIN_S)
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        times.append((time.perf_counter() - t0) * 1e6)
        checksum += first_values(batch).sum().item()
    del it
    return times[LATENCY_SKIP:], checksum


def percentile(values, p):
    """Nearest-rank percentile p (0-100] of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def check(name, got, want, rel=0.0):
    """Raise BenchError unless got equals want (within rel, if given)."""
    if abs(got - want) > rel * abs(want):
        raise BenchError("%s: checksum %r, expected %r" % (name, got, want))


def fetcher_calls_getitems():
    """Whether this torch's map-style fetcher uses Dataset.__getitems__."""
    source = inspect.getsource(fetch._MapDatasetFetcher.fetch)
    return "__getitems__" in source


def make_loader(dataset, batch_size, workers, persistent=False, **kw):
    """A DataLoader; prefetch_factor 2 is only passed when workers > 0."""
    if workers > 0:
        kw.update(prefetch_factor=2, persistent_workers=persistent)
    return DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                      **kw)


# ---------------------------------------------------------------- workloads


def bench_overhead(smoke, config):
    """Per-batch cost of tiny samples: throughput and next() latency."""
    n = 6400 if smoke else 128000
    loader = make_loader(ModuloDataset(n), 64, 2, persistent=True)
    epoch_sum = float(sum(i % 251 for i in range(n)))

    check("warm-up", run_epoch(loader)[2], epoch_sum)
    seconds, batches, _, checksum = timed_epochs(loader, 2)
    check("timed", checksum, 2 * epoch_sum)
    times, checksum = next_latencies_us(loader)
    check("latency", checksum, epoch_sum)
    del loader
    return {"workload": "overhead",
            "batches_per_s": round(batches / seconds, 1),
            "next_p50_us": round(percentile(times, 50), 1),
            "next_p99_us": round(percentile(times, 99), 1),
            "batches": batches}


def bench_bandwidth(smoke, config):
    """Large samples, each fully written by the worker: MB/s delivered."""
    n = 64 if smoke else 2048
    dataset = CloneDataset(n)
    loader = make_loader(dataset, 32, 2, persistent=True)
    first = dataset.src[0, 0, 0].item()

    cold_s, _, cold_samples, checksum = timed_epochs(loader, 1)
    check("cold", checksum, n * first, rel=1e-5)
    seconds, batches, samples, checksum = timed_epochs(loader, 2)
    check("warm", checksum, 2 * n * first, rel=1e-5)
    del loader
    return {"workload": "bandwidth",
            "mb_per_s": round(samples * SAMPLE_3x224 / 1e6 / seconds, 1),
            "cold_mb_per_s": round(cold_samples * SAMPLE_3x224 / 1e6
                                   / cold_s, 1),
            "batches_per_s": round(batches / seconds, 1)}


TUTORIAL_CONFIGS = {
    # config: (workers, persistent, dataset class)
    "w0": (0, False, SleepyDataset),
    "w4": (4, False, SleepyDataset),
    "w4p": (4, True, SleepyDataset),
    "w4b": (4, True, BatchedSleepyDataset),
}


def bench_tutorial(smoke, config):
    """The tutorial's slow dataset of images, shuffled, over 10 epochs."""
    if config not in TUTORIAL_CONFIGS:
        raise ValueError("tutorial needs one of %s"
                         % ", ".join(sorted(TUTORIAL_CONFIGS)))
    n, epochs, shape = (64, 1, (16,)) if smoke else (512, 10, (3, 224, 224))
    workers, persistent, cls = TUTORIAL_CONFIGS[config]
    if cls is BatchedSleepyDataset and not fetcher_calls_getitems():
        raise RuntimeError("this torch's fetcher ignores __getitems__")
    generator = torch.Generator()
    generator.manual_seed(0)
    loader = make_loader(cls(n, shape), 32, workers, persistent=persistent,
                         shuffle=True, generator=generator)

    seconds, _, _, checksum = timed_epochs(loader, epochs)
    check("tutorial", checksum, float(epochs * sum(i % 251 for i in range(n))))
    del loader
    return {"workload": "tutorial", "config": config,
            "seconds": round(seconds, 4), "epochs": epochs}


def bench_hol(smoke, config):
    """Head-of-line blocking behind one slow worker."""
    if config not in ("in", "out"):
        raise ValueError("hol needs in or out")
    if config == "out":
        # DataLoader's in_order argument only exists from PyTorch 2.6; the
        # 1.13 of Debian 12 always delivers batches in order, so there is
        # nothing to measure there.
        return {"workload": "hol", "config": "out", "unsupported": True}
    n = 160 if smoke else 1600
    loader = make_loader(HolDataset(n), 8, 2, persistent=True)
    epoch_sum = float(n * (n - 1) // 2)

    check("warm-up", run_epoch(loader)[2], epoch_sum)
    seconds, batches, _, checksum = timed_epochs(loader, 1)
    check("timed", checksum, epoch_sum)
    del loader
    return {"workload": "hol", "config": "in",
            "batches_per_s": round(batches / seconds, 1)}


def bench_startup(smoke, config):
    """From constructing the DataLoader to holding its first batch."""
    n = 6400
    dataset = ModuloDataset(n)
    start = time.perf_counter()
    loader = make_loader(dataset, 64, 2)
    it = iter(loader)
    batch = next(it)
    ms = (time.perf_counter() - start) * 1e3
    check("first batch", first_values(batch).sum().item(),
          float(sum(range(64))))
    del batch, it, loader
    return {"workload": "startup", "first_batch_ms": round(ms, 3)}


class NpyFilesDataset(Dataset):
    """One sample per .npy file, loaded with np.load on each access."""

    def __init__(self, directory):
        import os

        self.files = sorted(os.path.join(directory, f)
                            for f in os.listdir(directory)
                            if f.endswith(".npy"))

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        import numpy as np

        return torch.from_numpy(np.load(self.files[i]))


def bench_npydir(smoke, config):
    """A directory of small .npy files: samples/s, one warm epoch."""
    if config is None:
        raise ValueError("needs the directory as its config argument")
    dataset = NpyFilesDataset(config)
    loader = make_loader(dataset, 64, 2, persistent=True)
    n = len(dataset)
    check("warm-up", run_epoch(loader)[2], float(sum(range(n))))
    seconds, _, samples, checksum = timed_epochs(loader, 1)
    check("timed", checksum, float(sum(range(n))))
    del loader
    return {"workload": "npydir", "samples_per_s": round(samples / seconds, 1)}


class LmdbDataset(Dataset):
    """The values of an LMDB environment in key order, as PyTorch users
    write one: the keys listed once, the environment opened lazily in each
    worker (LMDB's handles must not cross fork), txn.get per index."""

    def __init__(self, path):
        import lmdb

        env = lmdb.open(path, readonly=True, lock=False)
        with env.begin() as txn:
            self.keys = list(txn.cursor().iternext(values=False))
        env.close()
        self.path = path
        self.env = None

    def __len__(self):
        return len(self.keys)

    def __getitem__(self, i):
        import lmdb
        import numpy as np

        if self.env is None:
            self.env = lmdb.open(self.path, readonly=True, lock=False,
                                 readahead=False, meminit=False)
        with self.env.begin() as txn:
            return torch.from_numpy(np.frombuffer(txn.get(self.keys[i]),
                                                  dtype=np.float32))


def bench_lmdb(smoke, config):
    """An LMDB environment of 12 KiB float32 values: samples/s, one warm
    epoch, 2 workers, batch 64."""
    if config is None:
        raise ValueError("needs the environment as its config argument")
    # np.frombuffer of the bytes txn.get returns is read-only: the usual
    # code, and torch says so once per worker.
    warnings.filterwarnings("ignore", message="The given NumPy array")
    dataset = LmdbDataset(config)
    loader = make_loader(dataset, 64, 2, persistent=True)
    n = len(dataset)
    check("warm-up", run_epoch(loader)[2], float(sum(range(n))))
    seconds, _, samples, checksum = timed_epochs(loader, 1)
    check("timed", checksum, float(sum(range(n))))
    del loader
    return {"workload": "lmdb", "samples_per_s": round(samples / seconds, 1)}
class TarShards(IterableDataset):
    """WebDataset's reading of tar shards with tarfile: shard k to worker
    k % num_workers (split_by_worker), members grouped by the key before
    the first dot of the file name; each sample its .bin's floats."""

    def __init__(self, shards):
        self.shards = shards

    def __iter__(self):
        import tarfile

        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        for shard in self.shards[wid::nw]:
            key, sample = None, {}
            with tarfile.open(shard, mode="r|") as tar:
                for member in tar:
                    if not member.isreg():
                        continue
                    name = member.name.rsplit("/", 1)[-1]
                    k, ext = name.split(".", 1)
                    if k != key and sample:
                        yield sample_tensor(sample)
                        sample = {}
                    key = k
                    sample[ext] = tar.extractfile(member).read()
            if sample:
                yield sample_tensor(sample)


def sample_tensor(sample):
    return torch.frombuffer(bytearray(sample["bin"]), dtype=torch.float32)


def bench_webdataset(smoke, config):
    """Tar shards (CONFIG: comma-separated), 2 workers: samples/s."""
    if config is None:
        raise ValueError("needs the shards as its config argument")
    loader = make_loader(TarShards(config.split(",")), 64, 2,
                         persistent=True)
    _, n, _ = run_epoch(loader)
    seconds, _, samples, checksum = timed_epochs(loader, 1)
    check("timed", checksum, float(sum(range(n))))
    del loader
    return {"workload": "webdataset",
            "samples_per_s": round(samples / seconds, 1)}


def peak_rss_mb():
    """This process's peak RSS in MB (10^6 bytes): VmHWM, as the C side
    reads it (the same figure as ru_maxrss in a process that exec'd)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise BenchError("no VmHWM in /proc/self/status")


def bench_scale(smoke, config):
    """An epoch of n samples (CONFIG), shuffled by RandomSampler.

    Times the DataLoader's construction, and from iter() to the first
    batch in epoch 0 (which forks the workers) and in epoch 1 (iter()
    again, cutting epoch 0 short: the persistent workers are told to
    start over); each epoch's randperm(n).tolist() is made before the
    first indices go out.  Then this process's peak RSS, in which that
    list of n ints is.  2 persistent workers, batch 256, as the C side.
    """
    if config is None:
        raise ValueError("needs the sample count as its config argument")
    n = int(config)
    start = time.perf_counter()
    loader = make_loader(IndexDataset(n), 256, 2, persistent=True,
                         shuffle=True)
    result = {"workload": "scale", "n": n,
              "create_ms": round((time.perf_counter() - start) * 1e3, 3)}
    for epoch in (0, 1):
        start = time.perf_counter()
        it = iter(loader)
        batch = next(it)
        ms = (time.perf_counter() - start) * 1e3
        values = batch.tolist()
        if len(set(values)) != len(values) or not 0 <= min(values) \
                or max(values) >= n:
            raise BenchError("epoch %d: the first batch is not %d distinct "
                             "indices below %d" % (epoch, len(values), n))
        result["epoch%d_ms" % epoch] = round(ms, 3)
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    del batch, it, loader
    return result


def bench_resume(smoke, config, position=0):
    """Restart and skip: the first batch at a position of the epoch.

    Without a loader state, a restarted PyTorch run gets back to batch
    `position` by making a new DataLoader and iterating the epoch up to it,
    its workers loading every batch it discards.  Timed from the
    DataLoader's construction (the dataset object exists, as on the C side)
    to holding that batch; the median of RESUMES restarts.
    """
    if config is None:
        raise ValueError("needs the directory as its config argument")
    dataset = NpyFilesDataset(config)
    first = position * 64
    times = []
    for _ in range(RESUMES):
        start = time.perf_counter()
        loader = make_loader(dataset, 64, 2, persistent=True)
        it = iter(loader)
        for _ in range(position):
            next(it)
        batch = next(it)
        times.append((time.perf_counter() - start) * 1e3)
        check("first batch", first_values(batch).sum().item(),
              float(sum(range(first, first + batch.shape[0]))))
        del batch, it, loader
    return {"workload": "resume", "position": position,
            "ms_to_batch": round(percentile(times, 50), 3)}


def image_transform(name):
    """torchvision's ImageNet training or evaluation transform."""
    from torchvision import transforms

    if name == "train":
        crop = [transforms.RandomResizedCrop(224),
                transforms.RandomHorizontalFlip(0.5)]
    elif name == "eval":
        crop = [transforms.Resize(256), transforms.CenterCrop(224)]
    else:
        raise ValueError("--transform must be train or eval")
    return transforms.Compose(crop + [
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def run_image_epoch(loader):
    """One epoch of (images, labels); return (samples, pixel sum, labels)."""
    samples = 0
    pixels = labels = 0.0
    for images, targets in loader:
        pixels += first_values(images).sum().item()
        labels += targets.sum().item()
        samples += images.shape[0]
    return samples, pixels, labels


def bench_images(smoke, config, transform="train"):
    """ImageFolder and a transform, 2 workers, batch 32: one warm epoch.

    Mirrors the C side: persistent workers, a warm-up epoch, then the timed
    one; shuffled for training.  Each image's first value and each label
    are read; the labels must sum to what the folder holds.
    """
    from torchvision import datasets

    if config is None:
        raise ValueError("needs the folder as its config argument")
    dataset = datasets.ImageFolder(config,
                                   transform=image_transform(transform))
    loader = make_loader(dataset, 32, 2, persistent=True,
                         shuffle=transform == "train")
    n, want = len(dataset), float(sum(dataset.targets))
    for name in ("warm-up", "timed"):
        start = time.perf_counter()
        samples, pixels, labels = run_image_epoch(loader)
        seconds = time.perf_counter() - start
        check(name + " images", samples, n)
        check(name + " labels", labels, want)
        if not math.isfinite(pixels):
            raise BenchError("%s: the pixels sum to %r" % (name, pixels))
    del loader
    return {"workload": "images", "transform": transform,
            "images_per_s": round(samples / seconds, 1), "images": samples}


TOKENS_T = 1024


class TokenShardsDataset(Dataset):
    """llm.c's shards as nanoGPT reads them: a uint16 memmap per shard
    (after its 256-int32 header), window k of a shard the tokens from
    k*T, T + 1 of them, as int64 inputs and targets."""

    def __init__(self, directory, seq_len):
        import bisect
        import glob
        import os

        import numpy as np

        self.bisect = bisect.bisect_right
        self.seq_len = seq_len
        self.shards, self.first = [], []
        total = 0
        for path in sorted(glob.glob(os.path.join(directory,
                                                  "shard_*.bin"))):
            header = np.fromfile(path, dtype="<i4", count=256)
            if header[0] != 20240520 or header[1] != 1:
                raise ValueError("%s: not an llm.c token shard" % path)
            tokens = np.memmap(path, dtype="<u2", mode="r", offset=1024,
                               shape=(int(header[2]),))
            self.shards.append(tokens)
            self.first.append(total)
            total += (len(tokens) - 1) // seq_len
        self.len = total

    def __len__(self):
        return self.len

    def __getitem__(self, i):
        import numpy as np

        s = self.bisect(self.first, i) - 1
        at = (i - self.first[s]) * self.seq_len
        chunk = torch.from_numpy(
            self.shards[s][at:at + self.seq_len + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


def bench_tokens(smoke, config):
    """llm.c token shards: samples/s of one warm shuffled epoch."""
    if config is None:
        raise ValueError("needs the shards' directory as its config argument")
    dataset = TokenShardsDataset(config, TOKENS_T)
    want = 0.0
    for tokens in dataset.shards:
        n = (len(tokens) - 1) // TOKENS_T
        starts = tokens[0:n * TOKENS_T:TOKENS_T].astype("f8")
        want += starts.sum() + tokens[TOKENS_T:(n + 1) * TOKENS_T:
                                      TOKENS_T].astype("f8").sum()
    loader = make_loader(dataset, 8, 2, persistent=True, shuffle=True)
    for timed in (False, True):
        start = time.perf_counter()
        samples, checksum = 0, 0.0
        for x, y in loader:
            checksum += (x[:, 0].sum() + y[:, -1].sum()).item()
            samples += x.shape[0]
        seconds = time.perf_counter() - start
        check("timed" if timed else "warm-up", checksum, want)
    del loader
    return {"workload": "tokens", "samples_per_s": round(samples / seconds, 1)}


WORKLOADS = {
    "overhead": bench_overhead,
    "bandwidth": bench_bandwidth,
    "tutorial": bench_tutorial,
    "hol": bench_hol,
    "startup": bench_startup,
    "npydir": bench_npydir,
    "resume": bench_resume,
    "lmdb": bench_lmdb,
    "images": bench_images,
    "tokens": bench_tokens,
    "webdataset": bench_webdataset,
    "scale": bench_scale,
}


# ---------------------------------------------------------------- main


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but exiting 1 (not 2) on a usage error."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(1, "%s: error: %s\n" % (self.prog, message))


def parse_args(argv):
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("config", nargs="?", default=None,
                        help="tutorial: w0, w4, w4p, w4b; hol: in, out; "
                        "npydir, resume: the directory; lmdb: the "
                        "environment; images: the folder; tokens: the "
                        "shards' directory; scale: the sample count")
    parser.add_argument("--position", type=int, default=None,
                        help="resume: the batch to resume at")
    parser.add_argument("--transform", choices=("train", "eval"),
                        default=None, help="images: torchvision's training "
                        "or evaluation transform (default train)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, only to check that it runs")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(1)
    # The tutorial's 4 workers on a small machine are deliberate.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    try:
        if args.config is not None and args.workload not in ("tutorial",
                                                             "hol",
                                                             "npydir",
                                                             "resume",
                                                             "lmdb",
                                                             "images",
                                                             "tokens",
                                                             "webdataset",
                                                             "scale"):
            raise ValueError("takes no config argument")
        options = {}
        if args.position is not None:
            if args.workload != "resume":
                raise ValueError("takes no --position")
            options["position"] = args.position
        if args.transform is not None:
            if args.workload != "images":
                raise ValueError("takes no --transform")
            options["transform"] = args.transform
        result = WORKLOADS[args.workload](args.smoke, args.config, **options)
    except Exception as exc:  # noqa: BLE001 - any failure is reported
        print("torch_side.py %s: %s: %s"
              % (args.workload, type(exc).__name__, exc), file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
