"""What a batch is made of: default_collate's structure, types, dtypes and
shapes, a custom collate_fn's result as it left the worker,
tensor_type='numpy', and the errors of samples that cannot be stacked.

The samples are deterministic and say nothing of their worker, so torch's
loader without workers is the reference (it hands out the same batches as
with workers, and is cheap); the errors are compared with torch built with
the same arguments, for their messages differ with workers."""

import collections

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    IndexDataset,
    outcomes, assert_outcomes_same,
    TORCH_IN_PROCESS, FnDataset, assert_runs_same, assert_same,
    assert_same_as_numpy, run_both,
    run_epochs)

Point = collections.namedtuple("Point", ["x", "y"])

N = 7   # batches of 3: the last one is short
BS = 3

NP_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64,
             np.float16, np.float32, np.float64]
TENSOR_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                 torch.int64, torch.float16, torch.float32, torch.float64]


def np_sample(dtype):
    return lambda i: (np.arange(6).reshape(2, 3) * (i + 1) % 5).astype(dtype)


def tensor_sample(dtype):
    return lambda i: (torch.arange(6).reshape(3, 2) * (i + 1) % 5).to(dtype)


# Samples by kind; GROUPS below puts many kinds in one dict sample (a failure
# names the key), the kinds in TOP_LEVEL are samples of their own as well.
SAMPLES = {
    "np_noncontiguous": lambda i: (np.arange(12, dtype=np.int32).reshape(3, 4) + i).T,
    "np_strided": lambda i: np.arange(30, dtype=np.float32)[i::4][:5],
    "np_0d": lambda i: np.array(i * 1.5),
    "np_big": lambda i: np.full((64, 33), i, dtype=np.float32),
    "np_complex64": lambda i: np.arange(4, dtype=np.complex64) * (1 + 1j) * i,
    "tensor_noncontiguous": lambda i: (torch.arange(12).reshape(3, 4) + i).t(),
    "tensor_0d": lambda i: torch.tensor(i * 2.5),
    "tensor_empty": lambda i: torch.zeros(0, 3),
    "tensor_view_of_larger": lambda i: torch.arange(100.0)[i:i + 3],
    "tensor_bfloat16": lambda i: torch.arange(4, dtype=torch.bfloat16) * i,
    "int": lambda i: i,
    "negative_and_large_int": lambda i: -(2 ** 40) + i,
    "float": lambda i: i / 3,
    "bool": lambda i: i % 2 == 0,
    "np_scalars": lambda i: (np.float32(i / 2), np.int16(i), np.bool_(i % 2),
                             np.float64(i), np.uint8(i), np.int64(-i)),
    "str": lambda i: "sample-%d" % i,
    "bytes": lambda i: bytes([65 + i]) * (i + 1),
    "dict": lambda i: {"a": np.arange(3) + i, "b": i, "c": "x" * i},
    "ordered_dict": lambda i: collections.OrderedDict(
        [("z", torch.tensor([i])), ("a", float(i))]),
    "nested": lambda i: {"x": [np.ones(2) * i, (i, float(i))],
                         "y": {"z": torch.tensor([i, i]), "s": str(i)},
                         "t": ("name-%d" % i, b"b")},
    "namedtuple": lambda i: Point(x=i, y=np.arange(2) + i),
    "namedtuple_of_dicts": lambda i: Point(x={"v": i}, y=[i, i + 1]),
    "tuple": lambda i: (i, np.arange(2, dtype=np.int16), "t%d" % i),
    "list": lambda i: [i, i + 1.5, torch.tensor(i)],
    "list_of_dicts": lambda i: [{"k": i}, {"k": -i}],
    "torch_size": lambda i: torch.Size([i, 2]),
}
for _d in NP_DTYPES:
    SAMPLES["np_" + np.dtype(_d).name] = np_sample(_d)
for _d in TENSOR_DTYPES:
    SAMPLES["tensor_" + str(_d).replace("torch.", "")] = tensor_sample(_d)

