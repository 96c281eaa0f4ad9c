"""IterableDataset: every worker iterates its own copy; batches interleave
round robin, an exhausted worker skipped (torch's order at the ends of
uneven streams), each worker's last short batch kept or dropped, no batching
with batch_size=None, and errors raised mid-stream."""

import warnings

import pytest
pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    outcomes, assert_outcomes_same,
    ShardedIterable, SizedShardedIterable, assert_runs_same, assert_same, multiset,
    run_both)


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_sharded_stream_matches_torch(sharded_iterable, num_workers, batch_size):
    assert sharded_iterable.total == 23
    fl, th = run_both(sharded_iterable, batch_size=batch_size,
                      num_workers=num_workers)
    assert_runs_same(fl, th)
    values = sorted(v for b in fl.epochs[0] for v in b[0].tolist())
    assert values == list(range(23))


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_sharded_stream_drop_last_matches_torch(num_workers):
    # drop_last drops each worker's own last short batch.
    fl, th = run_both(ShardedIterable(23), batch_size=3, drop_last=True,
                      num_workers=num_workers)
    assert_runs_same(fl, th)
    assert all(len(b[0]) == 3 for b in fl.epochs[0])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_no_batching_yields_samples_one_by_one_as_torch(num_workers):
    fl, th = run_both(ShardedIterable(11), batch_size=None, num_workers=num_workers)
    assert_runs_same(fl, th)
    # default_convert: a sample (value, worker) comes out as a list of ints.
    assert all(type(s) is list and type(s[0]) is int for s in fl.epochs[0])
    assert sorted(s[0] for s in fl.epochs[0]) == list(range(11))


class ArraysIterable(tud.IterableDataset):
    def __iter__(self):
        import numpy as np
        info = tud.get_worker_info()
        w = 0 if info is None else info.id
        for k in range(5 + w):
            yield {"a": np.arange(3, dtype=np.float32) + 10 * w + k, "k": k,
                   "name": "w%d" % w}


@pytest.mark.parametrize("batch_size", [None, 2])
@pytest.mark.parametrize("num_workers", [0, 2])
def test_stream_of_arrays_matches_torch(num_workers, batch_size):
    fl, th = run_both(ArraysIterable(), batch_size=batch_size,
                      num_workers=num_workers)
    assert_runs_same(fl, th)


def test_unsharded_stream_is_repeated_by_every_worker_as_in_torch():
    fl, th = run_both(ShardedIterable(7, shard=False), batch_size=2, num_workers=2)
    assert_runs_same(fl, th)
    assert len(fl.epochs[0]) == 8


@pytest.mark.parametrize("num_workers", [1, 2])
def test_persistent_workers_restart_the_stream_each_epoch(num_workers):
    fl, th = run_both(ShardedIterable(13), epochs=3, batch_size=4,
                      num_workers=num_workers, persistent_workers=True)
    assert_runs_same(fl, th)
    assert_same(fl.epochs[0], fl.epochs[2])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_epoch_after_a_partial_epoch_matches_torch(num_workers):
    extra = dict(persistent_workers=True) if num_workers else {}
    fl, th = run_both(ShardedIterable(17), takes=[2, None], batch_size=3,
                      num_workers=num_workers, **extra)
    assert_runs_same(fl, th)


LEN_CASES = [dict(batch_size=3), dict(batch_size=3, drop_last=True),
             dict(batch_size=None), dict(batch_size=5, num_workers=2)]


@pytest.mark.parametrize("kw", LEN_CASES, ids=["ceil", "drop_last", "no_batching", "workers"])
def test_len_matches_torch(kw):
    ds = SizedShardedIterable(10)
    assert len(forkload.DataLoader(ds, **kw)) == len(tud.DataLoader(ds, **kw))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_more_batches_than_len_warn_as_torch(num_workers):
    """After len(loader), each batch past the length the dataset reported
    warns, in the installed torch's words (torch 2's lost a space)."""
    ds = SizedShardedIterable(9, length=3)

    def run(cls):
        loader = cls(ds, batch_size=2, num_workers=num_workers)
        assert len(loader) == 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = list(loader)
        return batches, [(w.category, str(w.message)) for w in caught]

    (got, got_warnings), (want, want_warnings) = run(forkload.DataLoader), \
        run(tud.DataLoader)
    assert multiset(got) == multiset(want)
    assert len(want_warnings) == len(want) - 3
    assert got_warnings == want_warnings


def test_len_without_dataset_len_is_a_type_error_as_in_torch():
    ds = ShardedIterable(10)
    with pytest.raises(TypeError):
        len(tud.DataLoader(ds, batch_size=2))
    with pytest.raises(TypeError):
        len(forkload.DataLoader(ds, batch_size=2))


class FailingGeneratorStream(tud.IterableDataset):
    """Worker 1's generator (the only stream without workers) raises at its
    4th item; a generator that raised is over."""

    def __iter__(self):
        info = tud.get_worker_info()
        w = -1 if info is None else info.id
        for k in range(8):
            if k == 3 and w in (-1, 1):
                raise ValueError("stream of worker %d broke at item %d" % (w, k))
            yield (w, k)


class FailingIterator(tud.IterableDataset):
    """An iterator object whose __next__ raises once, at its 4th item, and
    then goes on."""

    def __iter__(self):
        return _FailOnce()


class _FailOnce:
    def __init__(self):
        self.k = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.k += 1
        if self.k > 7:
            raise StopIteration
        if self.k == 4:
            raise KeyError("item %d" % self.k)
        return self.k


class FailingIterCall(tud.IterableDataset):
    """__iter__ itself raises, in worker 1 (or without workers)."""

    def __iter__(self):
        info = tud.get_worker_info()
        if info is None or info.id == 1:
            raise RuntimeError("no stream here")
        return iter(range(5))


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("ds", [FailingGeneratorStream(), FailingIterator()],
                         ids=["generator", "iterator"])
@pytest.mark.parametrize("batch_size", [None, 2])
def test_stream_raising_midway_matches_torch(ds, num_workers, batch_size):
    got = outcomes(forkload.DataLoader(ds, batch_size=batch_size, num_workers=num_workers))
    want = outcomes(tud.DataLoader(ds, batch_size=batch_size, num_workers=num_workers))
    assert_outcomes_same(got, want, num_workers)
    assert any(o[0] == "error" for o in got)


def test_stream_whose_iter_raises_reaches_the_consumer_as_in_torch():
    # torch delivers the error at worker 1's first batch; what it does with
    # that worker afterwards is its own affair (torch 1.13 fails every later
    # batch of it, for ever): compare up to there.
    got = outcomes(forkload.DataLoader(FailingIterCall(), batch_size=2, num_workers=2),
                   stop_at_error=True)
    want = outcomes(tud.DataLoader(FailingIterCall(), batch_size=2, num_workers=2),
                    stop_at_error=True)
    assert_outcomes_same(got, want, 2)
    assert got[-1][0] == "error" and "no stream here" in got[-1][2]
