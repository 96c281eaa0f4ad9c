"""Leaks (issue 43): every dtype torch's default_collate handles, through
each way a batch is made (the module's C collate, torch's own collate for
what C does not write, a collate_fn, default_convert with batch_size=None,
pin_memory), over thousands of batches from two persistent workers: the
workers' and the consumer's memory stays flat.

Each test runs a warm-up (WARM_EPOCHS epochs, or TORCH_WARM_EPOCHS
where torch's own collate, stack or as_tensor runs in the workers),
counts, runs the measured batches (FL_LEAK_BATCHES, in 4 epochs), counts
again.  A count is taken at the end of an epoch, when the workers wait
for the next one, and holds:

- in each worker, sys.getallocatedblocks() (every live Python object is
  at least one block of CPython's allocator, so a leaked sample, array or
  reference is counted one by one), written by the worker itself when it
  starts its last batch of the epoch, to a page shared with the consumer;
  its anonymous memory (what malloc holds: tensor data, the C code's
  allocations) from /proc/PID/smaps_rollup; its open descriptors;
- in the consumer, the same three, and len(gc.get_objects()).

A leak of one small object per batch grows a count by a thousand or
more; without a leak each stays within the bounds below (what was
measured).  At the end the loader goes: conftest.py checks that no
worker and no /dev/shm name is left, assert_flat that no descriptor is.

The known earlier leak, the collate fallback keeping one sample per batch
alive in the worker (+65 MB per 4,000 batches of 64 uint64 samples of
2,048 elements), is the fallback tests' case at a smaller size: put back
(array_of without array_drop), it grows a worker's blocks by 2,000 to
29,000 in those tests.
"""

import collections
import ctypes
import gc
import mmap
import os
import sys

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402
from torch.utils.data._utils.collate import default_collate, default_convert  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import UNDER_ASAN, FnDataset, children, wait_until  # noqa: E402
# pin_memory's engine without a GPU, a fixture:
from test_pinned import fake_cuda  # noqa: E402,F401

N = 64       # elements a sample
BS = 8
WORKERS = 2
WARM_EPOCHS = 2
# torch's own code in a worker grows its blocks for a while before they
# settle (see the bounds): a longer warm-up there.
TORCH_WARM_EPOCHS = 4
# The measured batches: 2,000 take about a second a test here.  As many
# under the sanitizers: they slow the module's C code, not the Python
# that takes most of a batch's time, and the bounds are for 2,000.
BATCHES = int(os.environ.get("FL_LEAK_BATCHES", "2000"))
EPOCHS = 4


# AddressSanitizer keeps freed memory in quarantine (256 MiB by default):
# a process's anonymous memory grows with what it frees, leak or not.
# The block counts do not see it (CPython's allocator stays in charge of
# its blocks), so under ASan (UNDER_ASAN) they alone are bounded.

# The bounds, from what was measured (torch 1.13 and 2.13, 2,000 batches
# a test, several runs, the machine loaded or not): where the C path
# collates, a worker's blocks grew by 0 (+-1); where torch's own collate,
# stack or as_tensor runs in the worker (the fallback, a collate_fn,
# default_convert), by up to ~110 after TORCH_WARM_EPOCHS (up to ~440
# after 2): growth that slows and stops, torch's doing (default_collate
# of complex32 or uint16 samples in a plain process, no forkload code
# run, grows so too).  Its anonymous memory grew by 0 kB.  The consumer's
# blocks grew by up to ~310 (~16 where nothing else: the first count
# itself), its gc objects by 1 (that count), its anonymous memory by
# 0 kB once malloc's free memory is trimmed (untrimmed, by up to ~420 kB
# in a process's first test and ~1.1 MB after a whole suite's: free
# memory that glibc's moving thresholds kept).  A
# leak of one object a batch is >= 1,000 blocks a worker and >= 2,000 in
# the consumer; of one 64-element sample a batch, ~1 MB of a worker's
# anonymous memory.  The bounds lie between, 2 to 3x from each side.
WORKER_BLOCKS = 300
PARENT_BLOCKS = 600
PARENT_OBJECTS = 100
WORKER_ANON_KB = 384
PARENT_ANON_KB = 1024


# --------------------------------------------------------------------------
# The samples
# --------------------------------------------------------------------------

C_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16",
            "bfloat16", "float32", "float64", "complex64", "complex128"]