GROUPS = {
    "numpy_arrays": ["np_" + np.dtype(d).name for d in NP_DTYPES] +
                    ["np_noncontiguous", "np_strided", "np_0d", "np_big"],
    "tensors": ["tensor_" + str(d).replace("torch.", "") for d in TENSOR_DTYPES] +
               ["tensor_noncontiguous", "tensor_0d", "tensor_empty",
                "tensor_view_of_larger"],
    "python_scalars": ["int", "negative_and_large_int", "float", "bool"],
    "numpy_scalars": ["np_scalars"],
    "strings": ["str", "bytes"],
    "containers": ["dict", "ordered_dict", "nested", "namedtuple",
                   "namedtuple_of_dicts", "tuple", "list", "list_of_dicts"],
}
TOP_LEVEL = ["str", "bytes", "int", "float", "bool", "np_float32", "tensor_float32",
             "tuple", "list", "namedtuple", "ordered_dict", "nested",
             "np_complex64", "tensor_bfloat16", "torch_size"]


def grouped(kinds):
    return lambda i: {k: SAMPLES[k](i) for k in kinds}


CASES = dict({"group_" + g: grouped(k) for g, k in GROUPS.items()},
             **{k: SAMPLES[k] for k in TOP_LEVEL})


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_collate_matches_torch(case, num_workers):
    fl, th = run_both(FnDataset(N, CASES[case]), batch_size=BS,
                      num_workers=num_workers, torch_kwargs=TORCH_IN_PROCESS)
    assert_runs_same(fl, th)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", ["group_numpy_arrays", "group_containers",
                                  "group_numpy_scalars", "group_python_scalars",
                                  "tuple", "str", "np_float32", "torch_size"])
def test_no_batching_converts_samples_as_torch(case, num_workers):
    # batch_size=None: default_convert, one sample at a time.
    fl, th = run_both(FnDataset(N, CASES[case]), batch_size=None,
                      num_workers=num_workers, torch_kwargs=TORCH_IN_PROCESS)
    assert_runs_same(fl, th)
    assert len(fl.epochs[0]) == N


# Where torch versions differ: torch 2 collates numpy's uint16, uint32 and
# uint64 and tensors of its newer dtypes (uint16 to uint64, float8, and
# complex32) that torch 1.13 refuses with its own message (or has not).
def _newer(name, fallback):
    return getattr(torch, name, fallback)


NEWER_TYPES = {
    "np_uint16": lambda i: np.arange(3, dtype=np.uint16) + i,
    "np_uint32": lambda i: np.arange(3, dtype=np.uint32) * i,
    "np_uint64": lambda i: np.arange(3, dtype=np.uint64) + i,
    "np_uint16_scalar": lambda i: np.uint16(i),
    "np_uint32_scalar": lambda i: np.uint32(i * 7),
    "np_longdouble": lambda i: np.arange(2, dtype=np.longdouble),
    "tensor_uint16": lambda i: (torch.arange(3) + i).to(_newer("uint16", torch.int16)),
    "tensor_uint32": lambda i: (torch.arange(3) * i).to(_newer("uint32", torch.int32)),
    "tensor_uint64": lambda i: (torch.arange(3) + i).to(_newer("uint64", torch.int64)),
    "tensor_float8": lambda i: (torch.arange(4) / 4).to(
        _newer("float8_e4m3fn", torch.float16)),
    "tensor_complex32": lambda i: torch.full((2,), float(i)).to(torch.complex32),
    "np_bytes_scalar": lambda i: np.bytes_(b"b%d" % i),
}


def outcome_of(o):
    """An outcome, where tensors of dtypes torch.equal has no kernel for
    are compared by their bytes."""
    if o[0] != "batch" or not isinstance(o[1], torch.Tensor):
        return o
    t = o[1].contiguous()
    return ("batch", t.dtype, tuple(t.shape),
            t.reshape(-1).view(torch.uint8).tolist())


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size", [BS, None])
@pytest.mark.parametrize("case", sorted(NEWER_TYPES))
def test_newer_dtypes_are_collated_or_refused_as_the_installed_torch_does(
        case, batch_size, num_workers):
    ds = FnDataset(N, NEWER_TYPES[case])
    got = outcomes(forkload.DataLoader(ds, batch_size=batch_size,
                                       num_workers=num_workers))
    want = outcomes(tud.DataLoader(ds, batch_size=batch_size,
                                   num_workers=num_workers))
    got = [outcome_of(o) for o in got]
    want = [outcome_of(o) for o in want]
    assert [o[0] for o in got] == [o[0] for o in want]
    for a, b in zip(got, want):
        if a[0] == "batch":
            assert a == b
        else:
            assert a[1] is b[1]
            assert a[2].splitlines()[-1] == b[2].splitlines()[-1]


# Containers of other types than dict and list: torch 1.13 builds the
# batch's with type(sample)(values), torch 2 fills a copy of a mutable one
# (a defaultdict keeps its default_factory, a subclass its attributes).
class NotedDict(dict):
    pass


