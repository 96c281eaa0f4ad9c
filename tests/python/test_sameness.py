"""Where forkload.DataLoader once differed from torch's loader in silence
(issue 43): each case runs what a user writes through both loaders, with 0
and 2 workers, and compares what they hand out.

Wherever a case iterates torch's loader, it does so in torch's reference
interpreter (loader_helpers' torch_side), not in this process: under CI's
sanitizer pass torch's workers forked from here hang now and then.  What
comes back is pickled (a case's view of a batch where the batch cannot be);
what only makes torch's loader, which forks nothing, is asked here."""

import ast
import gc
import os
import shutil
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (FnDataset, PidDataset, ShardedIterable,  # noqa: E402
                            assert_same, end_iterator, is_gone, on_both,
                            one_epoch, subprocess_env, torch_side,
                            wait_until)

WORKERS = [0, 2]


def both(dataset, **kwargs):
    """Every batch of one epoch from forkload's loader and torch's
    (one_epoch's, view= included)."""
    return on_both(one_epoch, dataset, **kwargs)


def assert_batches_same(fl, th):
    assert len(fl) == len(th), "%d batches, torch %d" % (len(fl), len(th))
    for i, (a, b) in enumerate(zip(fl, th)):
        assert_same(a, b, "batch %d" % i)


# --------------------------------------------------------------------------
# A persistent loader that nobody names
# --------------------------------------------------------------------------

def test_for_over_an_unnamed_persistent_loader_gets_every_batch():
    got = [b.tolist() for b in forkload.DataLoader(
        list(range(6)), batch_size=2, num_workers=2,
        persistent_workers=True)]
    assert got == [[0, 1], [2, 3], [4, 5]]


def test_next_of_iter_of_an_unnamed_persistent_loader_is_the_first_batch():
    first = next(iter(forkload.DataLoader(list(range(6)), batch_size=2,
                                          num_workers=2,
                                          persistent_workers=True)))
    assert first.tolist() == [0, 1]


def test_iterator_kept_after_del_loader_goes_on_as_torchs_does():
    loader = forkload.DataLoader(list(range(8)), batch_size=2, num_workers=2,
                                 persistent_workers=True)
    it = iter(loader)
    del loader
    assert [b.tolist() for b in it] == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_del_loader_between_epochs_ends_its_persistent_workers_at_once():
    loader = forkload.DataLoader(PidDataset(8), batch_size=2, num_workers=2,
                                 persistent_workers=True)
    pids = {p for b in loader for p in b.tolist()}
    assert len(pids) == 2 and not any(is_gone(p, os.getpid()) for p in pids)
    del loader  # no gc.collect(): the workers go with the last reference
    assert wait_until(lambda: all(is_gone(p, os.getpid()) for p in pids), 10)


# --------------------------------------------------------------------------
# A batch that is None is a batch
# --------------------------------------------------------------------------

def reject_odd_batches(batch):
    """A collate_fn that rejects a batch by returning None (batch 1 here)."""
    return None if batch[0] % 4 == 2 else [int(x) for x in batch]


@pytest.mark.parametrize("num_workers", WORKERS)
def test_collate_fn_returning_none_is_a_batch_not_the_end(num_workers):
    fl, th = both(list(range(6)), batch_size=2, num_workers=num_workers,
                  collate_fn=reject_odd_batches)
    assert fl == th == [[0, 1], None, [4, 5]]


def none_at_even(i):
    return None if i % 2 == 0 else i


@pytest.mark.parametrize("num_workers", WORKERS)
def test_unbatched_samples_that_are_none_are_handed_out(num_workers):
    ds = FnDataset(5, none_at_even)
    fl, th = both(ds, batch_size=None, num_workers=num_workers)
    assert_batches_same(fl, th)
    assert len(fl) == 5 and fl[0] is None and fl[4] is None


# --------------------------------------------------------------------------
# Batches share no mutable object
# --------------------------------------------------------------------------

class Meta:
    """A metadata object a collate_fn adds to each batch, the same each
    time (module level: it crosses from the workers pickled)."""

    def __init__(self):
        self.tags = ["train"]

    def __eq__(self, other):
        return type(other) is Meta and other.tags == self.tags


def collate_with_metadata(batch):
    return {"x": torch.tensor(batch), "meta": Meta(), "seen": set(),
            "names": ["a", "b"], "info": {"split": "train", "ids": []},
            "frozen": ("k", ["nested"])}


@pytest.mark.parametrize("num_workers", WORKERS)
def test_batches_with_equal_metadata_share_no_object(num_workers):
    fl, th = both(list(range(6)), batch_size=2, num_workers=num_workers,
                  collate_fn=collate_with_metadata)
    assert_batches_same(fl, th)
    for key in ("meta", "seen", "names", "info"):
        ids = {id(b[key]) for b in fl}
        assert len(ids) == 3, "%s: batches share it" % key
    assert len({id(b["frozen"][1]) for b in fl}) == 3
    fl[0]["meta"].tags.append("edited")
    fl[0]["seen"].add(1)
    fl[0]["info"]["ids"].append(7)
    fl[0]["frozen"][1].append("edited")
    for b in fl[1:]:
        assert b["meta"].tags == ["train"] and b["seen"] == set()
        assert b["info"]["ids"] == [] and b["frozen"][1] == ["nested"]


def named_same(i):
    return {"x": i, "name": "same"}


@pytest.mark.parametrize("num_workers", WORKERS)
def test_default_collate_of_equal_strings_gives_each_batch_its_own_list(
        num_workers):
    ds = FnDataset(6, named_same)
    fl, th = both(ds, batch_size=2, num_workers=num_workers)
    assert_batches_same(fl, th)
    assert len({id(b["name"]) for b in fl}) == 3
    fl[0]["name"].append("edited")
    assert fl[1]["name"] == ["same", "same"]


# --------------------------------------------------------------------------
# What torch's fallback collates, or refuses, is not kept
# --------------------------------------------------------------------------