# Dtypes the C path does not write; the installed torch collates those it
# has (torch 1.13 complex32 alone, torch 2 the unsigned and float8 ones).
OTHER_DTYPES = ["complex32", "uint16", "uint32", "uint64", "float8_e4m3fn",
                "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "float8_e8m0fnu"]


def _works(fn, v):
    """fn (torch's default_collate or default_convert) takes v here."""
    try:
        fn([v, v] if fn is default_collate else v)
        return True
    except (TypeError, RuntimeError):
        return False


def arrays_of(name, fn=default_collate):
    """{kind: value} for one dtype: a tensor, a numpy array and a numpy
    scalar, each where numpy has the dtype and the installed torch's fn
    takes it, the tensor too."""
    dtype = getattr(torch, name, None)
    if dtype is None:
        return {}
    t = torch.arange(N).to(dtype)
    out = {"tensor": t}
    if name == "bool":
        a = np.arange(N).astype(np.bool_)
    elif hasattr(np, name):
        a = np.arange(N).astype(name)
    else:
        a = None
    if a is not None:
        out["array"] = a
        out["scalar"] = a[1]
    return {k: v for k, v in out.items() if _works(fn, v)}


class Mine:
    """An object of a collate_fn's own: it travels pickled."""

    def __init__(self, n):
        self.n = n


Pair = collections.namedtuple("Pair", "i f")


def fresh(v, i):
    """A new object of v's kind for sample i: what a dataset hands out is
    made anew, so that one kept alive by mistake is one more block."""
    if isinstance(v, torch.Tensor):
        return v.clone()
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, np.generic):
        return v.dtype.type(v)
    return v


class Template:
    """Sample i: a dict of fresh copies of `values`, and with python set,
    python numbers (past the interpreter's cached small ints), a string
    and a namedtuple of them."""

    def __init__(self, values, python=False):
        self.values = values
        self.python = python

    def __call__(self, i):
        s = {k: fresh(v, i) for k, v in self.values.items()}
        if self.python:
            s.update(int=1000 + i, float=0.5 * i, str=str(i),
                     pair=Pair(1000 + i, 0.25 * i))
        return s


def every_dtype(fn, names=C_DTYPES + OTHER_DTYPES):
    """{dtype/kind: value} of every dtype of names the installed torch's
    fn takes."""
    return {"%s/%s" % (name, kind): v for name in names
            for kind, v in arrays_of(name, fn).items()}


# --------------------------------------------------------------------------
# Counting
# --------------------------------------------------------------------------

PID, BLOCKS, COUNTS, FALLBACKS = range(4)


class Counted(tud.Dataset):
    """Sample i is make(i).  A worker counts at the first sample of the
    last batch it reads in an epoch (batches go to the workers in turn),
    when the batch before has been written and let go: it writes its pid,
    sys.getallocatedblocks() and how many counts it made to its row of a
    page shared with the consumer (mapped before the fork).  Counted at
    the same point of each epoch, a worker's blocks repeat to the block
    where nothing leaks; counted at each batch, or after a full
    collection, they wandered by hundreds (the interpreter's free lists,
    the collector's timing)."""

    def __init__(self, make, batches, bs=BS):
        self.make = make
        self.n = batches * bs
        self.bs = bs
        page = mmap.mmap(-1, mmap.PAGESIZE)
        self.rows = np.frombuffer(page, dtype=np.int64)[:WORKERS * 4]
        self.rows = self.rows.reshape(WORKERS, 4)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i % self.bs == 0 and i >= self.n - WORKERS * self.bs:
            info = tud.get_worker_info()
            if info is not None:
                self.rows[info.id, PID] = os.getpid()
                self.rows[info.id, BLOCKS] = sys.getallocatedblocks()
                self.rows[info.id, COUNTS] += 1
        return self.make(i)


def count_fallbacks(monkeypatch, ds):
    """torch's default_collate, which the C path's fallback
    (forkload._worker.torch_collate) looks up at each call, counting its
    calls in each worker's row (the workers fork with it in place)."""
    collate = tud._utils.collate
    original = collate.default_collate

    def counting(samples):
        ds.rows[tud.get_worker_info().id, FALLBACKS] += 1
        return original(samples)
    monkeypatch.setattr(collate, "default_collate", counting)


LIBC = ctypes.CDLL("libc.so.6")