class NotedList(list):
    pass


class OwnMapping(collections.abc.MutableMapping):
    """A mutable mapping that is no dict."""

    def __init__(self, d=()):
        self.d = dict(d)

    def __getitem__(self, k):
        return self.d[k]

    def __setitem__(self, k, v):
        self.d[k] = v

    def __delitem__(self, k):
        del self.d[k]

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def noted(c, i):
    c.note = "n%d" % i
    return c


def with_default(i):
    d = collections.defaultdict(list)
    d["x"] = np.arange(2) + i
    d["s"] = "s%d" % i
    return d


CONTAINERS = {
    "defaultdict": with_default,
    "dict_subclass": lambda i: noted(NotedDict(x=torch.tensor([i]), k=i), i),
    "list_subclass": lambda i: noted(NotedList([i, np.float32(i)]), i),
    "own_mapping": lambda i: OwnMapping({"x": torch.tensor([i, i]), "k": i}),
    "nested": lambda i: {"outer": noted(NotedDict(inner=with_default(i)), i)},
}


def container_looks(x):
    """What assert_same does not compare: the attributes a container kept."""
    if isinstance(x, torch.Tensor):
        return None
    if isinstance(x, OwnMapping):
        x = dict(x)
    out = [type(x).__name__, getattr(x, "note", None),
           getattr(x, "default_factory", None)]
    if isinstance(x, collections.abc.Mapping):
        out += [(k, container_looks(v)) for k, v in x.items()]
    elif isinstance(x, list):
        out += [container_looks(v) for v in x]
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size", [BS, None])
@pytest.mark.parametrize("case", sorted(CONTAINERS))
def test_other_containers_are_made_as_the_installed_torch_makes_them(
        case, batch_size, num_workers):
    fl, th = run_both(FnDataset(N, CONTAINERS[case]), batch_size=batch_size,
                      num_workers=num_workers, torch_kwargs=TORCH_IN_PROCESS)
    for a, b in zip(fl.epochs[0], th.epochs[0]):
        assert container_looks(a) == container_looks(b)
        if isinstance(b, OwnMapping):
            a, b = dict(a), dict(b)
        assert_same(a, b)


class Payload:
    """A non-tensor object a collate_fn may return; pickled by reference."""

    def __init__(self, ids):
        self.ids = list(ids)

    def __eq__(self, other):
        return type(other) is Payload and other.ids == self.ids

    def __repr__(self):
        return "Payload(%r)" % self.ids


def structured_collate(samples):
    ids = [s["i"] for s in samples]
    return {
        "ids": ids,
        "payload": Payload(ids),
        "array": np.stack([s["a"] for s in samples]),
        "tensor": torch.stack([torch.as_tensor(s["a"]) for s in samples]),
        "tuple": (len(ids), "text", None, 2.5),
        "set": frozenset(ids),
        "column": torch.stack([torch.as_tensor(s["a"]) for s in samples])[:, 1],
        "shape": torch.stack([torch.as_tensor(s["a"]) for s in samples]).shape,
    }


def payload_collate(samples):
    return Payload(s["i"] for s in samples)


def string_collate(samples):
    return ",".join(str(s["i"]) for s in samples)


def identity_collate(samples):
    return samples


def newer_dtype_collate(samples):
    """A tensor of a dtype forkload does not write, torch 2's uint16 (int64
    with torch 1.13, which has none), in a dict."""
    ids = [s["i"] for s in samples]
    if hasattr(torch, "uint16"):
        return {"ids": torch.tensor(ids).to(torch.uint16), "n": len(ids)}
    return {"ids": torch.tensor(ids), "n": len(ids)}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("collate_fn", [structured_collate, payload_collate,
                                        string_collate, identity_collate,
                                        newer_dtype_collate],
                         ids=lambda f: f.__name__)
def test_custom_collate_result_reaches_the_consumer_as_torchs(collate_fn, num_workers):
    ds = FnDataset(N, lambda i: {"i": i, "a": np.arange(4, dtype=np.int32) * i})
    fl, th = run_both(ds, batch_size=BS, num_workers=num_workers,
                      collate_fn=collate_fn, torch_kwargs=TORCH_IN_PROCESS)
    assert_runs_same(fl, th)


def collate_in_worker_marker(samples):
    info = tud.get_worker_info()
    return {"ran_in": -1 if info is None else info.id, "n": len(samples)}