# Where torch's own default_collate makes the batch: dtypes the C path does
# not write (torch 2 collates them; torch 1.13 refuses some of them).
FALLBACK_DTYPES = [np.uint16, np.uint32, np.uint64, torch.complex32]
if hasattr(torch, "uint16"):
    FALLBACK_DTYPES += [torch.uint16, torch.uint32, torch.uint64]


class Tracked(tud.Dataset):
    """Samples of a dtype that goes through torch's collate, each with a
    finalizer: `live` counts the samples made and not yet freed, and
    each sample's `live` field says the count when it was made."""

    def __init__(self, n, dtype):
        self.n, self.dtype = n, dtype
        self.live = [0]

    def __len__(self):
        return self.n

    def _gone(self):
        self.live[0] -= 1

    def __getitem__(self, i):
        if isinstance(self.dtype, torch.dtype):
            x = torch.full((256,), i % 7).to(self.dtype)
        else:
            x = np.full(256, i % 7, dtype=self.dtype)
        self.live[0] += 1
        weakref.finalize(x, self._gone)
        return {"x": x, "live": self.live[0]}


def samples_left(cls, dtype):
    """The samples of 8 epochs of 8 batches that are still alive once
    the loader and its batches are gone, and how many batches came."""
    ds = Tracked(64, dtype)
    loader = cls(ds, batch_size=8)
    got = refused = 0
    for _ in range(8):
        it = iter(loader)
        while True:
            try:
                next(it)
            except StopIteration:
                break
            except TypeError:  # torch 1.13's refusal of the dtype
                refused += 1
            else:
                got += 1
        del it
    del loader
    gc.collect()
    return ds.live[0], got, refused


@pytest.mark.parametrize("dtype", FALLBACK_DTYPES, ids=str)
def test_samples_torch_collates_are_freed_in_the_consumer(dtype):
    # torch 1.13's own torch.as_tensor keeps a reference to a numpy array
    # whose dtype it refuses (the batch's first): its loader keeps those
    # too, and forkload's may keep no more.
    fl, th = on_both(samples_left, dtype)
    assert fl[1:] == th[1:] and fl[1] + fl[2] == 64
    assert fl[0] == th[0], "%d samples never freed, torch %d" % (fl[0],
                                                                 th[0])


@pytest.mark.parametrize("dtype", FALLBACK_DTYPES, ids=str)
def test_samples_torch_collates_are_freed_in_the_workers(dtype):
    ds = Tracked(2000, dtype)
    try:
        tud.default_collate([ds[0], ds[1]])
    except TypeError:
        pytest.skip("this torch (%s) refuses %s: no batch carries the "
                    "count" % (torch.__version__, dtype))
    most = 0
    for b in forkload.DataLoader(ds, batch_size=8, num_workers=2):
        most = max(most, int(b["live"].max()))
    # A worker holds its batch's 8 samples, a few more while the collector
    # has not run: never a count that grows with the batches.
    assert most <= 64, "a worker held %d samples at once" % most


# --------------------------------------------------------------------------
# Other threads run while a loader stops its workers
# --------------------------------------------------------------------------

class Slow(tud.Dataset):
    """Samples past the first batch take far longer than the loader's
    grace for a stopping worker, so that stopping has to wait it out."""

    def __len__(self):
        return 100

    def __getitem__(self, i):
        if i >= 2:
            time.sleep(5)
        return i


@pytest.mark.parametrize("how", ["break", "del"])
def test_another_thread_runs_while_the_workers_stop(how):
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)

    t = threading.Thread(target=tick)
    loader = forkload.DataLoader(Slow(), batch_size=2, num_workers=2)
    t.start()
    try:
        it = iter(loader)
        assert next(it).tolist() == [0, 1]
        t0 = time.monotonic()
        if how == "break":
            it._close()  # what a for loop's break leads to
        else:
            del it
        t1 = time.monotonic()
    finally:
        stop.set()
        t.join()
    during = [x for x in ticks if t0 < x < t1]
    # The stop waits for workers that do not answer (the grace, 300 ms):
    # the thread ticks meanwhile, as it does with torch's loader.
    assert t1 - t0 > 0.2, "the stop did not wait (%.3f s)" % (t1 - t0)
    assert len(during) >= 20, "%d ticks in %.3f s of stopping" % (
        len(during), t1 - t0)


# --------------------------------------------------------------------------
# Found by test_fuzz_sameness.py
# --------------------------------------------------------------------------

def keep(x):
    return x


def float_tensor(i):
    return torch.tensor(float(i))


@pytest.mark.parametrize("num_workers", WORKERS)
@pytest.mark.parametrize("sampler", [None, [2, 0, 2]])
def test_collate_fn_without_batching_gets_the_sample_alone(num_workers,
                                                            sampler):
    """batch_size=None: torch calls collate_fn(dataset[i]), not with a
    list of one sample."""
    ds = FnDataset(3, float_tensor)
    fl, th = both(ds, batch_size=None, sampler=sampler, collate_fn=keep,
                  num_workers=num_workers)
    assert_batches_same(fl, th)
    assert all(isinstance(b, torch.Tensor) for b in fl)


# --------------------------------------------------------------------------
# Smaller differences a new user met
# --------------------------------------------------------------------------

def test_collate_fn_attribute_is_torchs_default():
    assert forkload.DataLoader([1, 2], batch_size=2).collate_fn is \
        tud.DataLoader([1, 2], batch_size=2).collate_fn
    assert forkload.DataLoader([1, 2], batch_size=None).collate_fn is \
        tud.DataLoader([1, 2], batch_size=None).collate_fn


def pair_and_name(i):
    return {"x": torch.tensor([i, 2 * i]), "n": "s"}