def anon_kb(pid):
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            if line.startswith("Anonymous:"):
                return int(line.split()[1])
    raise AssertionError("no Anonymous: in /proc/%d/smaps_rollup" % pid)


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


class Count:
    """The counts of the consumer and of each worker (by pid), now."""

    def __init__(self, ds):
        gc.collect()
        self.objects = len(gc.get_objects())
        self.blocks = sys.getallocatedblocks()
        # What malloc holds free goes back first: glibc's thresholds for
        # returning it move with what the process did before (the tests
        # run earlier in it), and free memory is no leak.
        LIBC.malloc_trim(0)
        self.anon_kb = anon_kb(os.getpid())
        self.fds = fds(os.getpid())
        kids = children()
        assert len(kids) == WORKERS, "workers: %s" % kids
        self.workers = {}
        for wid in range(WORKERS):
            pid = int(ds.rows[wid, PID])
            assert pid in kids, "worker %d (pid %d): no child" % (wid, pid)
            self.workers[pid] = (int(ds.rows[wid, BLOCKS]), anon_kb(pid),
                                 fds(pid), int(ds.rows[wid, COUNTS]))


def assert_flat(make_loader, ds, check=lambda batch: None,
                before_count=lambda: None, warm_epochs=WARM_EPOCHS):
    """Runs make_loader() (on ds, 2 persistent workers) for warm_epochs
    epochs, counts, runs BATCHES more in EPOCHS epochs, counts again, and
    asserts that nothing grew past its bound; check(batch) sees the last
    batch of each epoch.  At the end the loader goes and the consumer's
    descriptors are as they were before it.  Returns the growth (for the
    report: pytest -s prints it)."""
    fds_before = fds(os.getpid())
    loader = make_loader()
    assert loader.persistent_workers and loader.num_workers == WORKERS

    def epoch():
        n = 0
        for batch in loader:
            n += 1
        check(batch)
        assert n == len(loader)

    for _ in range(warm_epochs):
        epoch()
    before_count()
    start = Count(ds)
    for _ in range(EPOCHS):
        epoch()
    before_count()
    end = Count(ds)
    assert start.workers.keys() == end.workers.keys(), "a worker was replaced"
    for pid, w in end.workers.items():
        assert w[3] - start.workers[pid][3] == EPOCHS, \
            "worker %d did not count once an epoch" % pid
    growth = {
        "consumer": (end.blocks - start.blocks, end.objects - start.objects,
                     end.anon_kb - start.anon_kb, end.fds - start.fds),
        "workers": [(b1 - start.workers[pid][0], a1 - start.workers[pid][1],
                     f1 - start.workers[pid][2])
                    for pid, (b1, a1, f1, _) in end.workers.items()],
    }
    print("\n%d batches: consumer blocks, objects, anon kB, fds %s; "
          "workers blocks, anon kB, fds %s" % (
              len(loader) * EPOCHS, growth["consumer"], growth["workers"]))
    blocks, objects, anon, nfds = growth["consumer"]
    assert blocks <= PARENT_BLOCKS, growth
    assert objects <= PARENT_OBJECTS, growth
    assert nfds <= 0, growth
    assert UNDER_ASAN or anon <= PARENT_ANON_KB, \
        "consumer's memory: %s" % growth
    for blocks, anon, nfds in growth["workers"]:
        assert blocks <= WORKER_BLOCKS, growth
        assert nfds <= 0, growth
        assert UNDER_ASAN or anon <= WORKER_ANON_KB, growth
    del loader
    gc.collect()
    assert wait_until(lambda: not children(), 10), "workers left"
    assert wait_until(lambda: fds(os.getpid()) <= fds_before, 5), \
        "descriptors left: %d, %d before" % (fds(os.getpid()), fds_before)
    return growth


@pytest.fixture(scope="module", autouse=True)
def one_loader_first():
    """A loader run once before the tests: what the first loop of a
    process makes once and keeps (libuv's signal lock pipe, two
    descriptors) is then not counted as a test's."""
    for _ in forkload.DataLoader(range(4), batch_size=2, num_workers=2):
        pass


def loader_of(ds, **kwargs):
    kwargs.setdefault("batch_size", ds.bs)
    return lambda: forkload.DataLoader(ds, num_workers=WORKERS,
                                       persistent_workers=True, **kwargs)


def batches_a_epoch():
    return BATCHES // EPOCHS


