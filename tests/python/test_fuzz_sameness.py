# make check's time limit: 1200 s (tests/run-test.sh), for CASES below.
"""forkload.DataLoader against torch's, at random (issue 43): Hypothesis
draws a dataset (map-style or iterable, one shuffled by its __iter__, or
a DataPipe chain of either kind; tensors, numpy arrays and scalars,
numbers, strings, None, nested dicts, lists, tuples and namedtuples,
mutable objects, tensors that do not stack, samples that raise, values
drawn from the reading process's generators, the worker that read them,
nested and sparse tensors), a way to batch it (batch_size, drop_last,
shuffle, a sampler or a batch_sampler, torch's own or a list, a
collate_fn) and a way to run it (0 to 3 workers, persistent or not,
prefetch_factor, generator, timeout, pin_memory, worker_init_fn,
multiprocessing_context, in_order, two epochs, the first maybe cut
short); each case runs through both loaders from the same seed, and the
outcomes of every next() are compared value for value, exception type
for exception type (as a multiset where in_order=False lets batches
overtake one another), and so are len(loader) and the consumer's
generators after the run (torch's run in torch's reference interpreter,
loader_helpers' torch_side, as test_sameness.py's: under CI's sanitizer
pass torch's forked workers hang here now and then).  forkload's batches
are also checked to share no mutable object with one another.

FL_FUZZ_CASES sets the number of cases (make check's default below; more
on demand: FL_FUZZ_CASES=5000).  The cases are the same at each run
(Hypothesis derandomized, so that CI's verdict is the tree's); with
FL_FUZZ_RANDOM=1 they are new each run.  A failure Hypothesis finds is printed
with the smallest case it could shrink it to: each becomes a plain test
(test_sameness.py)."""

import collections
import copy
import functools
import inspect
import os
import random

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

hypothesis = pytest.importorskip(
    "hypothesis", reason="Hypothesis is not installed (sh tools/setup.sh "
    "installs python3-hypothesis; pip install hypothesis in a venv)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (assert_same, draw_after, end_iterator,  # noqa: E402
                            freeze, one_epoch, seed_all, torch_side,
                            worker_id)

# A case takes 0.15 to 0.2 s under torch 1.13 and 0.2 to 0.35 s under
# torch 2.13 on 2 shared cores (both loaders): 2,000 take up to 12
# minutes, hence the time limit asked of make check at the top.
CASES = int(os.environ.get("FL_FUZZ_CASES", "2000"))
FIXED = not os.environ.get("FL_FUZZ_RANDOM")

TORCH2 = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 0)
# torch 2.6's keyword: drawn only where the installed torch takes it.
IN_ORDER = "in_order" in inspect.signature(tud.DataLoader.__init__).parameters

Pair = collections.namedtuple("Pair", "a b")


class Box:
    """A mutable object in a sample or a batch (compared by value)."""

    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return type(other) is Box and other.v == self.v

    def __repr__(self):
        return "Box(%r)" % (self.v,)


# --------------------------------------------------------------------------
# Samples: a shape drawn once (every sample of a dataset has it, as
# default_collate needs), its values a function of the sample's index
# --------------------------------------------------------------------------

TENSOR_DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32,
                 torch.int16, torch.uint8, torch.bool, torch.float16,
                 torch.bfloat16]
NUMPY_DTYPES = [np.float32, np.float64, np.int64, np.int32, np.uint8,
                np.bool_, np.uint16]


# Nested tensors: strided, and torch 2's jagged layout.
NESTED_LAYOUTS = [torch.strided] + ([torch.jagged] if hasattr(torch, "jagged")
                                    else [])


