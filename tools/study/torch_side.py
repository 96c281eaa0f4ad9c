"""PyTorch side of `make study`: DataLoader under the limits forkload meets.

tools/study/study.py runs this with Debian's /usr/bin/python3 (python3-torch)
as a child process, under the limits of the row it measures (RLIMIT_NOFILE,
RLIMIT_FSIZE, a private /dev/shm), once per row:

    torch_side.py exhaust --strategy file_descriptor|file_system [--fill-fds N]
    torch_side.py cow --workers N --samples S

and imports it for the parents it kills mid-epoch (kill_child).  The loader
mirrors forkload's defaults: 50,000 samples of 12,288 bytes (a float32
3x32x32 image), batches of 64, 2 workers, prefetch 2, workers forked.

exhaust holds every batch, epoch after epoch, until the DataLoader fails,
then releases them and asks for one more; it prints one JSON line with
what forkload exhaust --json reports.  With --fill-fds N it takes every fd
but N once the workers run, as forkload exhaust --fill-fds does (a program
with many open files), and gives them back before asking for one more.
cow reads one epoch of a dataset held as a Python list of numpy arrays
(the pattern of pytorch#13246), prints one JSON line with its pid and
keeps its persistent workers alive until standard input closes, so that
the driver can read their memory.
"""

import argparse
import errno
import gc
import json
import os
import signal
import sys

import numpy as np
import torch
import torch.multiprocessing
from torch.utils.data import DataLoader, Dataset

SAMPLES = 50000
SHAPE = (3, 32, 32)  # float32: 12,288 bytes, forkload's default sample
BATCH = 64
WORKERS = 2
PREFETCH = 2
# Bounds each wait for a batch once the holding has failed: a batch lost
# with its fd is never answered, and the in-order iterator would wait for
# it forever.
RECOVERY_TIMEOUT_S = 5


class Synthetic(Dataset):
    """Sample i is a float32 image of value i (exact below 2**24)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full(SHAPE, float(i))


class ArrayList(Dataset):
    """A dataset held as a Python list of small numpy arrays."""

    def __init__(self, n):
        self.items = [np.full(SHAPE, float(i), dtype=np.float32)
                      for i in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def loader(dataset, workers=WORKERS, persistent=True, timeout=0, **kw):
    return DataLoader(dataset, batch_size=BATCH, num_workers=workers,
                      prefetch_factor=PREFETCH,
                      persistent_workers=persistent, timeout=timeout, **kw)


def batch_number(batch):
    return int(batch[0].reshape(-1)[0].item()) // BATCH


def message(exc):
    """The exception's text and what raised it (PyTorch's "exited
    unexpectedly" is raised from the signal that killed the worker), a
    worker's traceback cut to its first and last lines."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    text = " ... ".join(lines[:1] + lines[-1:] if len(lines) > 1 else lines)
    cause = exc.__cause__ or exc.__context__
    return text if cause is None else "%s; from %s" % (text, describe(cause))


def describe(exc):
    text = message(exc)
    return type(exc).__name__ + (": " + text if text else "")


def open_fds():
    """fds open now; at the limit, listing them needs one more."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1
    except OSError:
        return None


def fill_fds(left):
    """Takes every fd but left below the soft RLIMIT_NOFILE, each a copy
    of one of /dev/null; returns them and the free ones counted after."""
    taken = []
    try:
        taken.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        while True:
            taken.append(os.dup(taken[0]))
    except OSError as exc:
        if exc.errno != errno.EMFILE:
            raise
    if len(taken) < left:
        raise SystemExit("--fill-fds %d: only %d fds were free" %
                         (left, len(taken)))
    for fd in taken[len(taken) - left:]:
        os.close(fd)
    del taken[len(taken) - left:]
    probe = []
    try:
        while len(probe) <= left:
            probe.append(os.dup(taken[0]) if taken else
                         os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        pass
    for fd in probe:
        os.close(fd)
    return taken, len(probe)


def exhaust(strategy, fill):
    torch.multiprocessing.set_sharing_strategy(strategy)
    held = []
    taken, free = [], None
    it = None
    try:
        data = loader(Synthetic(SAMPLES), timeout=RECOVERY_TIMEOUT_S)
        it = iter(data)  # its workers run: forked, their pipes made
        if fill is not None:
            taken, free = fill_fds(fill)
        while True:
            try:
                held.append(next(it))
            except StopIteration:
                it = iter(data)  # persistent workers: the held batches stay
    except Exception as exc:  # noqa: BLE001 - the failure studied
        # PyTorch tells of a worker's death by raising from its SIGCHLD
        # handler, anywhere in the main thread: a death told while this
        # counts is kept for the recovery attempt.
        late = []
        torch_handler = signal.signal(signal.SIGCHLD,
                                      lambda *_: late.append(1))
        error = exc
    filled = len(taken)
    for fd in taken:  # the other library's files closed: fds free again
        os.close(fd)
    result = {"strategy": strategy, "batches_held": len(held),
              "fds": open_fds(), "fds_filled": filled if fill is not None
              else None, "fds_free": free,
              "bytes_held": sum(b.storage().nbytes() for b in held),
              "error_name": type(error).__name__,
              "error_message": message(error)}
    due = len(held) % -(-SAMPLES // BATCH)  # batches in an epoch
    try:
        signal.signal(signal.SIGCHLD, torch_handler)
        if late and callable(torch_handler):
            torch_handler(signal.SIGCHLD, None)
        del held[:]
        gc.collect()
        if it is None:
            raise RuntimeError("the DataLoader never started")
        got = batch_number(next(it))
        result["recovered"] = True
        result["recovery"] = "delivered batch %d" % got
        if got != due:
            result["recovery"] += " (batch %d was lost)" % due
    except StopIteration:
        result["recovered"] = False
        result["recovery"] = ("the epoch ended instead of delivering batch %d"
                              % due)
    except Exception as exc:  # noqa: BLE001 - reported as found
        result["recovered"] = False
        result["recovery"] = describe(exc)
    return result


def cow(workers, samples):
    dataset = ArrayList(samples)
    data = loader(dataset, workers=workers)
    checksum = 0.0
    for batch in data:
        checksum += batch.reshape(batch.shape[0], -1)[:, 0].double().sum()
    if checksum != samples * (samples - 1) / 2:
        raise RuntimeError("checksum %r" % checksum)
    print(json.dumps({"pid": os.getpid(), "samples": samples}), flush=True)
    sys.stdin.read()
    del data


def kill_child(strategy):
    """A training loop that runs until it is killed; its workers are
    forked anew each epoch, as both loaders do by default."""
    torch.multiprocessing.set_sharing_strategy(strategy)
    data = loader(Synthetic(SAMPLES), persistent=False)
    while True:
        for batch in data:
            batch[0, 0, 0, 0].item()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("exhaust")
    p.add_argument("--strategy", required=True,
                   choices=("file_descriptor", "file_system"))
    p.add_argument("--fill-fds", type=int, metavar="N",
                   help="once the workers run, take every fd but N")
    p = sub.add_parser("cow")
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--samples", type=int, required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.command == "exhaust":
        print(json.dumps(exhaust(args.strategy, args.fill_fds)), flush=True)
    else:
        cow(args.workers, args.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