# A sample of every dtype is some 40 arrays: in batches of 2 such a test
# takes about the others' time for as many batches (a leak is counted by
# the batch).
EVERY_BS = 2


# --------------------------------------------------------------------------
# default_collate in C
# --------------------------------------------------------------------------

@pytest.mark.parametrize("name", C_DTYPES)
def test_c_collate_of_tensors_arrays_and_scalars_of_dtype_leaks_nothing(
        name, monkeypatch):
    values = arrays_of(name)
    ds = Counted(Template(values), batches_a_epoch())
    count_fallbacks(monkeypatch, ds)

    def check(batch):
        assert set(batch) == set(values)
        assert batch["tensor"].dtype == getattr(torch, name)
        assert batch["tensor"].shape == (BS, N)

    assert_flat(loader_of(ds), ds, check)
    assert not ds.rows[:, FALLBACKS].any(), "torch's collate was called"


class Leaking:
    """A loader whose consumer mallocs a kilobyte a batch and never frees
    it: what a leak in the module's C code would be, which no count of
    Python's sees."""

    def __init__(self, loader):
        self.loader = loader
        self.persistent_workers = loader.persistent_workers
        self.num_workers = loader.num_workers

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for batch in self.loader:
            ctypes.memset(LIBC.malloc(1024), 1, 1024)
            yield batch


LIBC.malloc.restype = ctypes.c_void_p


@pytest.mark.skipif(UNDER_ASAN, reason="AddressSanitizer's quarantine grows the "
                    "consumer's memory leak or not: its bound is off")
def test_the_control_a_kilobyte_of_c_memory_a_batch_in_the_consumer_fails():
    ds = Counted(Template(arrays_of("int64")), batches_a_epoch())
    with pytest.raises(AssertionError) as e:
        assert_flat(lambda: Leaking(loader_of(ds)()), ds)
    assert "consumer's memory" in str(e.value), e.value


def test_c_collate_of_python_numbers_strings_and_namedtuples_leaks_nothing(
        monkeypatch):
    ds = Counted(Template({}, python=True), batches_a_epoch())
    count_fallbacks(monkeypatch, ds)

    def check(batch):
        assert batch["int"].dtype == torch.int64
        assert isinstance(batch["pair"], Pair) and len(batch["str"]) == BS

    assert_flat(loader_of(ds), ds, check)
    assert not ds.rows[:, FALLBACKS].any(), "torch's collate was called"


# --------------------------------------------------------------------------
# torch's default_collate, for what C does not write
# --------------------------------------------------------------------------

# The float8 variants take one path (a DLPack dtype C refuses): one test
# for all of them.
FLOAT8 = [name for name in OTHER_DTYPES if name.startswith("float8")]
FALLBACKS_BY_TEST = {name: [name] for name in OTHER_DTYPES
                     if name not in FLOAT8}
FALLBACKS_BY_TEST["float8"] = FLOAT8


@pytest.mark.parametrize("test", [t for t, names in FALLBACKS_BY_TEST.items()
                                  if every_dtype(default_collate, names)])
def test_torch_collate_fallback_of_dtype_leaks_nothing(test, monkeypatch):
    values = every_dtype(default_collate, FALLBACKS_BY_TEST[test])
    ds = Counted(Template(values), batches_a_epoch())
    count_fallbacks(monkeypatch, ds)

    def check(batch):
        for k, v in values.items():
            assert batch[k].dtype == (v.dtype if isinstance(v, torch.Tensor)
                                      else torch.as_tensor(v).dtype), k
            assert batch[k].shape[0] == BS

    assert_flat(loader_of(ds), ds, check, warm_epochs=TORCH_WARM_EPOCHS)
    # Each column of each batch went to torch's collate.
    calls = int(ds.rows[:, FALLBACKS].sum())
    assert calls == len(values) * batches_a_epoch() * (TORCH_WARM_EPOCHS +
                                                       EPOCHS)


# --------------------------------------------------------------------------
# A collate_fn, default_convert, pin_memory: every dtype at once
# --------------------------------------------------------------------------

def user_collate(samples):
    """What a user writes: tensors and arrays stacked, the rest listed,
    and an object of its own."""
    out = {}
    for k, v in samples[0].items():
        column = [s[k] for s in samples]
        if isinstance(v, torch.Tensor):
            out[k] = torch.stack(column)
        elif isinstance(v, np.ndarray):
            out[k] = np.stack(column)
        else:
            out[k] = column
    out["mine"] = Mine(len(samples))
    return out


