"""Samplers and batch samplers run in the consumer as torch runs them (their
draws from torch's generators at the same points), and __getitems__
datasets."""

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    TORCH_IN_PROCESS, IndexDataset, assert_runs_same, fresh, run_both, run_epochs)

N = 23


class StridedFromRandomStart(tud.Sampler):
    """A Python sampler: a generator of indices that draws its start from
    torch's global generator when it starts."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        start = int(torch.randint(0, self.n, (1,)))
        for k in range(self.n):
            yield (start + 7 * k) % self.n

    def __len__(self):
        return self.n


def generator_sampler(n):
    """Any iterable works as a sampler; this one is a generator object."""
    return (i * 7 % n for i in range(n))


class VariableBatches:
    """A batch sampler of batches of 1, 2, 3, 4, 1, 2, ... indices."""

    def __init__(self, n, shuffle=False):
        self.n = n
        self.shuffle = shuffle

    def __iter__(self):
        order = torch.randperm(self.n).tolist() if self.shuffle else list(range(self.n))
        size, k = 1, 0
        while k < self.n:
            yield order[k:k + size]
            k += size
            size = size % 4 + 1

    def __len__(self):
        size, k, count = 1, 0, 0
        while k < self.n:
            k += size
            count += 1
            size = size % 4 + 1
        return count


class TupleBatches(VariableBatches):
    """A batch sampler may yield any sequence of indices: tuples here."""

    def __iter__(self):
        return (tuple(b) for b in super().__iter__())


SAMPLERS = {
    "python_sampler": lambda: dict(sampler=StridedFromRandomStart(N), batch_size=3),
    "range": lambda: dict(sampler=range(2, 19), batch_size=4),
    "generator_object": lambda: dict(sampler=generator_sampler(N), batch_size=3),
    "list_with_repeats": lambda: dict(sampler=[5, 5, 0, 22, 1, 5], batch_size=4),
    "numpy_indices": lambda: dict(sampler=np.arange(N)[::-3], batch_size=2),
    "subset_random": lambda: dict(sampler=tud.SubsetRandomSampler([1, 4, 9, 16, 20, 3, 7]),
                                  batch_size=3),
    "weighted_replacement": lambda: dict(
        sampler=tud.WeightedRandomSampler([0.1 * (i % 5) + 0.05 for i in range(N)],
                                          num_samples=31, replacement=True),
        batch_size=4),
    "weighted_no_replacement": lambda: dict(
        sampler=tud.WeightedRandomSampler([0.1 * (i % 5) + 0.05 for i in range(N)],
                                          num_samples=15, replacement=False),
        batch_size=4),
    "random_replacement": lambda: dict(
        sampler=tud.RandomSampler(range(N), replacement=True, num_samples=70),
        batch_size=8),
    "random_more_than_n": lambda: dict(
        sampler=tud.RandomSampler(range(N), num_samples=2 * N + 5), batch_size=8),
    "random_fewer_than_n": lambda: dict(
        sampler=tud.RandomSampler(range(N), num_samples=9), batch_size=2),
    "random_with_generator": lambda: dict(
        sampler=tud.RandomSampler(range(N), generator=torch.Generator().manual_seed(3)),
        batch_size=5),
    "sequential_drop_last": lambda: dict(sampler=tud.SequentialSampler(range(N)),
                                         batch_size=5, drop_last=True),
    "variable_batches": lambda: dict(batch_sampler=VariableBatches(N)),
    "variable_batches_shuffled": lambda: dict(batch_sampler=VariableBatches(N, True)),
    "tuple_batches": lambda: dict(batch_sampler=TupleBatches(N)),
    "batch_sampler_drop_last": lambda: dict(
        batch_sampler=tud.BatchSampler(tud.SequentialSampler(range(N)), 4, drop_last=True)),
    "batch_sampler_random": lambda: dict(
        batch_sampler=tud.BatchSampler(tud.RandomSampler(range(N)), 3, drop_last=False)),
    "no_batching_sampler": lambda: dict(sampler=tud.RandomSampler(range(N)), batch_size=None),
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", sorted(SAMPLERS))
def test_sampler_batches_match_torch(case, num_workers):
    # The samples say nothing of their worker: torch's loader without workers
    # is the reference (same batches, same draws).
    make = SAMPLERS[case]
    ds = IndexDataset(N, with_worker=False)
    fl = run_epochs(forkload.DataLoader, ds, seed=31, epochs=2,
                    num_workers=num_workers, **make())
    th = run_epochs(tud.DataLoader, ds, seed=31, epochs=2, num_workers=0, **make())
    if case == "generator_object":  # spent after the first epoch, in both
        assert fl.epochs[1] == [] and th.epochs[1] == []
    assert_runs_same(fl, th)


def test_variable_size_batches_have_the_sampler_s_sizes():
    fl = run_epochs(forkload.DataLoader, IndexDataset(N), num_workers=2,
                    batch_sampler=VariableBatches(N))
    assert [b["i"].tolist() for b in fl.epochs[0]] == list(VariableBatches(N))


def distributed(num_replicas, rank, **kw):
    return fresh(lambda: tud.DistributedSampler(range(N), num_replicas=num_replicas,
                                                rank=rank, **kw))


def set_epoch(loader, epoch):
    loader.sampler.set_epoch(epoch)


@pytest.mark.parametrize("rank,drop_last,shuffle", [(0, False, True), (2, True, True),
                                                   (3, False, False), (1, True, False)])
def test_distributed_sampler_matches_torch(rank, drop_last, shuffle):
    fl, th = run_both(IndexDataset(N), seed=32, epochs=2, batch_size=3,
                      num_workers=2, before_epoch=set_epoch,
                      sampler=distributed(4, rank, shuffle=shuffle, seed=17,
                                          drop_last=drop_last))
    assert_runs_same(fl, th)
    if shuffle:
        orders = [[i for b in e for i in b["i"].tolist()] for e in fl.epochs]
        assert orders[0] != orders[1]  # set_epoch was honoured


@pytest.mark.parametrize("num_workers", [0, 2])
def test_distributed_sampler_set_epoch_with_persistent_workers(num_workers):
    extra = dict(persistent_workers=True) if num_workers else {}
    fl, th = run_both(IndexDataset(N), seed=33, epochs=3, batch_size=2,
                      num_workers=num_workers, before_epoch=set_epoch,
                      sampler=distributed(3, 1, shuffle=True, seed=5), **extra)
    assert_runs_same(fl, th)


def test_distributed_ranks_cover_the_dataset_once_with_drop_last():
    seen = []
    for rank in range(4):
        sampler = tud.DistributedSampler(range(N), num_replicas=4, rank=rank,
                                         drop_last=True, seed=1)
        for b in forkload.DataLoader(IndexDataset(N), batch_size=2, sampler=sampler,
                                     num_workers=2):
            seen += b["i"].tolist()
    assert len(seen) == len(set(seen)) == (N // 4) * 4


class GetItemsDataset(tud.Dataset):
    """__getitems__ takes a whole batch's indices; __getitem__ says it was
    used instead."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        return {"i": i, "via": "getitem"}

    def __getitems__(self, indices):
        return [{"i": i, "via": "getitems", "batch": len(indices)} for i in indices]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kw", [dict(batch_size=4), dict(batch_size=4, shuffle=True),
                                dict(batch_sampler=VariableBatches(N)),
                                dict(batch_size=None)],
                         ids=["batch_size", "shuffle", "batch_sampler", "no_batching"])
def test_getitems_dataset_matches_torch(kw, num_workers):
    fl, th = run_both(GetItemsDataset(), seed=34, num_workers=num_workers,
                      torch_kwargs=TORCH_IN_PROCESS, **kw)
    assert_runs_same(fl, th)
    if kw.get("batch_size", 1) is not None:
        assert all(b["via"] == ["getitems"] * len(b["i"]) for b in fl.epochs[0])


class GetItemsTensorsDataset(tud.Dataset):
    """__getitems__ returning the samples of a batch as tensors that are
    views of one array."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        raise AssertionError("__getitems__ is there")

    def __getitems__(self, indices):
        block = torch.arange(len(indices) * 3, dtype=torch.float64).reshape(-1, 3)
        block += torch.tensor(indices, dtype=torch.float64)[:, None] * 100
        return [(block[k], indices[k]) for k in range(len(indices))]


@pytest.mark.parametrize("num_workers", [0, 3])
def test_getitems_returning_views_matches_torch(num_workers):
    fl, th = run_both(GetItemsTensorsDataset(), num_workers=num_workers,
                      batch_size=5, torch_kwargs=TORCH_IN_PROCESS)
    assert_runs_same(fl, th)
