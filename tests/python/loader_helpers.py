"""Shared helpers for forkload's Python tests: run forkload.DataLoader and
torch.utils.data.DataLoader the same way, compare what they hand out, and look
at the processes and /dev/shm names a loader leaves behind.

The datasets here are plain classes at module level: forkload forks its
workers, so nothing needs to be pickled, but exceptions and custom collate
results that cross from a worker to the consumer must be importable.
"""

import atexit
import collections.abc
import json
import os
import pickle
import random
import re
import select
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.utils.data as tud

import forkload
from proc_helpers import (  # noqa: F401  (the test modules import them from here)
    SHM_DIR, Fn, Gate, children, forkload_names, is_gone, proc_stat,
    wait_until)


# --------------------------------------------------------------------------
# Running both loaders
# --------------------------------------------------------------------------

class fresh:
    """A keyword value built anew for each loader (a Generator, a sampler with
    its own epoch): run_both(..., generator=fresh(lambda: make_gen(7)))."""

    def __init__(self, make):
        self.make = make


def seed_all(seed):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def draw_after():
    """What the consumer's generators give next: torch's global generator,
    random's and numpy.random's, so that two runs that drew the same number of
    values in the same order give the same tuple."""
    return (torch.rand(3), random.random(), float(np.random.rand()))


class Run:
    """The batches of each epoch of one run, and draw_after() at its end."""

    def __init__(self, epochs, after):
        self.epochs = epochs
        self.after = after


def _resolve(kwargs):
    return {k: (v.make() if isinstance(v, fresh) else v) for k, v in kwargs.items()}


def run_epochs(cls, dataset, *, seed=0, epochs=1, takes=None, before_epoch=None,
               **kwargs):
    """Seeds every generator with `seed`, builds cls(dataset, **kwargs) and
    iterates it `epochs` times (takes[e] batches of epoch e when given, None
    for all of them, breaking out of the loop otherwise).  before_epoch(loader,
    e) runs before each epoch (a sampler's set_epoch).  Returns the batches of
    every epoch and draw_after() taken after the last epoch."""
    kwargs = _resolve(kwargs)
    if takes is None:
        takes = [None] * epochs
    seed_all(seed)
    loader = cls(dataset, **kwargs)
    out = []
    for e, take in enumerate(takes):
        if before_epoch is not None:
            before_epoch(loader, e)
        batches = []
        if take is None:
            batches = list(loader)
        elif take > 0:
            for b in loader:
                batches.append(b)
                if len(batches) == take:
                    break
        out.append(batches)
    after = draw_after()
    del loader
    return Run(out, after)


def run_both(dataset, *, fl_kwargs=None, torch_kwargs=None, **kwargs):
    """The same run with forkload.DataLoader (plus fl_kwargs, its own
    keywords) and torch.utils.data.DataLoader (with torch_kwargs overriding
    kwargs: num_workers=0 makes torch's reference run cheap where the dataset
    is deterministic and says nothing of its worker, for torch hands out the
    same batches and makes the same draws from its generators with or without
    workers)."""
    fl = run_epochs(forkload.DataLoader, dataset, **kwargs, **(fl_kwargs or {}))
    th = run_epochs(tud.DataLoader, dataset, **dict(kwargs, **(torch_kwargs or {})))
    return fl, th


TORCH_IN_PROCESS = {"num_workers": 0}


def _under_asan():
    with open("/proc/self/maps") as f:
        return "libasan" in f.read()


# CI's sanitizer pass: this process runs with GCC 12's libasan preloaded,
# whose allocator takes no lock around fork: a child forked while another
# thread is inside it waits forever at its first allocation.
UNDER_ASAN = _under_asan()


# --------------------------------------------------------------------------
# torch's side of a differential test, in an interpreter of its own
# --------------------------------------------------------------------------