def test_collate_fn_of_every_dtype_leaks_nothing():
    values = every_dtype(default_collate)
    ds = Counted(Template(values, python=True), batches_a_epoch(),
                 bs=EVERY_BS)

    def check(batch):
        assert isinstance(batch["mine"], Mine) and batch["mine"].n == EVERY_BS
        for k, v in values.items():
            assert type(batch[k]) is (type(v) if k.endswith("/tensor") or
                                      k.endswith("/array") else list), k

    assert_flat(loader_of(ds, collate_fn=user_collate), ds, check,
                warm_epochs=TORCH_WARM_EPOCHS)


def test_default_convert_without_batching_of_every_dtype_leaks_nothing():
    values = every_dtype(default_convert)
    # One sample a batch: a count at each (bs 1), as many batches.
    ds = Counted(Template(values, python=True), batches_a_epoch(), bs=1)

    def check(batch):
        for k, v in values.items():
            assert isinstance(batch[k], torch.Tensor), k

    assert_flat(loader_of(ds, batch_size=None), ds, check,
                warm_epochs=TORCH_WARM_EPOCHS)


def test_pin_memory_of_every_c_dtype_leaks_nothing(fake_cuda):  # noqa: F811
    # Without a GPU the fake engine of test_pinned stands in for CUDA: the
    # segments are registered and an event is recorded as each batch goes
    # (completed at once here); the engine logs each event, and the log is
    # emptied before each count.  Pinning is of the segment's arrays: the
    # dtypes C does not write travel pickled, and are left out.
    fake_cuda.auto_complete = True
    values = every_dtype(default_collate, C_DTYPES)
    ds = Counted(Template(values, python=True), batches_a_epoch(),
                 bs=EVERY_BS)

    def forget():
        fake_cuda.events.clear()
        fake_cuda.log.clear()

    def check(batch):
        assert fake_cuda.pinned(batch["float32/tensor"].data_ptr())

    assert_flat(loader_of(ds, pin_memory=True), ds, check, forget)


# --------------------------------------------------------------------------
# The refleak run's cases: batches of Python objects alone
# --------------------------------------------------------------------------

# tests/python_refleak_test.sh runs these under python3.11-dbg, where
# sys.gettotalrefcount() counts the references of the interpreter and of
# code built for it (the module, built so by the script), not those of
# Debian's torch and numpy, built for the release interpreter: a batch
# with a tensor or an array in it moves the count by a few references
# though nothing leaks.  Batches of Python objects alone (strings,
# numbers, None, dicts, lists and namedtuples; a sequential sampler, no
# torch call an epoch) leave it where it was (default_collate makes
# numbers tensors: strings alone there).  With no workers the
# worker's side (the collate walk, the pickling) runs in the process,
# counted too.

def python_objects(i):
    return {"text": "sample %d" % i, "pair": Pair(1000 + i, 0.5 * i),
            "none": None, "list": [str(i), i + 1000]}


def strings(i):
    return {"text": "sample %d" % i, "words": ("a", str(i))}


def as_python(samples):
    """A collate_fn of Python objects alone."""
    return [("batch", len(samples)), samples, Mine(len(samples))]


@pytest.mark.parametrize("num_workers", [0, WORKERS])
@pytest.mark.parametrize("how", ["default_collate", "collate_fn",
                                 "without_batching"])
def test_python_object_batches_each_path(how, num_workers):
    # No Counted: its page is a numpy array.
    ds = FnDataset(64 * 4, strings if how == "default_collate"
                   else python_objects)
    kwargs = {"collate_fn": as_python} if how == "collate_fn" else \
        {"batch_size": None} if how == "without_batching" else {}
    kwargs.setdefault("batch_size", 4)
    loader = forkload.DataLoader(ds, num_workers=num_workers,
                                 persistent_workers=num_workers > 0,
                                 **kwargs)
    for _ in range(2):
        batches = list(loader)
        assert len(batches) == len(loader)
    last = batches[-1]
    if how == "collate_fn":
        assert last[0] == ("batch", 4) and last[2].n == 4
    elif how == "without_batching":
        assert last == python_objects(len(ds) - 1)
    else:
        assert last["text"] == ["sample %d" % i for i in range(len(ds) - 4,
                                                              len(ds))]
        assert last["words"][0] == ("a",) * 4