def leaves(layouts, by_worker):
    """layouts: whether nested and sparse tensors may be drawn (torch
    1.13's own loader hangs passing them from a worker); by_worker:
    whether samples that show which worker read them may be (not where
    batches go to whichever worker has room first)."""
    odd = [st.tuples(st.just("nested"), st.sampled_from(NESTED_LAYOUTS)),
           st.tuples(st.just("sparse"), st.booleans())] if layouts else []
    if by_worker:
        odd += [st.just(("random",)), st.just(("worker",))]
    return st.one_of(
        st.tuples(st.just("tensor"), st.sampled_from(TENSOR_DTYPES),
                  st.lists(st.integers(0, 3), max_size=2).map(tuple)),
        st.tuples(st.just("ndarray"), st.sampled_from(NUMPY_DTYPES),
                  st.lists(st.integers(0, 3), max_size=2).map(tuple)),
        st.tuples(st.just("npscalar"), st.sampled_from(NUMPY_DTYPES)),
        st.sampled_from([("int",), ("float",), ("bool",), ("str",),
                         ("bytes",), ("none",), ("box",), ("ragged",),
                         ("fails",)]),
        *odd)


def shapes(layouts, by_worker):
    return st.recursive(
        leaves(layouts, by_worker),
        lambda inner: st.one_of(
            st.dictionaries(st.sampled_from("abcd"), inner, min_size=1,
                            max_size=3).map(lambda d: ("dict", d)),
            st.lists(inner, min_size=1, max_size=3).map(
                lambda xs: ("list", xs)),
            st.lists(inner, min_size=1, max_size=3).map(
                lambda xs: ("tuple", xs)),
            st.tuples(inner, inner).map(lambda ab: ("pair", ab))),
        max_leaves=5)


def make(shape, i):
    """Sample i of this shape: new objects at each call."""
    kind = shape[0]
    if kind == "tensor":
        n = int(np.prod(shape[2])) if shape[2] else 1
        x = torch.arange(i, i + n, dtype=torch.float64).reshape(shape[2])
        return (x % 2).to(shape[1]) if shape[1] is torch.bool else \
            x.to(shape[1])
    if kind == "ndarray":
        n = int(np.prod(shape[2])) if shape[2] else 1
        return (np.arange(i, i + n) % 50).reshape(shape[2]).astype(shape[1])
    if kind == "npscalar":
        return shape[1](i % 2 if shape[1] is np.bool_ else i)
    if kind == "int":
        return i * 3 - 5
    if kind == "float":
        return i / 4
    if kind == "bool":
        return i % 3 == 0
    if kind == "str":
        return "s%d" % i
    if kind == "bytes":
        return b"b%d" % i
    if kind == "none":
        return None
    if kind == "box":
        return Box([i])
    if kind == "ragged":  # a tensor whose length varies: stacking fails
        return torch.zeros(1 + i % 2)
    if kind == "fails":  # a sample that cannot be read
        if i % 5 == 3:
            raise ValueError("sample %d is unreadable" % i)
        return i
    if kind == "random":  # the reading process's generators, as seeded
        return torch.tensor([torch.rand(()).item(), np.random.rand(),
                             random.random()], dtype=torch.float64)
    if kind == "worker":  # who read it, seeded how, after which init
        info = tud.get_worker_info()
        return torch.tensor([-1, 0, MARK] if info is None else
                            [info.id, info.seed % 2**31, MARK])
    if kind == "nested":
        parts = [torch.arange(i, i + 1 + i % 3, dtype=torch.float32),
                 torch.full((2,), i / 2)]
        if shape[1] is torch.strided:  # torch 1.13 takes no layout
            return torch.nested.nested_tensor(parts)
        return torch.nested.nested_tensor(parts, layout=shape[1])
    if kind == "sparse":  # COO, coalesced or with an index given twice
        x = torch.sparse_coo_tensor(
            torch.tensor([[i % 3, (i + 1) % 3, i % 3]]),
            torch.tensor([1.0, 2.0, 3.0]) * i, (3,))
        return x.coalesce() if shape[1] else x
    if kind == "dict":
        return {k: make(v, i) for k, v in shape[1].items()}
    if kind == "list":
        return [make(v, i) for v in shape[1]]
    if kind == "tuple":
        return tuple(make(v, i) for v in shape[1])
    return Pair(make(shape[1][0], i), make(shape[1][1], i))


class MapData(tud.Dataset):
    def __init__(self, shape, n):
        self.shape, self.n = shape, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return make(self.shape, i)