# Under CI's sanitizer pass (UNDER_ASAN) torch's multi-process loader, the
# reference, hangs now and then: a child it forks while another thread of
# the process holds the sanitizer allocator's lock waits for it forever.
# So torch's side runs in a plain interpreter, without the runtimes, in
# every pass alike: the plain passes run the very path the
# sanitizer pass depends on.  One interpreter serves the whole pytest run
# (importing torch takes 2 s, 5 s for torch 2), each call's function and
# arguments pickled to it and its result pickled back, length first.
REFERENCE = r"""
import faulthandler, os, pickle, signal, struct, sys, traceback, types
import warnings
# forkload's module may be built with the sanitizers, which this interpreter
# cannot load; torch's side has no use for it.
sys.modules["forkload"] = types.ModuleType(
    "forkload", "not loaded in torch's reference interpreter")
# python_test.sh's signal before it kills a hung run: the stack, as pytest's.
faulthandler.register(signal.SIGUSR2, all_threads=True)
# What pickle would not carry whole in the reply: torch 1.13 pickles no
# nested tensor and loses whether a sparse one is coalesced; torch 2
# pickles no tensor of its newer dtypes (uint16, float8, complex32...).
# Those go as tensor_as(a tensor of a classic dtype viewed, dtype's name).
import copyreg, torch
from loader_helpers import PICKLED_DTYPES, sparse_coo, tensor_as
TORCH1 = torch.__version__.split(".")[0] == "1"
WIDTH = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
def reduce_tensor(t):
    if TORCH1 and t.is_nested:
        return torch.nested.nested_tensor, (list(t.unbind()),)
    if TORCH1 and t.layout == torch.sparse_coo:
        return sparse_coo, (t._indices(), t._values(), tuple(t.shape),
                            t.is_coalesced())
    if (t.layout == torch.strided and not t.is_nested and
            t.dtype not in PICKLED_DTYPES):
        return tensor_as, (t.view(WIDTH[t.element_size()]),
                           str(t.dtype).split(".")[1])
    return t.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
copyreg.pickle(torch.Tensor, reduce_tensor)
# torch's warnings say nothing of forkload.
warnings.simplefilter("ignore")
calls = os.fdopen(0, "rb")
replies = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)  # what a dataset prints goes to stderr, not into a reply
while True:
    head = calls.read(8)
    if len(head) < 8:
        break
    call = calls.read(struct.unpack("Q", head)[0])
    try:
        fn, args, kwargs = pickle.loads(call)
        reply = pickle.dumps((True, fn(*args, **kwargs)),
                             pickle.HIGHEST_PROTOCOL)
    except BaseException:
        reply = pickle.dumps((False, traceback.format_exc()))
    replies.write(struct.pack("Q", len(reply)) + reply)
    replies.flush()
"""

# Far past any case's reference run (8 s at most): a call that takes longer
# hung.
REFERENCE_LIMIT_S = 120

_reference = None


# The dtypes whose tensors pickle whole in every torch (torch_side).
PICKLED_DTYPES = frozenset((
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.complex64, torch.complex128))


def tensor_as(t, dtype):
    """t viewed as the dtype named (torch_side's reply)."""
    return t.view(getattr(torch, dtype))


def sparse_coo(indices, values, shape, coalesced):
    """A sparse COO tensor as torch_side's reply carries it (REFERENCE)."""
    t = torch.sparse_coo_tensor(indices, values, shape)
    return t._coalesced_(coalesced)


def torch_side(fn, *args, **kwargs):
    """fn(*args, **kwargs) run in torch's reference interpreter (REFERENCE)
    and what it returned: fn a module-level function of a test module or of
    this one, its arguments and its result picklable.  What fn raises there
    fails the test here, with its traceback; so does a call that hangs or an
    interpreter that dies, and the next call starts a new one."""
    global _reference
    if _reference is None:
        _reference = subprocess.Popen([sys.executable, "-c", REFERENCE],
                                      stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, env=plain_env())
    call = pickle.dumps((fn, args, kwargs), pickle.HIGHEST_PROTOCOL)
    try:
        _reference.stdin.write(struct.pack("Q", len(call)) + call)
        _reference.stdin.flush()
        deadline = time.monotonic() + REFERENCE_LIMIT_S
        size, = struct.unpack("Q", _read_reply(8, deadline))
        ok, result = pickle.loads(_read_reply(size, deadline))
    except BaseException:
        end_reference(kill=True)
        raise
    assert ok, "torch's side raised, in the reference interpreter:\n" + result
    return result