@pytest.mark.parametrize("num_workers", WORKERS)
def test_default_collate_given_by_name_gives_torchs_batches(num_workers):
    ds = FnDataset(5, pair_and_name)
    for kw in (dict(batch_size=2, collate_fn=tud.default_collate),
               dict(batch_size=None, collate_fn=tud.default_convert)):
        fl, th = both(ds, num_workers=num_workers, **kw)
        assert_batches_same(fl, th)


@pytest.mark.parametrize("ctx", [3, "bogus", object()])
def test_multiprocessing_context_refused_as_torch_refuses_it(ctx):
    with pytest.raises((TypeError, ValueError)) as want:
        tud.DataLoader([1], num_workers=1, multiprocessing_context=ctx)
    with pytest.raises(want.type) as got:
        forkload.DataLoader([1], num_workers=1, multiprocessing_context=ctx)
    assert str(got.value) == str(want.value)


def test_forkload_error_is_named_forkload_error():
    assert forkload.Error.__module__ == "forkload"
    assert repr(forkload.Error) == "<class 'forkload.Error'>"


@pytest.fixture
def patched(monkeypatch):
    """forkload's loader in place of torch.utils.data.DataLoader, as some
    users and frameworks patch it."""
    monkeypatch.setattr(tud, "DataLoader", forkload.DataLoader)


@pytest.mark.parametrize("kw", [dict(num_workers=-1), dict(timeout=-1),
                                dict(persistent_workers=True),
                                dict(batch_size=2, batch_sampler=[[0]]),
                                dict(shuffle=True, sampler=[0])],
                         ids=str)
def test_refusals_are_torchs_when_torchs_name_is_forkloads(patched, kw):
    with pytest.raises(ValueError):
        forkload.DataLoader([1, 2, 3], **kw)


def test_timeout_without_workers_is_torchs_refusal_when_patched(patched):
    with pytest.raises(AssertionError):
        iter(forkload.DataLoader([1, 2, 3], timeout=1))


def test_patched_loader_loads():
    tud_dl = tud.DataLoader
    try:
        tud.DataLoader = forkload.DataLoader
        got = [b.tolist() for b in tud.DataLoader(list(range(4)),
                                                  batch_size=2,
                                                  num_workers=2)]
    finally:
        tud.DataLoader = tud_dl
    assert got == [[0, 1], [2, 3]]


# --------------------------------------------------------------------------
# Teardown
# --------------------------------------------------------------------------

class Curriculum(tud.Dataset):
    """A dataset that refers to its loader (a curriculum reading the
    epoch from it): a cycle through the workers' loader."""

    def __init__(self, n):
        self.n, self.loader = n, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return os.getpid()


def test_a_loader_in_a_reference_cycle_ends_its_workers_when_collected():
    ds = Curriculum(8)
    loader = forkload.DataLoader(ds, batch_size=2, num_workers=2,
                                 persistent_workers=True)
    ds.loader = loader
    pids = {p for b in loader for p in b.tolist()}
    assert len(pids) == 2
    del loader, ds
    gc.collect()
    assert wait_until(lambda: all(is_gone(p, os.getpid()) for p in pids), 10)


# --------------------------------------------------------------------------
# A batch_sampler whose epochs differ, persistent workers, epochs cut short
# --------------------------------------------------------------------------

class Alternating:
    """Even epochs a long plan (thousands of batches: a plan of many
    pages), odd epochs two batches."""

    def __init__(self, n):
        self.n, self.epoch = n, 0

    def _batches(self):
        if self.epoch % 2 == 0:
            return [[i % self.n, (7 * i) % self.n] for i in range(3000)]
        return [[1], [2, 3]]

    def __iter__(self):
        batches = self._batches()
        self.epoch += 1
        return iter(batches)

    def __len__(self):
        return len(self._batches())


def alternating_epochs(cls, epochs=12):
    loader = cls(list(range(50)), batch_sampler=Alternating(50),
                 num_workers=2, persistent_workers=True)
    out = []
    for e in range(epochs):
        got = []
        for b in loader:
            got.append(b.tolist())
            if e % 2 == 0 and len(got) == 3:
                break  # batches still in flight, the next plan smaller
        out.append(got)
    del loader
    return out


def test_plans_of_other_sizes_while_batches_are_in_flight_match_torch():
    fl, th = on_both(alternating_epochs)
    assert fl == th


class CountingBatches:
    """A batch_sampler that counts its iter() calls, its batches drawn
    there (eagerly) from the count."""

    def __init__(self):
        self.calls = 0

    def __iter__(self):
        self.calls += 1
        return iter([[self.calls % 4], [(self.calls + 1) % 4]])

    def __len__(self):
        return 2


def counted_epochs(cls, **kw):
    loader = cls(list(range(4)), batch_sampler=CountingBatches(), **kw)
    return [[b.tolist() for b in loader] for _ in range(3)]


@pytest.mark.parametrize("kw", [dict(num_workers=0), dict(num_workers=2),
                                dict(num_workers=2, persistent_workers=True)],
                         ids=str)
def test_a_sampler_that_draws_in_iter_sees_torchs_calls(kw):
    """torch's iterator with workers calls iter() on the batch sampler
    twice when it is made, and iterates the second."""
    fl, th = on_both(counted_epochs, **kw)
    assert fl == th


# --------------------------------------------------------------------------
# A skeleton is checked before a view is made of it
# --------------------------------------------------------------------------

def forged_leaf(batch):
    """A collate_fn whose result names an array far outside its batch's
    segment, in the form of the worker's own skeleton (a Leaf)."""
    from forkload._worker import Leaf
    if batch[0] == 0:
        return {"x": Leaf((1 << 40, 9, (4,), 0))}
    return torch.tensor(batch)


@pytest.mark.parametrize("num_workers", WORKERS)
def test_an_array_outside_its_segment_is_an_error_not_a_crash(num_workers):
    it = iter(forkload.DataLoader(list(range(4)), batch_size=2,
                                  collate_fn=forged_leaf,
                                  num_workers=num_workers))
    with pytest.raises(RuntimeError, match="outside its segment"):
        next(it)
    assert next(it).tolist() == [2, 3]