def test_custom_collate_runs_in_the_worker():
    fl, th = run_both(FnDataset(N, lambda i: i), batch_size=BS, num_workers=2,
                      collate_fn=collate_in_worker_marker)
    assert_runs_same(fl, th)
    assert [b["ran_in"] for b in fl.epochs[0]] == [0, 1, 0]


NUMPY_CASES = ["group_numpy_arrays", "group_python_scalars", "group_numpy_scalars",
               "group_containers", "group_strings", "np_float32", "int", "tuple",
               "namedtuple", "tensor_float32"]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", NUMPY_CASES)
def test_tensor_type_numpy_gives_arrays_where_torch_gives_tensors(case, num_workers):
    ds = FnDataset(N, CASES[case])
    fl = run_epochs(forkload.DataLoader, ds, batch_size=BS,
                    num_workers=num_workers, tensor_type="numpy")
    th = run_epochs(tud.DataLoader, ds, batch_size=BS, num_workers=0)
    assert len(fl.epochs[0]) == len(th.epochs[0])
    for i, (a, b) in enumerate(zip(fl.epochs[0], th.epochs[0])):
        assert_same_as_numpy(a, b, "batch %d" % i)


def test_tensor_type_torch_is_the_default_with_torch():
    ds = FnDataset(N, SAMPLES["np_float32"])
    for b in forkload.DataLoader(ds, batch_size=BS, num_workers=2,
                                 tensor_type="torch"):
        assert type(b) is torch.Tensor
    for b in forkload.DataLoader(ds, batch_size=BS):
        assert type(b) is torch.Tensor


def odd_shape(i):
    return torch.ones(3 if i == 7 else 2) * i


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("as_numpy", [False, True], ids=["tensors", "arrays"])
def test_a_sample_of_another_shape_fails_its_batch_only(num_workers, as_numpy):
    fn = (lambda i: odd_shape(i).numpy()) if as_numpy else odd_shape
    ds = FnDataset(12, fn)
    got = outcomes(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers))
    want = outcomes(tud.DataLoader(ds, batch_size=2, num_workers=num_workers))
    assert_outcomes_same(got, want, num_workers)
    assert [o[0] for o in got] == ["batch"] * 3 + ["error"] + ["batch"] * 2
    assert got[3][1] is RuntimeError
    assert "stack expects each tensor to be equal size" in got[3][2]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_sequences_of_unequal_length_raise_runtime_error(num_workers):
    ds = FnDataset(8, lambda i: list(range(3 if i == 2 else 2)))
    got = outcomes(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers))
    want = outcomes(tud.DataLoader(ds, batch_size=2, num_workers=num_workers))
    assert_outcomes_same(got, want, num_workers, messages=False)
    assert [o[0] for o in got] == ["batch", "error", "batch", "batch"]
    assert got[1][1] is RuntimeError


class NotCollatable:
    pass


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("fn", [lambda i: NotCollatable(),
                                lambda i: np.array(["a", "b"]),
                                lambda i: np.array([object(), None])],
                         ids=["object", "np_str", "np_object"])
def test_samples_default_collate_refuses_raise_type_error(fn, num_workers):
    ds = FnDataset(4, fn)
    got = outcomes(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers))
    want = outcomes(tud.DataLoader(ds, batch_size=2, num_workers=num_workers))
    assert_outcomes_same(got, want, num_workers, messages=False)
    assert [o[1] for o in got] == [TypeError, TypeError]


def grow_with_the_batch(samples):
    """A collate_fn whose output grows with the samples' indices, as a
    padding collate_fn's does with the longest sequence of a batch."""
    return torch.zeros(4096 * (1 + max(samples)))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_batch_larger_than_its_room_comes_whole_as_torchs(num_workers):
    """The room measured from sample 0 is a hint: a batch larger than it
    moves to a larger segment (tests/python/test_anysize.py has more)."""
    ds = IndexDataset(8, with_worker=False)
    kw = dict(batch_size=2, num_workers=num_workers,
              collate_fn=lambda s: grow_with_the_batch([x["i"] for x in s]))
    got = outcomes(forkload.DataLoader(ds, **kw))
    want = outcomes(tud.DataLoader(ds, **kw))
    assert_outcomes_same(got, want, num_workers)
    assert [o[0] for o in got] == ["batch"] * 4
    for i, o in enumerate(got):
        assert o[1].shape == (4096 * (2 * i + 2),)