def _read_reply(n, deadline):
    fd = _reference.stdout.fileno()
    data = bytearray()
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError("torch's side did not answer in %d s" %
                                 REFERENCE_LIMIT_S)
        chunk = os.read(fd, min(n - len(data), 1 << 20))
        if not chunk:
            raise AssertionError("torch's reference interpreter ended, "
                                 "status %s" % _reference.wait())
        data += chunk
    return bytes(data)


def reference_pid():
    """The pid of torch's reference interpreter, a child of this process
    that outlives each test (None before the first torch_side call)."""
    return None if _reference is None else _reference.pid


@atexit.register
def end_reference(kill=False):
    """Ends torch's reference interpreter (its loop ends at the end of its
    input), at once with kill."""
    global _reference
    proc, _reference = _reference, None
    if proc is None:
        return
    if kill:
        proc.kill()
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


def on_both(run, *args, **kwargs):
    """run(forkload.DataLoader, ...) here, and run(torch.utils.data.DataLoader,
    ...) on torch_side: what each returned."""
    return (run(forkload.DataLoader, *args, **kwargs),
            torch_side(run, tud.DataLoader, *args, **kwargs))


def one_epoch(cls, dataset, view=None, **kwargs):
    """Every batch of one epoch of cls(dataset, **kwargs), each as
    view(batch) where view is given (for a batch that cannot be pickled)."""
    batches = list(cls(dataset, **kwargs))
    return batches if view is None else [view(b) for b in batches]


def assert_runs_same(fl, th, *, check_after=True):
    assert len(fl.epochs) == len(th.epochs)
    for e, (a, b) in enumerate(zip(fl.epochs, th.epochs)):
        assert len(a) == len(b), "epoch %d: %d batches, torch %d" % (e, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, "epoch %d batch %d" % (e, i))
    if check_after:
        assert_same(fl.after, th.after, "generators after the run")


# --------------------------------------------------------------------------
# Comparing batches
# --------------------------------------------------------------------------

def assert_same(a, b, path="batch"):
    """a (forkload's) is b (torch's): same types all the way down (namedtuple
    and mapping types included), tensors and arrays of the same dtype, shape
    and values, dict keys in the same order, anything else equal."""
    assert type(a) is type(b), "%s: %s, torch gives %s" % (path, type(a), type(b))
    if isinstance(a, torch.Tensor) and (a.is_nested or b.is_nested or
                                        a.layout != torch.strided):
        _assert_same_unstrided(a, b, path)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype, "%s: dtype %s, torch %s" % (path, a.dtype, b.dtype)
        assert a.shape == b.shape, "%s: shape %s, torch %s" % (path, tuple(a.shape), tuple(b.shape))
        assert torch.equal(a, b), "%s: values differ:\n%s\ntorch:\n%s" % (path, a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype, "%s: dtype %s, torch %s" % (path, a.dtype, b.dtype)
        assert a.shape == b.shape, "%s: shape %s, torch %s" % (path, a.shape, b.shape)
        assert np.array_equal(a, b), "%s: values differ:\n%s\ntorch:\n%s" % (path, a, b)
    elif isinstance(a, collections.abc.Mapping):
        assert list(a.keys()) == list(b.keys()), "%s: keys %s, torch %s" % (path, list(a), list(b))
        for k in a:
            assert_same(a[k], b[k], "%s[%r]" % (path, k))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), "%s: length %d, torch %d" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, "%s[%d]" % (path, i))
    else:
        assert a == b, "%s: %r, torch %r" % (path, a, b)


def _assert_same_unstrided(a, b, path):
    """A nested tensor (which has no shape, nor torch.equal) by its
    components; a sparse one by its indices and values as they are stored
    (coalesced or not)."""
    assert (a.is_nested, a.layout, a.dtype) == (b.is_nested, b.layout, b.dtype), \
        "%s: nested %s, layout %s, dtype %s; torch %s, %s, %s" % (
            path, a.is_nested, a.layout, a.dtype, b.is_nested, b.layout, b.dtype)
    if a.is_nested:
        assert_same(list(a.unbind()), list(b.unbind()), path + ".unbind()")
        return
    assert a.shape == b.shape, "%s: shape %s, torch %s" % (path, tuple(a.shape), tuple(b.shape))
    assert a.is_coalesced() == b.is_coalesced(), "%s: coalesced %s, torch %s" % (
        path, a.is_coalesced(), b.is_coalesced())
    assert_same(a._indices(), b._indices(), path + "._indices()")
    assert_same(a._values(), b._values(), path + "._values()")


