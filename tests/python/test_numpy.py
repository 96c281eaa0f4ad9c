"""forkload with numpy alone (tensor_type="numpy"), no torch: what CI runs
under CPython 3.10, 3.12 and 3.13, where PyPI has no CPU torch and every
module that compares with torch is skipped.  The batches are checked
against numpy's own stacking: the module's collate reads each array
through the buffer protocol, and each batch's arrays are views of its
segment, exported through the buffer protocol (on 3.10's full API, a
build of its own), which outlive the loader; without torch, the module's
own messages name the type of the element that does not collate; a
built-in dataset gives arrays.
"""

import datetime
import gc
import importlib.util

import numpy as np
import pytest

import forkload
from forkload import datasets as fds
from proc_helpers import Fn


def sample(i):
    return {"x": np.arange(6, dtype=np.float32).reshape(2, 3) * i,
            "i": i, "f": 0.5 * i, "t": (np.int16(i), [i, -i])}


def numpy_batch(samples):
    return {"x": np.stack([s["x"] for s in samples]),
            "i": np.array([s["i"] for s in samples], dtype=np.int64),
            "f": np.array([s["f"] for s in samples], dtype=np.float64),
            "t": [np.array([s["t"][0] for s in samples], dtype=np.int16),
                  [np.array([s["t"][1][k] for s in samples], dtype=np.int64)
                   for k in range(2)]]}


def assert_equal(got, want, path="batch"):
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), path
        for k in want:
            assert_equal(got[k], want[k], "%s[%r]" % (path, k))
    elif isinstance(want, list):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), path
        for k, (a, b) in enumerate(zip(got, want)):
            assert_equal(a, b, "%s[%d]" % (path, k))
    else:
        assert type(got) is np.ndarray, (path, type(got))
        assert got.dtype == want.dtype, (path, got.dtype, want.dtype)
        assert np.array_equal(got, want), (path, got, want)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batches_are_numpys_stacking(num_workers):
    loader = forkload.DataLoader(Fn(10, sample), batch_size=4,
                                 num_workers=num_workers, tensor_type="numpy")
    got = list(loader)
    assert len(got) == len(loader) == 3
    for k, b in enumerate(got):
        assert_equal(b, numpy_batch([sample(i)
                                     for i in range(4 * k, min(4 * k + 4, 10))]),
                     "batch %d" % k)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_views_of_the_segment_outlive_the_loader(num_workers):
    loader = forkload.DataLoader(Fn(8, sample), batch_size=4,
                                 num_workers=num_workers, tensor_type="numpy")
    kept = []
    for b in loader:
        kept.append((memoryview(b["x"]), np.asarray(b["x"])[1:],
                     int(b["i"][0])))
    del loader, b
    gc.collect()
    for mv, tail, first in kept:
        want = np.stack([sample(i)["x"] for i in range(first, first + 4)])
        assert mv.format == "f" and mv.shape == (4, 2, 3)
        assert np.array_equal(np.asarray(mv), want)
        assert np.array_equal(tail, want[1:])


class Thing:
    pass


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None,
                    reason="with torch, forkload leaves an element it cannot "
                    "collate to torch's default_collate, whose words "
                    "test_collate.py compares")
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("other, name", [
    ("s", "str"), (Thing(), "Thing"),
    (datetime.date(2020, 1, 2), "datetime.date")])
def test_an_element_that_does_not_collate_is_named(num_workers, other, name):
    ds = Fn(4, lambda i: np.zeros(2) if i % 2 == 0 else other)
    with pytest.raises(TypeError, match="expected Tensor as element 1 in "
                       "argument 0, but got %s$" % name):
        list(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers,
                                 tensor_type="numpy"))


def test_a_built_in_dataset_gives_arrays(tmp_path):
    x = np.random.default_rng(3).standard_normal((11, 4))
    np.save(tmp_path / "x.npy", x)
    got = list(forkload.DataLoader(fds.NpyArray(tmp_path / "x.npy"),
                                   batch_size=4, num_workers=2,
                                   tensor_type="numpy"))
    assert all(type(b) is np.ndarray for b in got)
    assert np.array_equal(np.concatenate(got), x)