def test_dataloader_is_generic_as_torchs():
    assert forkload.DataLoader[list] is not None
    assert tud.DataLoader[list] is not None


def empty_arrays(i):
    return {"t": torch.zeros(0), "a": np.zeros((2, 0)), "i": i}


@pytest.mark.parametrize("num_workers", WORKERS)
@pytest.mark.parametrize("batch_size", [2, 64])
def test_empty_arrays_collate_as_torchs(num_workers, batch_size):
    """Found by the fuzzer under UBSan: an empty tensor's DLPack data
    pointer may be NULL, and copying its 0 bytes from it was undefined;
    and by torch's own tests (test_large_sampler_indices): a batch of 64
    empty samples, (64, 0), was refused as outside its segment."""
    ds = FnDataset(128, empty_arrays)
    fl, th = both(ds, batch_size=batch_size, num_workers=num_workers)
    assert_batches_same(fl, th)


# --------------------------------------------------------------------------
# No sample is read before the workers, nor anywhere torch reads none
# --------------------------------------------------------------------------

class Reads(tud.Dataset):
    """Counts its reads in shared memory, and returns with each sample
    what the reading process knew: its worker id (-1: none) and whether
    worker_init_fn had run there."""

    def __init__(self, n):
        self.n = n
        self.reads = torch.zeros(n, dtype=torch.int64).share_memory_()
        self.initialised = False

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.reads[i] += 1
        info = tud.get_worker_info()
        return i, -1 if info is None else info.id, self.initialised


def mark_initialised(worker_id):
    tud.get_worker_info().dataset.initialised = True


def plain(b):
    if isinstance(b, (list, tuple)):
        return [plain(x) for x in b]
    return b.tolist() if isinstance(b, torch.Tensor) else b


def seeded(kw):
    """kw with its generator, a seed (Generators do not pickle), made a
    Generator seeded with it."""
    if "generator" in kw:
        kw = dict(kw, generator=torch.Generator().manual_seed(kw["generator"]))
    return kw


def reads_of(make, epochs, **kwargs):
    kwargs = seeded(kwargs)
    dataset = Reads(12)
    loader = make(dataset, worker_init_fn=mark_initialised
                  if kwargs.get("num_workers") else None, **kwargs)
    batches = [plain(b) for _ in range(epochs) for b in loader]
    del loader
    return batches, dataset.reads.tolist()


@pytest.mark.parametrize("kw", [
    dict(num_workers=0, batch_size=3),
    dict(num_workers=2, batch_size=3),
    dict(num_workers=2, batch_size=3, persistent_workers=True),
    dict(num_workers=2, batch_size=None),
    dict(num_workers=2, batch_size=3, shuffle=True, generator=5),
    dict(num_workers=3, sampler=[7, 1, 4], batch_size=2),
])
def test_each_sample_is_read_where_and_as_often_as_torch_reads_it(kw):
    fl, th = on_both(reads_of, 2, **kw)
    assert fl == th


class Barrier(tud.Dataset):
    """Each worker's first sample waits for every other worker's (torch's
    own test_worker_seed does): a read outside the workers never meets
    them."""

    def __init__(self, n, workers):
        import multiprocessing
        self.n = n
        self.barrier = multiprocessing.get_context("fork").Barrier(
            workers, timeout=30)
        self.waited = False

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not self.waited:
            self.barrier.wait()
            self.waited = True
        return torch.initial_seed() - tud.get_worker_info().seed


def met_at_a_barrier(make):
    return [int(x) for b in make(Barrier(8, 2), batch_size=1, num_workers=2)
            for x in b]


def test_a_dataset_whose_workers_meet_at_a_barrier_loads_as_torchs():
    fl, th = on_both(met_at_a_barrier)
    assert fl == th == [0] * 8


# --------------------------------------------------------------------------
# Without workers nothing is pickled, as torch pickles nothing
# --------------------------------------------------------------------------

class Holder:
    Point = __import__("collections").namedtuple("Point", "x y")


def to_points(batch):
    return Holder.Point(torch.stack(batch), len(batch))


def to_generator(batch):
    return (int(x) for x in batch)


def to_unpicklable(batch):
    return {"values": torch.stack(batch), "lock": threading.Lock(),
            "double": lambda x: 2 * x}


# What each side hands back of these batches, which cannot be pickled.

def as_point(b):
    return type(b) is Holder.Point, tuple(b)


def as_used(b):
    return (b["values"].tolist(), b["double"](3),
            b["lock"].acquire(blocking=False))


def test_a_namedtuple_of_a_class_body_comes_without_workers_as_torchs():
    fl, th = both([torch.tensor(i) for i in range(6)], batch_size=4,
                  collate_fn=to_points, view=as_point)
    assert [p[0] for p in fl] == [True] * 2
    assert_batches_same(fl, th)


def test_a_generator_from_collate_fn_comes_without_workers_as_torchs():
    fl, th = both(list(range(5)), batch_size=2, collate_fn=to_generator,
                  view=list)
    assert fl == th == [[0, 1], [2, 3], [4]]


def test_objects_that_cannot_be_pickled_come_without_workers_as_torchs():
    fl, th = both([torch.tensor(i) for i in range(4)], batch_size=2,
                  collate_fn=to_unpicklable, view=as_used)
    assert fl == th == [([0, 1], 6, True), ([2, 3], 6, True)]


# --------------------------------------------------------------------------
# A prefetch_factor larger than the epoch
# --------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(),
    dict(persistent_workers=True),
    dict(sampler=list(range(39, -1, -1))),
])
def test_a_prefetch_factor_past_the_epochs_batches_loads_as_torchs(kw):
    # Each 1 MiB: a window of 10**6 batches a worker would need 4 TB.
    dataset = [torch.full((1 << 18,), i, dtype=torch.int32)
               for i in range(40)]
    fl, th = both(dataset, batch_size=4, num_workers=2, prefetch_factor=10**6,
                  **kw)
    assert_batches_same(fl, th)


