"""forkload.DataLoader against torch's, at random (issue 43): Hypothesis
draws a dataset (map-style or iterable; tensors, numpy arrays and scalars,
numbers, strings, None, nested dicts, lists, tuples and namedtuples,
mutable objects, tensors that do not stack, samples that raise), a way to
batch it (batch_size, drop_last, shuffle, a
sampler or a batch_sampler, a collate_fn) and a way to run it (0 to 3
workers, persistent or not, two epochs, the first maybe cut short); each
case runs through both loaders from the same seed, and the outcomes of
every next() are compared value for value, exception type for exception
type (torch's run in torch's reference interpreter, loader_helpers'
torch_side, as test_sameness.py's: under CI's sanitizer pass torch's
forked workers hang here now and then).  forkload's batches are also
checked to share no mutable object with one another.

FL_FUZZ_CASES sets the number of cases (make check's default below; more
on demand: FL_FUZZ_CASES=5000).  The cases are the same at each run
(Hypothesis derandomized, so that CI's verdict is the tree's); with
FL_FUZZ_RANDOM=1 they are new each run.  A failure Hypothesis finds is printed
with the smallest case it could shrink it to: each becomes a plain test
(test_sameness.py)."""

import collections
import copy
import os

import numpy as np
import pytest
import torch
import torch.utils.data as tud

hypothesis = pytest.importorskip(
    "hypothesis", reason="Hypothesis is not installed (sh tools/setup.sh "
    "installs python3-hypothesis; pip install hypothesis in a venv)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (assert_same, end_iterator, one_epoch,  # noqa: E402
                            seed_all, torch_side, worker_id)

CASES = int(os.environ.get("FL_FUZZ_CASES", "800"))
FIXED = not os.environ.get("FL_FUZZ_RANDOM")

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


def leaves():
    return st.one_of(
        st.tuples(st.just("tensor"), st.sampled_from(TENSOR_DTYPES),
                  st.lists(st.integers(0, 3), max_size=2).map(tuple)),
        st.tuples(st.just("ndarray"), st.sampled_from(NUMPY_DTYPES),
                  st.lists(st.integers(0, 3), max_size=2).map(tuple)),
        st.tuples(st.just("npscalar"), st.sampled_from(NUMPY_DTYPES)),
        st.sampled_from([("int",), ("float",), ("bool",), ("str",),
                         ("bytes",), ("none",), ("box",), ("ragged",),
                         ("fails",)]))


def shapes():
    return st.recursive(
        leaves(),
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

    def __iter__(self):
        info = tud.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield make(self.shape, i)


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
# A case, run through one loader
# --------------------------------------------------------------------------

@st.composite
def cases(draw):
    iterable = draw(st.booleans())
    n = draw(st.integers(0, 13))
    case = dict(shape=draw(shapes()), n=n, iterable=iterable,
                num_workers=draw(st.integers(0, 3)),
                collate=draw(st.sampled_from(sorted(COLLATES))),
                seed=draw(st.integers(0, 2**16)))
    case["persistent"] = case["num_workers"] > 0 and draw(st.booleans())
    case["takes"] = [draw(st.one_of(st.none(), st.integers(0, 3))), None]
    how = "size" if iterable else draw(st.sampled_from(
        ["size", "size", "none", "sampler", "sampler_none",
         "batch_sampler"]))
    kw = {}
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
    else:
        idx = st.integers(0, max(n - 1, 0))
        kw["batch_sampler"] = draw(st.lists(
            st.lists(idx, min_size=1, max_size=4), max_size=5)) if n else []
        if draw(st.booleans()):
            kw["batch_sampler"] = Rotating(kw["batch_sampler"])
    case["kw"] = kw
    return case


def run(cls, case):
    """What each next() gave, epoch by epoch: ('batch', batch) or
    ('error', exception type)."""
    data = (StreamData if case["iterable"] else MapData)(case["shape"],
                                                         case["n"])
    kw = dict(case["kw"], num_workers=case["num_workers"],
              collate_fn=COLLATES[case["collate"]])
    if case["persistent"]:
        kw["persistent_workers"] = True
    seed_all(case["seed"])
    try:
        loader = cls(data, **copy.deepcopy(kw))
    except Exception as e:  # noqa: BLE001  (torch's refusal, as torch's)
        return [[("error", type(e))]]
    epochs = []
    for take in case["takes"]:
        out = []
        it = iter(loader)
        while take is None or len(out) < take:
            try:
                out.append(("batch", next(it)))
            except StopIteration:
                break
            except Exception as e:  # noqa: BLE001  (the dataset's or collate's)
                out.append(("error", type(e)))
                if len(out) > 40:
                    break
        if not case["persistent"]:
            end_iterator(it)
        del it
        epochs.append(out)
    if case["persistent"] and getattr(loader, "_iterator", None) is not None:
        end_iterator(loader._iterator)
    del loader
    return epochs


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


def assert_epochs_same(fl, th):
    assert len(fl) == len(th)
    for e, (a, b) in enumerate(zip(fl, th)):
        assert [o[0] for o in a] == [o[0] for o in b], \
            "epoch %d: %s, torch %s" % (e, a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            if x[0] == "batch":
                assert_same(x[1], y[1], "epoch %d next() %d" % (e, i))
            else:
                assert x[1] is y[1], "epoch %d next() %d: %s, torch %s" % (
                    e, i, x[1], y[1])


@settings(max_examples=CASES, deadline=None, derandomize=FIXED,
          database=None,
          suppress_health_check=[HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(cases())
def test_forkload_and_torch_hand_out_the_same_stream(case):
    fl = run(forkload.DataLoader, case)
    th = torch_side(run, tud.DataLoader, case)
    assert_epochs_same(fl, th)
    assert_shares_nothing(fl)


def test_worker_id_is_torchs_inside_the_fuzzers_streams():
    """The fuzzer's iterable streams split by get_worker_info(), which
    forkload's workers answer as torch's do."""
    got = list(forkload.DataLoader(
        StreamData(("int",), 6), batch_size=None, num_workers=2))
    want = torch_side(one_epoch, tud.DataLoader, StreamData(("int",), 6),
                      batch_size=None, num_workers=2)
    assert [int(x) for x in got] == [int(x) for x in want]
    assert worker_id() == -1