def assert_same_as_numpy(a, b, path="batch"):
    """a came from tensor_type='numpy', b is torch's batch: numpy arrays where
    torch has tensors (the dtype torch's .numpy() has), the rest as
    assert_same."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, np.ndarray), "%s: %s where torch has a tensor" % (path, type(a))
        want = b.numpy()
        assert a.dtype == want.dtype, "%s: dtype %s, torch's as numpy %s" % (path, a.dtype, want.dtype)
        assert a.shape == want.shape, "%s: shape %s, torch %s" % (path, a.shape, want.shape)
        assert np.array_equal(a, want), "%s: values differ" % path
        return
    assert type(a) is type(b), "%s: %s, torch gives %s" % (path, type(a), type(b))
    if isinstance(b, collections.abc.Mapping):
        assert list(a.keys()) == list(b.keys())
        for k in b:
            assert_same_as_numpy(a[k], b[k], "%s[%r]" % (path, k))
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_as_numpy(x, y, "%s[%d]" % (path, i))
    else:
        assert_same(a, b, path)


def outcomes(loader, limit=60, stop_at_error=False):
    """Each next() of one epoch: ('batch', batch) or ('error', type, message),
    going on after an error (or not, stop_at_error) up to StopIteration."""
    out = []
    it = iter(loader)
    for _ in range(limit):
        try:
            out.append(("batch", next(it)))
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001  (what the worker raised)
            out.append(("error", type(e), str(e)))
            if stop_at_error:
                break
    end_iterator(it)
    return out


def end_iterator(it):
    """Ends an iterator's workers now, through torch's _shutdown_workers
    (forkload's iterator has it too).  torch's exception re-raised from a
    worker keeps its iterator in a reference cycle, and torch 1.13's
    _shutdown_workers run by the collector (its __del__) waits 5 s per
    worker and leaves them unreaped."""
    shutdown = getattr(it, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def assert_outcomes_same(a, b, num_workers, messages=True):
    """forkload's outcomes a are torch's b: the same batches, the same
    exception types where torch raises; and with messages, with workers the
    same first line ("Caught X in DataLoader worker process N.") and last line
    (the original exception), without workers the same message."""
    assert [o[0] for o in a] == [o[0] for o in b]
    for i, (x, y) in enumerate(zip(a, b)):
        if x[0] == "batch":
            assert_same(x[1], y[1], "next() %d" % i)
            continue
        assert x[1] is y[1], "next() %d: %s, torch raises %s" % (i, x[1], y[1])
        if not messages:
            continue
        if num_workers:
            assert x[2].splitlines()[0] == y[2].splitlines()[0]
            assert x[2].splitlines()[-1] == y[2].splitlines()[-1]
        else:
            assert x[2] == y[2]


def freeze(x):
    """A hashable, comparable form of a batch, for comparing multisets."""
    if isinstance(x, torch.Tensor) and x.is_nested:
        return ("nested", str(x.layout), tuple(freeze(t) for t in x.unbind()))
    if isinstance(x, torch.Tensor) and x.layout != torch.strided:
        return (str(x.layout), freeze(x._indices()), freeze(x._values()))
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype), tuple(x.shape), repr(x.flatten().tolist()))
    if isinstance(x, np.ndarray):
        return ("ndarray", str(x.dtype), x.shape, repr(x.flatten().tolist()))
    if isinstance(x, collections.abc.Mapping):
        return (type(x).__name__, tuple((k, freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(freeze(v) for v in x))
    return ("value", repr(x))


def multiset(batches):
    return sorted(freeze(b) for b in batches)


# --------------------------------------------------------------------------
# Datasets
# --------------------------------------------------------------------------

def worker_id():
    """The worker's id as torch.utils.data.get_worker_info() reports it (the
    spec says it works in forkload's workers as well), -1 in the consumer."""
    info = tud.get_worker_info()
    return -1 if info is None else info.id


class IndexDataset(tud.Dataset):
    """Sample i: {'x': float32 [i, -i, 0.5 i], 'i': i, 'w': the worker's id}
    (without 'w' when with_worker is False)."""

    def __init__(self, n, with_worker=True):
        self.n = n
        self.with_worker = with_worker

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        s = {"x": torch.tensor([i, -i, 0.5 * i], dtype=torch.float32), "i": i}
        if self.with_worker:
            s["w"] = worker_id()
        return s


class FnDataset(Fn, tud.Dataset):
    """Sample i is fn(i), a torch Dataset."""


class PidDataset(tud.Dataset):
    """Sample i is the pid of the process that read it."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return os.getpid()


class ShardedIterable(tud.IterableDataset):
    """Values 0..total-1 split over the workers in shards of uneven length
    (worker w's weight w+1), each sample (value, worker id); all of them in
    order without workers.  With shard=False every worker yields the whole
    stream (what torch does with an unsharded IterableDataset)."""

    def __init__(self, total, shard=True, length=None):
        self.total = total
        self.shard = shard
        self.length = length

    def bounds(self, wid, nw):
        weights = [w + 1 for w in range(nw)]
        edges = [0]
        for w in range(nw):
            edges.append(self.total * sum(weights[:w + 1]) // sum(weights))
        return edges[wid], edges[wid + 1]

    def __iter__(self):
        info = tud.get_worker_info()
        if info is None or not self.shard:
            lo, hi = 0, self.total
        else:
            lo, hi = self.bounds(info.id, info.num_workers)
        wid = -1 if info is None else info.id
        for v in range(lo, hi):
            yield (v, wid)


class SizedShardedIterable(ShardedIterable):
    def __len__(self):
        return self.total if self.length is None else self.length


class Regression(tud.Dataset):
    """The dataset of the frameworks' scripts (lightning_ddp.py,
    accelerate_ddp.py): x drawn from a generator seeded with i, jittered
    from the reading process's own generator (a worker's, seeded by its
    loader); y linear in x; i; and 1 where a forkload worker read the
    sample (forkload.get_worker_info()), else 0."""

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
        return {"x": x, "y": y, "i": i,
                "fl": int(forkload.get_worker_info() is not None)}


def read_ranks(out, n=2):
    """What each of n ranks of a distributed script wrote (out/rank<R>.json),
    each rank checked to have left no name of its own in /dev/shm."""
    ranks = [json.loads((out / f"rank{i}.json").read_text())
             for i in range(n)]
    for rank in ranks:
        assert not forkload_names(rank["pid"]), \
            "rank %d left names in /dev/shm" % rank["rank"]
    return ranks


def subprocess_env():
    """The environment for a child interpreter: this one's, with the
    directories that made `import forkload` and `import loader_helpers` work
    first on PYTHONPATH."""
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    mod = os.path.abspath(forkload.__file__)
    pkg = os.path.dirname(mod)
    if os.path.basename(mod).startswith("__init__."):
        pkg = os.path.dirname(pkg)
    parts = [pkg, here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def plain_env():
    """subprocess_env() without the sanitizers' runtimes preloaded nor their
    options: for a child that must run as in the plain passes."""
    env = subprocess_env()
    preload = [p for p in re.split(r"[ :]+", env.pop("LD_PRELOAD", ""))
               if p and not os.path.basename(p).startswith(("libasan",
                                                            "libubsan"))]
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    env.pop("ASAN_OPTIONS", None)
    env.pop("UBSAN_OPTIONS", None)
    return env


def torchrun_command(nproc, log_dir):
    """`python -m torch.distributed.run --standalone --nproc_per_node N`
    (torchrun, with a rendezvous of its own on a free port), for this
    interpreter.  torch 1.13's torchrun cannot parse its own default
    --redirects/--tee of "0" under Python 3.11 (its Std.from_str finds no
    member for 0), so where that is so both are given as "1": each rank's
    stdout goes to a file under log_dir and to the console, as it does
    without them."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(nproc)]
    from torch.distributed.elastic.multiprocessing.api import Std
    if Std.from_str("0") is None:
        cmd += ["--redirects", "1", "--tee", "1", "--log_dir", str(log_dir)]
    return cmd