# --------------------------------------------------------------------------
# DataPipes: shuffled, seeded and sharded as torch's loader does it
# --------------------------------------------------------------------------

def times_ten(x):
    return x * 10


def pipe_of(n):
    from torch.utils.data.datapipes.iter import IterableWrapper
    return IterableWrapper(range(n)).shuffle().sharding_filter().map(
        times_ten)


def map_pipe_of(n):
    from torch.utils.data.datapipes.map import SequenceWrapper
    return SequenceWrapper(list(range(n))).map(times_ten)


def epochs_of(make, pipe_of, n, epochs=3, **kw):
    """Each epoch's batches of pipe_of(n), then three draws of the global
    generator (what the loader drew from it shows there)."""
    pipe, kw = pipe_of(n), seeded(kw)
    torch.manual_seed(7)
    loader = make(pipe, **kw)
    got = [[plain(b) for b in loader] for _ in range(epochs)]
    return got, torch.randint(1000, (3,)).tolist()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("shuffle", [None, True, False])
@pytest.mark.parametrize("kw", [
    dict(num_workers=0),
    dict(num_workers=1),
    dict(num_workers=2),
    dict(num_workers=3, batch_size=5),
    dict(num_workers=2, persistent_workers=True),
    dict(num_workers=2, batch_size=None),
    dict(num_workers=2, generator=7),
])
def test_an_iterdatapipe_is_shuffled_and_sharded_as_torchs(shuffle, kw):
    fl, th = on_both(epochs_of, pipe_of, 26, shuffle=shuffle,
                     **dict(dict(batch_size=4), **kw))
    assert fl == th
    # Every sample once an epoch: sharded across the workers, not copied.
    flat = sorted(x for b in fl[0][0] for x in (b if isinstance(b, list)
                                                  else [b]))
    assert flat == [10 * i for i in range(26)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_mapdatapipe_loads_as_torchs(num_workers):
    fl, th = on_both(epochs_of, map_pipe_of, 10, batch_size=3, shuffle=True,
                     num_workers=num_workers)
    assert fl == th


def test_a_datapipe_is_wrapped_as_torch_wraps_it():
    pipe = pipe_of(4)
    assert type(forkload.DataLoader(pipe).dataset) is type(
        tud.DataLoader(pipe).dataset)


# --------------------------------------------------------------------------
# Nested and sparse tensors
# --------------------------------------------------------------------------

def clone_each(batch):
    return [x.clone() for x in batch]


def nested_samples(n):
    g = torch.Generator().manual_seed(3)
    return [torch.nested.nested_tensor(
        [torch.randn(1 + i % 3, generator=g), torch.randn(2, generator=g)])
        for i in range(n)]


def sparse_rows(n):
    return [torch.eye(n)[i].to_sparse() for i in range(n)]


def unnest(b):
    if isinstance(b, list):
        return [unnest(x) for x in b]
    if b.is_nested:
        return ["nested"] + [x.tolist() for x in b.unbind()]
    return [str(b.layout), b.to_dense().tolist()]


def unnested(make, samples_of, n, **kw):
    """Each batch of make(samples_of(n), **kw), unnested: made and read on
    each side, for torch < 2 pickles no nested tensor."""
    return [unnest(b) for b in make(samples_of(n), **kw)]


NESTED_PICKLES = tuple(int(v) for v in torch.__version__.split(".")[:2]) \
    >= (2, 0)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("num_workers", WORKERS)
def test_nested_tensors_from_a_collate_fn_come_as_torchs(num_workers):
    if num_workers and not NESTED_PICKLES:
        pytest.skip("torch < 2 cannot pickle a nested tensor (its own "
                    "loader hangs; see the test below)")
    fl, th = on_both(unnested, nested_samples, 6, batch_size=2,
                     collate_fn=clone_each, num_workers=num_workers)
    assert fl == th


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_nested_tensors_that_torch_cannot_pickle_are_an_error_not_a_hang():
    if NESTED_PICKLES:
        pytest.skip("torch >= 2 pickles nested tensors (the test above)")
    loader = forkload.DataLoader(nested_samples(4), batch_size=2,
                                 collate_fn=clone_each, num_workers=2,
                                 timeout=60)
    with pytest.raises(RuntimeError, match="in DataLoader worker process"):
        next(iter(loader))


def nested_refusal(make, num_workers):
    """The type and last line of the error of the first batch of nested
    tensors, collated by default_collate (None: no error)."""
    try:
        next(iter(make(nested_samples(4), batch_size=2,
                       num_workers=num_workers)))
    except Exception as e:  # noqa: BLE001  (whatever torch raises)
        return type(e), str(e).strip().splitlines()[-1]
    finally:
        # torch 1.13's iterator, held in a cycle by its error, ends its
        # workers when collected and leaves them unreaped:
        # multiprocessing reaps them.
        gc.collect()
        for p in __import__("multiprocessing").active_children():
            p.join(10)
    return None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("num_workers", WORKERS)
def test_nested_tensors_default_collate_refuses_as_torchs(num_workers):
    fl, th = on_both(nested_refusal, num_workers)
    assert fl == th and fl is not None


@pytest.mark.parametrize("num_workers", WORKERS)
def test_sparse_tensors_from_a_collate_fn_come_as_torchs(num_workers):
    # Beside torch's loader without workers: torch 1.13's with workers
    # hangs on them.
    fl = unnested(forkload.DataLoader, sparse_rows, 3, batch_size=2,
                  collate_fn=clone_each, num_workers=num_workers,
                  timeout=60 if num_workers else 0)
    th = torch_side(unnested, tud.DataLoader, sparse_rows, 3, batch_size=2,
                    collate_fn=clone_each)
    assert fl == th


def test_an_iterator_collected_in_a_child_forked_since_says_nothing():
    import sys
    it = iter(forkload.DataLoader(list(range(8)), batch_size=2,
                                  num_workers=2))
    next(it)
    pid = os.fork()
    if pid == 0:
        heard = []
        sys.unraisablehook = heard.append
        global_it = [it]
        del it
        global_it.clear()
        gc.collect()
        os._exit(3 if heard else 0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [b.tolist() for b in it] == [[2, 3], [4, 5], [6, 7]]


# --------------------------------------------------------------------------
# More workers than the message queues the process can have
# --------------------------------------------------------------------------

# A child's forkload batches, each worker's tasks on a message queue of
# its own while RLIMIT_MSGQUEUE (argv[1] bytes, -1: as it is) and
# fs.mqueue.queues_max leave one, else on a socket pair.
MORE_WORKERS = """
import resource, sys
import torch
import forkload
limit, workers, n = (int(a) for a in sys.argv[1:4])
if limit >= 0:
    hard = resource.getrlimit(resource.RLIMIT_MSGQUEUE)[1]
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (limit, hard))
dl = forkload.DataLoader(list(range(n)), batch_size=2, shuffle=True,
                         generator=torch.Generator().manual_seed(5),
                         num_workers=workers, sharing=sys.argv[4])
print([b.tolist() for b in dl])
"""


def shuffled(make, n):
    """MORE_WORKERS's batches, without workers."""
    loader = make(list(range(n)), batch_size=2, shuffle=True,
                  generator=torch.Generator().manual_seed(5))
    return [b.tolist() for b in loader]


def more_workers(limit, workers, n, sharing="fd", prefix=()):
    r = subprocess.run(list(prefix) + [sys.executable, "-c", MORE_WORKERS,
                                       str(limit), str(workers), str(n),
                                       sharing],
                       env=subprocess_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout), torch_side(shuffled, tud.DataLoader, n)


def test_workers_past_rlimit_msgqueue_give_torchs_batches():
    """Once refused with FL_EAGAIN (issue 43): 1000 bytes of message queue
    hold one worker's queue at most, and the other two read their tasks
    from socket pairs."""
    fl, th = more_workers(1000, 3, 40)
    assert fl == th


def test_fs_mqueue_queues_max_plus_one_workers_give_torchs_batches():
    """As many workers as torch runs: queues_max + 1, in an IPC namespace
    of their own, where every queue of the system's count is free and
    taking them all leaves none short elsewhere on the machine.  Under the
    file-system strategy, whose segments keep no fd: the fd strategy's
    window of 515 segments alone would not fit the 1024 fds the tests run
    under."""
    own = ["unshare", "--ipc"]
    r = subprocess.run(own + ["cat", "/proc/sys/fs/mqueue/queues_max"],
                       capture_output=True, text=True) \
        if shutil.which("unshare") else None
    if r is None or r.returncode != 0:
        pytest.skip("needs unshare --ipc for an IPC namespace of its own")
    workers = int(r.stdout) + 1
    if workers > 1025:
        pytest.skip("fs.mqueue.queues_max is %d: too many workers to fork "
                    "here" % (workers - 1))
    fl, th = more_workers(-1, workers, 2 * workers + 6, "file_system",
                          prefix=own)
    assert fl == th


def shut_down_and_begun_anew(make):
    """As Lightning tears a loader down: dl._iterator._shutdown_workers(),
    then dl._iterator = None (torch's iterator is dead once shut down); the
    next epoch starts anew.  Whether the first epoch's workers ended, and
    each epoch's count of batches."""
    dl = make(PidDataset(8), batch_size=2, num_workers=2,
              persistent_workers=True)
    first = [b.tolist() for b in dl]
    dl._iterator._shutdown_workers()
    pids = {p for b in first for p in b}
    gone = wait_until(lambda: all(is_gone(p, os.getpid()) for p in pids), 10)
    dl._iterator = None
    return gone, len(first), len([b for b in dl])


def test_shutdown_workers_of_a_persistent_iterator_ends_them_as_torchs():
    fl, th = on_both(shut_down_and_begun_anew)
    assert fl == th == (True, 4, 4)


@pytest.mark.parametrize("persistent", [False, True])
def test_an_iterator_shut_down_mid_epoch_raises_and_never_ends_silently(
        persistent):
    dl = forkload.DataLoader(list(range(8)), batch_size=2, num_workers=2,
                             persistent_workers=persistent)
    it = iter(dl)
    next(it)
    it._shutdown_workers()
    with pytest.raises(RuntimeError, match="shut down"):
        next(it)
    assert [b.tolist() for b in dl] == [[0, 1], [2, 3], [4, 5], [6, 7]]


# --------------------------------------------------------------------------
# Found by the fuzzer's draws of torch's other arguments (generator,
# timeout, worker_init_fn, prefetch_factor; test_fuzz_sameness.py)
# --------------------------------------------------------------------------

def timeout_refused(make, generator):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3) if generator else None
    batches = CountingBatches()
    loader = make(list(range(4)), batch_sampler=batches, timeout=30,
                  generator=g)
    for _ in range(2):
        with pytest.raises(AssertionError):
            iter(loader)
    return (batches.calls, torch.rand(2).tolist(),
            g and torch.rand(2, generator=g).tolist())


@pytest.mark.parametrize("generator", [False, True])
def test_a_timeout_refused_without_workers_draws_as_torchs_iter(generator):
    # torch's iterator draws its base seed from the loader's generator and
    # calls iter() on the batch sampler before it asserts timeout == 0.
    fl, th = on_both(timeout_refused, generator)
    assert fl == th


# torch's iterator, refused half made, fails in its __del__.
@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("persistent", [False, True])
def test_a_prefetch_factor_of_0_refused_at_iter_draws_as_torchs(persistent):
    # torch 2 takes prefetch_factor=0 at __init__ and refuses it at each
    # iter(), once its iterator has drawn its base seed and called iter()
    # on the batch sampler (torch 1.13 refuses it at __init__).
    fl, th = on_both(prefetch_0_refused, persistent)
    assert fl == th


def prefetch_0_refused(make, persistent):
    torch.manual_seed(0)
    batches = CountingBatches()
    got = []
    try:
        loader = make(list(range(4)), batch_sampler=batches,
                      num_workers=2, prefetch_factor=0,
                      persistent_workers=persistent)
        for _ in range(2):
            with pytest.raises(AssertionError):
                iter(loader)
    except AssertionError as e:
        got.append(type(e))
    return got, batches.calls, torch.rand(2).tolist()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_prefetch_factor_none_given_is_taken_or_refused_as_torchs(
        num_workers):
    # torch 2's default, which torch 1.13 (default 2) refuses: a ValueError
    # without workers, a TypeError with them.  (Only made: nothing forks.)
    def outcome(make):
        try:
            loader = make(list(range(4)), num_workers=num_workers,
                          prefetch_factor=None)
        except Exception as e:  # noqa: BLE001  (whatever torch raises)
            return type(e)
        return loader.prefetch_factor
    assert outcome(forkload.DataLoader) == outcome(tud.DataLoader)


def second_of_two_replicas(dataset):
    return tud.DistributedSampler(dataset, num_replicas=2, rank=1)


def batch_sampler_of_torchs(make, num_workers, make_sampler, drop_last):
    torch.manual_seed(0)
    dataset = list(range(11))
    batches = tud.BatchSampler(make_sampler(dataset), 3, drop_last)
    return [b.tolist() for b in make(dataset, batch_sampler=batches,
                                     num_workers=num_workers)]


@pytest.mark.parametrize("num_workers", WORKERS)
@pytest.mark.parametrize("make_sampler", [
    tud.SequentialSampler, tud.RandomSampler, second_of_two_replicas],
    ids=["sequential", "random", "distributed"])
@pytest.mark.parametrize("drop_last", [False, True])
def test_a_batch_sampler_of_torchs_over_the_dataset_batches_as_torchs(
        num_workers, make_sampler, drop_last):
    # The loader's batch_size is None with a batch_sampler: the batches
    # are the BatchSampler's own size, its last dropped as it says.
    fl, th = on_both(batch_sampler_of_torchs, num_workers, make_sampler,
                     drop_last)
    assert fl == th and {len(b) for b in th[:-1]} == {3}


def shuffled_by(g):
    return dict(shuffle=True, generator=g)


def drawn_lazily_from(g):
    # 70 indices drawn 32 at a time from g as the sampler is iterated.
    return dict(sampler=tud.RandomSampler(range(10), replacement=True,
                                          num_samples=70, generator=g))


@pytest.mark.parametrize("sampler", [shuffled_by, drawn_lazily_from])
@pytest.mark.parametrize("kw", [dict(num_workers=0), dict(num_workers=2),
                                dict(num_workers=2, persistent_workers=True),
                                dict(num_workers=1, prefetch_factor=1)],
                         ids=str)
def test_an_epoch_cut_short_leaves_a_samplers_own_generator_as_torchs(
        sampler, kw):
    # torch's iterator pulls from the sampler only the batches it sends
    # (the prefetch window, then one per batch handed out), and
    # RandomSampler draws from its generator as it is iterated (32
    # indices at a time with replacement, a last randperm after the
    # others without): the epoch after one cut short starts where those
    # pulls left the generator, which draws the base seed too.
    fl, th = on_both(epochs_cut_short_by_sampler, sampler, kw)
    assert fl == th


def epochs_cut_short_by_sampler(make, sampler, kw):
    g = torch.Generator().manual_seed(1)
    loader = make(list(range(10)), batch_size=3, **sampler(g), **kw)
    got = []
    for take in (1, 2, None):
        epoch = []
        for b in loader:
            epoch.append(b.tolist())
            if len(epoch) == take:
                break
        got.append(epoch)
    return got, g.get_state().tolist()


class EagerStream(tud.IterableDataset):
    """An iterable whose __iter__ is no generator: it draws its order from
    torch's generator as it is called, or raises (refused)."""

    def __init__(self, n, refused=False):
        self.n, self.refused = n, refused

    def __iter__(self):
        if self.refused:
            raise KeyError("no stream today")
        return iter(torch.randperm(self.n).tolist())


def test_an_iterable_without_workers_is_opened_at_iter_as_torchs():
    # torch's iterator without workers calls iter() on the dataset as it
    # is made: the stream's draws come then (an epoch of no batch makes
    # them too), and what it raises is iter(loader)'s.
    fl, th = on_both(eager_stream_opened)
    assert fl == th


def eager_stream_opened(make):
    torch.manual_seed(0)
    loader = make(EagerStream(6), batch_size=4)
    it = iter(loader)
    drawn = torch.rand(1).item()
    first = [b.tolist() for b in it]
    iter(loader)
    refused = None
    try:
        iter(make(EagerStream(6, refused=True)))
    except KeyError as e:
        refused = str(e)
    return drawn, first, torch.rand(1).item(), refused


def fail_in_worker_1(worker_id):
    if worker_id == 1:
        raise ValueError("worker_init_fn of worker 1 failed")


@pytest.mark.parametrize("kw", [dict(), dict(persistent_workers=True)],
                         ids=str)
@pytest.mark.parametrize("data", ["map", "plan", "iterable"])
def test_a_worker_whose_init_raised_raises_at_each_batch_as_torchs(kw, data):
    # torch's worker makes its fetcher after worker_init_fn: the init's
    # error comes at the worker's first batch, then UnboundLocalError (no
    # fetcher) at each of its others, without end for an iterable's;
    # persistent workers make the fetcher at the next epoch.
    fl, th = on_both(init_raised_in_worker_1, kw, data)
    assert_batches_same(fl, th)
    assert UnboundLocalError in [x[0] for x in th[0] if type(x) is tuple]


def nine_outcomes(it):
    """Up to nine next() of it: each batch, or what it raised (its type
    and last line)."""
    epoch = []
    while len(epoch) < 9:
        try:
            epoch.append(next(it))
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001  (the worker's)
            epoch.append((type(e), str(e).splitlines()[-1]))
    return epoch


def init_raised_in_worker_1(make, kw, data):
    dataset, more = list(range(10)), dict(batch_size=2)
    if data == "plan":
        more = dict(batch_sampler=[[i, i + 1] for i in range(0, 10, 2)])
    elif data == "iterable":
        dataset = ShardedIterable(10)
    loader = make(dataset, num_workers=2, worker_init_fn=fail_in_worker_1,
                  **more, **kw)
    got = []
    for _ in range(2):
        it = iter(loader)
        got.append(nine_outcomes(it))
        if not kw:
            end_iterator(it)
    if kw:
        end_iterator(loader._iterator)
    return got


class RefusedInWorker1(tud.IterableDataset):
    def __iter__(self):
        info = tud.get_worker_info()
        if info.id == 1:
            raise KeyError("no stream for worker 1")
        return iter(range(info.id, 10, info.num_workers))


def test_a_worker_whose_stream_is_refused_raises_at_each_batch_as_torchs():
    # torch's worker calls iter() on the dataset as it starts, its init:
    # its error at the worker's first batch, then UnboundLocalError, the
    # stream never ending.  (With persistent workers, torch's worker dies
    # of it at the next epoch.)
    fl, th = on_both(stream_refused_in_worker_1)
    assert_batches_same(fl, th)
    assert len(th) == 9 and th[-2][0] is UnboundLocalError


def stream_refused_in_worker_1(make):
    it = iter(make(RefusedInWorker1(), num_workers=2))
    epoch = nine_outcomes(it)
    end_iterator(it)
    return epoch


class RandomSamples(tud.Dataset):
    """Each sample drawn from the generator of the process reading it."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        return torch.rand(()).item()


class RandomStream(tud.IterableDataset):
    def __iter__(self):
        return (torch.rand(()).item() for _ in range(6))


class ShiftingBatches:
    """Batches of 2 and 3 by turns, from one epoch to the next."""

    def __init__(self):
        self.calls = 0

    def __iter__(self):
        self.calls += 1
        size = 2 + self.calls % 2
        return iter([list(range(i, i + size)) for i in range(0, 12, size)])

    def __len__(self):
        return 6


@pytest.mark.parametrize("data", ["map", "plan", "iterable"])
def test_persistent_workers_fill_what_they_were_sent_before_the_next_epoch(
        data):
    # torch's persistent workers fill every task sent before they take
    # the next epoch's (_ResumeIteration): the batches an epoch cut short
    # had in flight draw from the workers' generators all the same, and
    # the next epoch's samples show it.
    fl, th = on_both(epochs_cut_short_of_random_samples, data)
    assert fl == th


def epochs_cut_short_of_random_samples(make, data):
    dataset, kw = RandomSamples(), dict(batch_size=2)
    if data == "plan":
        kw = dict(batch_sampler=ShiftingBatches())
    elif data == "iterable":
        dataset = RandomStream()
    torch.manual_seed(0)
    loader = make(dataset, num_workers=2, persistent_workers=True,
                  prefetch_factor=3, **kw)
    got = []
    for take in (1, 0, 2, None):
        epoch = []
        for b in loader:
            if len(epoch) == take:
                break
            epoch.append(b.tolist())
        got.append(epoch)
    return got


def fail_late(worker_id):
    time.sleep(0.3)
    raise ValueError("worker_init_fn failed late")


def test_a_persistent_worker_whose_init_raised_late_has_a_fetcher_next_epoch():
    # The epoch a worker starts in is the one it was forked in, however
    # late its init ends: here after the next iter(), whose resumed epoch
    # makes torch's worker a fetcher.
    fl, th = on_both(init_raised_late)
    assert fl == th == [[0, 1], [2, 3]]


def init_raised_late(make):
    loader = make(list(range(4)), batch_size=2, num_workers=1,
                  persistent_workers=True, worker_init_fn=fail_late)
    iter(loader)
    got = [b.tolist() for b in loader]
    end_iterator(loader._iterator)
    return got


def fail_always(worker_id):
    raise ValueError("worker_init_fn of worker %d failed" % worker_id)


def test_a_persistent_worker_without_a_fetcher_draws_nothing_for_an_epoch_cut_short():
    # The tasks of the epoch cut short, filled before the next epoch's,
    # are errors there: nothing drawn, and the next epoch's first sample
    # is the worker's first draw, as with torch.
    fl, th = on_both(no_fetcher_epoch_cut_short)
    assert fl == th


def no_fetcher_epoch_cut_short(make):
    torch.manual_seed(0)
    loader = make(RandomSamples(), batch_size=None, num_workers=1,
                  persistent_workers=True, worker_init_fn=fail_always)
    iter(loader)
    got = [b for b in loader]
    end_iterator(loader._iterator)
    return got


# --------------------------------------------------------------------------
# Found by the fuzzer's random cases at the end of the session's review
# --------------------------------------------------------------------------

def iter_never_advanced(make, num_workers):
    batches = CountingBatches()
    loader = make(list(range(4)), batch_sampler=batches,
                  num_workers=num_workers)
    iter(loader)  # made, never advanced
    return [b.tolist() for b in loader], batches.calls


@pytest.mark.parametrize("num_workers", WORKERS)
def test_an_iterator_never_advanced_has_called_iter_on_the_batch_sampler(
        num_workers):
    # torch's iterator calls iter() on the batch sampler as it is made,
    # without workers too: a batch_sampler that draws or counts in
    # __iter__ itself sees that call, and the next epoch shows it.
    fl, th = on_both(iter_never_advanced, num_workers)
    assert fl == th