class StreamData(tud.IterableDataset):
    """Each worker streams its share (every num_workers-th sample) of n:
    torch's documented way, so that both loaders merge the same streams."""

    def __init__(self, shape, n):
        self.shape, self.n = shape, n

    def share(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return range(start, self.n, step)

    def __iter__(self):
        for i in self.share():
            yield make(self.shape, i)


class ShuffledStream(StreamData):
    """Its share shuffled by torch's generator as iter() is called on it
    (no generator function): where and when the stream is opened shows."""

    def __iter__(self):
        share = self.share()
        order = torch.randperm(len(share)).tolist()
        return (make(self.shape, share[k]) for k in order)


def iter_pipe(shape, n, spec):
    """An IterDataPipe of n samples: shuffled before its sharding_filter,
    after it or never (spec: where, its buffer_size, whether there is a
    sharding_filter, without which each worker reads them all)."""
    from torch.utils.data.datapipes.iter import IterableWrapper
    where, buffer_size, sharded = spec
    kw = {} if buffer_size is None else {"buffer_size": buffer_size}
    pipe = IterableWrapper(range(n))
    if where == "before":
        pipe = pipe.shuffle(**kw)
    if sharded:
        pipe = pipe.sharding_filter()
    if where == "after":
        pipe = pipe.shuffle(**kw)
    return pipe.map(functools.partial(make, shape))


def map_pipe(shape, n):
    from torch.utils.data.datapipes.map import SequenceWrapper
    return SequenceWrapper(range(n)).map(functools.partial(make, shape))


def dataset_of(case):
    shape, n, kind = case["shape"], case["n"], case["data"]
    if kind == "iterpipe":
        return iter_pipe(shape, n, case["pipe"])
    if kind == "mappipe":
        return map_pipe(shape, n)
    return {"map": MapData, "iterable": StreamData,
            "shuffled": ShuffledStream}[kind](shape, n)


class Rotating:
    """A batch_sampler that draws in __iter__ itself, not lazily: each
    call rotates its batches by one (a sampler counting its epochs by
    iter() calls sees every call the loader makes)."""

    def __init__(self, batches):
        self.batches, self.calls = batches, 0

    def __iter__(self):
        k = self.calls % max(len(self.batches), 1)
        self.calls += 1
        return iter(self.batches[k:] + self.batches[:k])

    def __len__(self):
        return len(self.batches)


# --------------------------------------------------------------------------
# collate_fns (module level: their results cross from the workers pickled)
# --------------------------------------------------------------------------

def keep_list(batch):
    return batch


def with_metadata(batch):
    return {"batch": tud.default_collate(batch), "meta": Box(["m"]),
            "seen": set(), "n": len(batch)}


def reject_some(batch):
    """None for a batch it rejects, as users filter bad batches."""
    first = batch[0]
    return None if len(batch) % 2 == 0 else tud.default_collate(batch) \
        if first is not None else None


COLLATES = {"default": None, "keep_list": keep_list,
            "with_metadata": with_metadata, "reject_some": reject_some}


# --------------------------------------------------------------------------
# worker_init_fns
# --------------------------------------------------------------------------

MARK = 0  # a worker's, set by mark_worker: the "worker" samples show it


def reseed_worker(worker_id):
    """The idiom that seeds numpy and random from torch's worker seed."""
    seed = torch.initial_seed()
    np.random.seed(seed % 2**32)
    random.seed(seed + 1)


def mark_worker(worker_id):
    """A mark the samples show, drawn from the worker's torch generator."""
    global MARK
    MARK = worker_id + 10 * int(torch.randint(100, ()))


def fail_last_worker(worker_id):
    if worker_id == tud.get_worker_info().num_workers - 1:
        raise ValueError("worker_init_fn of worker %d failed" % worker_id)


INITS = {"none": None, "reseed": reseed_worker, "mark": mark_worker,
         "fails": fail_last_worker}


# --------------------------------------------------------------------------
# torch's samplers, built anew at each run from a spec (kind, args...);
# a generator is None (torch's global one), a seed (the sampler's own) or
# "loader" (the DataLoader's generator, which draws its seeds too)
# --------------------------------------------------------------------------

def sampler_specs(n):
    gen = st.one_of(st.none(), st.integers(0, 99), st.just("loader"))
    idx = st.integers(0, n - 1)
    return st.one_of(
        st.tuples(st.just("sequential")),
        # num_samples past n draws lazily, a chunk at a time
        st.tuples(st.just("random"), st.booleans(),
                  st.one_of(st.none(), st.integers(1, 40)), gen),
        st.tuples(st.just("subset"), st.lists(idx, max_size=12), gen),
        st.tuples(st.just("weighted"),
                  st.lists(st.integers(1, 3), min_size=n, max_size=n),
                  st.integers(1, n), st.booleans(), gen),
        st.tuples(st.just("distributed"), st.integers(1, 3).flatmap(
            lambda r: st.tuples(st.just(r), st.integers(0, r - 1))),
            st.booleans(), st.integers(0, 2), st.booleans(),
            st.booleans()))


def build_sampler(spec, data, loader_generator):
    def gen(g):
        if g == "loader":
            return loader_generator
        return None if g is None else torch.Generator().manual_seed(g)
    kind = spec[0]
    if kind == "sequential":
        return tud.SequentialSampler(data)
    if kind == "random":
        return tud.RandomSampler(data, replacement=spec[1],
                                 num_samples=spec[2], generator=gen(spec[3]))
    if kind == "subset":
        return tud.SubsetRandomSampler(spec[1], generator=gen(spec[2]))
    if kind == "weighted":
        return tud.WeightedRandomSampler(spec[1], spec[2],
                                         replacement=spec[3],
                                         generator=gen(spec[4]))
    (replicas, rank), shuffle, seed, drop_last = spec[1:5]
    return tud.DistributedSampler(data, num_replicas=replicas, rank=rank,
                                  shuffle=shuffle, seed=seed,
                                  drop_last=drop_last)


# --------------------------------------------------------------------------
# A case, run through one loader
# --------------------------------------------------------------------------

@st.composite
def cases(draw):
    data = draw(st.sampled_from(["map", "map", "iterable", "iterable",
                                 "shuffled", "iterpipe", "mappipe"]))
    iterable = data in ("iterable", "shuffled", "iterpipe")
    n = draw(st.integers(0, 13))
    workers = draw(st.integers(0, 3))
    kw = {}
    # Batches that overtake one another: compared as a multiset, of whole
    # epochs (which batches a cut-short epoch got is a race).  torch then
    # sends a map-style dataset's next batch to whichever worker has room
    # (a race too): its samples may not show which worker read them.
    unordered = False
    if IN_ORDER and draw(st.sampled_from([False, False, True])):
        kw["in_order"] = False
        unordered = workers > 1
    case = dict(shape=draw(shapes(layouts=TORCH2 or workers == 0,
                                  by_worker=iterable or not unordered)),
                n=n, data=data, num_workers=workers, unordered=unordered,
                collate=draw(st.sampled_from(sorted(COLLATES))),
                seed=draw(st.integers(0, 2**16)), pipe=None, sampler=None,
                batch_sampler=None)
    case["persistent"] = workers > 0 and draw(st.booleans())
    if data == "iterpipe":
        case["pipe"] = draw(st.tuples(
            st.sampled_from([None, "before", "after"]),
            st.sampled_from([None, 1, 3]), st.booleans()))
        # The loader's shuffle reaches the pipe's shufflers.
        shuffle = draw(st.sampled_from([None, True, False]))
        if shuffle is not None:
            kw["shuffle"] = shuffle
    how = "size" if iterable else draw(st.sampled_from(
        ["size", "size", "none", "sampler", "sampler_none",
         "batch_sampler", "torch_sampler", "torch_batch_sampler"]))
    if how.startswith("torch_") and n == 0:
        how = "size"
    if how == "size":
        kw["batch_size"] = draw(st.integers(1, 5))
        kw["drop_last"] = draw(st.booleans())
        if not iterable:
            kw["shuffle"] = draw(st.booleans())
    elif how == "none":
        kw["batch_size"] = None
    elif how in ("sampler", "sampler_none"):
        kw["sampler"] = draw(st.lists(st.integers(0, max(n - 1, 0)),
                                      max_size=12)) if n else []
        kw["batch_size"] = draw(st.integers(1, 4)) if how == "sampler" \
            else None
    elif how == "batch_sampler":
        idx = st.integers(0, max(n - 1, 0))
        kw["batch_sampler"] = draw(st.lists(
            st.lists(idx, min_size=1, max_size=4), max_size=5)) if n else []
        if draw(st.booleans()):
            kw["batch_sampler"] = Rotating(kw["batch_sampler"])
    else:
        case["sampler"] = draw(sampler_specs(n))
        if how == "torch_batch_sampler":
            case["batch_sampler"] = (draw(st.integers(1, 4)),
                                     draw(st.booleans()))
        else:
            kw["batch_size"] = draw(st.one_of(st.none(), st.integers(1, 4)))
    # The rest of torch's signature, each left out in most cases; what
    # torch refuses (a timeout or a prefetch_factor without workers, say)
    # forkload must refuse too.  A prefetch window far past the epoch's
    # batches: a map-style epoch's count caps forkload's; an iterable's is
    # reserved whole, its stream's length unknown, and one past the fd
    # limit is refused where torch's loads: 64 at most there.
    if draw(st.integers(0, 3)) == 0:
        kw["prefetch_factor"] = draw(st.sampled_from(
            [2, 1, 3, 64 if iterable else 1000, None, 0, -1] if workers
            else [2, None, 3]))
    timeout = draw(st.sampled_from([0, 0, 0, 0, 30, -1]))
    if timeout:
        kw["timeout"] = timeout
    if draw(st.booleans()):
        kw["pin_memory"] = True
        # torch 1.13 pins for any pin_memory_device: its workers' iterator
        # then fails to start (torch itself crashes, not a behaviour).
        if TORCH2 or workers == 0:
            device = draw(st.sampled_from(["", "cpu"]))
            if device:
                kw["pin_memory_device"] = device
    if draw(st.sampled_from([False, False, False, True])):
        kw["multiprocessing_context"] = "fork"
    case["generator"] = draw(st.one_of(st.none(), st.integers(0, 2**16)))
    # A worker whose init failed raises at each of its batches (an
    # iterable's without end): which ones, and which 40 are taken, is a
    # race when unordered.
    case["init"] = draw(st.sampled_from(
        ["none", "none", "reseed", "mark"] + ([] if unordered else
                                              ["fails"])))
    case["takes"] = [None if unordered else
                     draw(st.one_of(st.none(), st.integers(0, 3))), None]
    case["kw"] = kw
    return case


def length(loader):
    """len(loader), or the type of what it raises."""
    try:
        return len(loader)
    except Exception as e:  # noqa: BLE001  (torch's TypeError, as torch's)
        return type(e)


def run(cls, case):
    """What each next() gave, epoch by epoch: ('batch', batch) or
    ('error', exception type); len(loader); and what the consumer's
    generators gave after the run (what the loader drew from them shows
    there)."""
    data = dataset_of(case)
    kw = dict(copy.deepcopy(case["kw"]), num_workers=case["num_workers"],
              collate_fn=COLLATES[case["collate"]],
              worker_init_fn=INITS[case["init"]])
    if case["persistent"]:
        kw["persistent_workers"] = True
    seed_all(case["seed"])
    if case["generator"] is not None:
        kw["generator"] = torch.Generator().manual_seed(case["generator"])
    sampler = None
    if case["sampler"] is not None:
        sampler = build_sampler(case["sampler"], data, kw.get("generator"))
        if case["batch_sampler"] is not None:
            kw["batch_sampler"] = tud.BatchSampler(sampler,
                                                   *case["batch_sampler"])
        else:
            kw["sampler"] = sampler
    try:
        loader = cls(data, **kw)
    except Exception as e:  # noqa: BLE001  (torch's refusal, as torch's)
        return [[("error", type(e))]], None, draw_after()
    size = length(loader)
    epochs = []
    for e, take in enumerate(case["takes"]):
        if case["sampler"] is not None and case["sampler"][0] == \
                "distributed" and case["sampler"][-1]:
            sampler.set_epoch(e)
        out = []
        try:
            it = iter(loader)
        except Exception as e:  # noqa: BLE001  (torch's refusal at iter())
            epochs.append([("error", type(e))])
            continue
        while take is None or len(out) < take:
            try:
                out.append(("batch", next(it)))
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001  (the dataset's or collate's)
                out.append(("error", type(e)))
                if len(out) > 40:  # an iterable's worker without a fetcher
                    break          # raises without end
        if not case["persistent"]:
            end_iterator(it)
        del it
        epochs.append(out)
    if case["persistent"] and getattr(loader, "_iterator", None) is not None:
        end_iterator(loader._iterator)
    del loader
    return epochs, size, draw_after()


IMMUTABLE = (type(None), bool, int, float, complex, str, bytes,
             torch.dtype, torch.Size)


def mutable_objects(x, found):
    """id -> object, for every mutable object of a batch (tensors and
    arrays are views of their own segments: counted too)."""
    if isinstance(x, IMMUTABLE) or isinstance(x, np.generic):
        return found
    found[id(x)] = x
    if isinstance(x, dict):
        for v in x.values():
            mutable_objects(v, found)
    elif isinstance(x, (list, tuple)):
        for v in x:
            mutable_objects(v, found)
    elif isinstance(x, Box):
        mutable_objects(x.v, found)
    return found


def assert_shares_nothing(epochs):
    """No mutable object in two of forkload's batches."""
    owner = {}
    for e, out in enumerate(epochs):
        for i, o in enumerate(out):
            if o[0] != "batch":
                continue
            for k, obj in mutable_objects(o[1], {}).items():
                if k in owner and owner[k][0] is obj:
                    raise AssertionError(
                        "epoch %d batch %d shares %r with %s" %
                        (e, i, obj, owner[k][1]))
                owner[k] = (obj, "epoch %d batch %d" % (e, i))


def multiset_key(outcome):
    return repr(outcome[0]) + repr(freeze(outcome[1]) if outcome[0] ==
                                   "batch" else outcome[1])


def assert_epochs_same(fl, th, unordered=False):
    (fl, fl_size, fl_after), (th, th_size, th_after) = fl, th
    assert fl_size == th_size, "len(loader) %s, torch %s" % (fl_size, th_size)
    assert len(fl) == len(th)
    for e, (a, b) in enumerate(zip(fl, th)):
        if unordered:
            a, b = sorted(a, key=multiset_key), sorted(b, key=multiset_key)
        assert [o[0] for o in a] == [o[0] for o in b], \
            "epoch %d: %s, torch %s" % (e, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            if x[0] == "batch":
                assert_same(x[1], y[1], "epoch %d next() %d" % (e, i))
            else:
                assert x[1] is y[1], "epoch %d next() %d: %s, torch %s" % (
                    e, i, x[1], y[1])
    assert_same(fl_after, th_after, "the consumer's generators after")


# torch's warnings for what the cases draw (pin_memory without an
# accelerator, nested tensors, a DataPipe shuffled without a Shuffler),
# which both loaders give: not what is compared here.
@pytest.mark.filterwarnings("ignore::UserWarning")
@settings(max_examples=CASES, deadline=None, derandomize=FIXED,
          database=None,
          suppress_health_check=[HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(cases())
def test_forkload_and_torch_hand_out_the_same_stream(case):
    fl = run(forkload.DataLoader, case)
    th = torch_side(run, tud.DataLoader, case)
    assert_epochs_same(fl, th, case["unordered"])
    assert_shares_nothing(fl[0])


def test_worker_id_is_torchs_inside_the_fuzzers_streams():
    """The fuzzer's iterable streams split by get_worker_info(), which
    forkload's workers answer as torch's do."""
    got = list(forkload.DataLoader(
        StreamData(("int",), 6), batch_size=None, num_workers=2))
    want = torch_side(one_epoch, tud.DataLoader, StreamData(("int",), 6),
                      batch_size=None, num_workers=2)
    assert [int(x) for x in got] == [int(x) for x in want]
    assert worker_id() == -1
