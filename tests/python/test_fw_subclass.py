"""forkload.DataLoader as frameworks see it: a torch.utils.data.DataLoader
(isinstance) in which nothing of torch's loader runs, re-created from its
arguments as Lightning re-creates a loader, with torch's get_worker_info()
answering in its workers; and without torch, a class of its own.

These need no framework: tests/python/test_fw_*.py run the frameworks.
"""

import subprocess
import sys

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402
import torch.utils.data.dataloader as tud_dataloader  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (IndexDataset, assert_runs_same, run_both,  # noqa: E402
                            subprocess_env)


class WorkerInfoDataset(tud.Dataset):
    """Sample i: i and what torch.utils.data.get_worker_info() says where it
    is read (-1s in the main process)."""

    def __len__(self):
        return 12

    def __getitem__(self, i):
        info = tud.get_worker_info()
        if info is None:
            return torch.tensor([i, -1, -1, -1])
        assert info.dataset is self or type(info.dataset) is type(self)
        return torch.tensor([i, info.id, info.num_workers, info.seed])


class Stream(tud.IterableDataset):
    def __iter__(self):
        return iter(range(5))


def test_forkload_loader_is_a_torch_dataloader():
    assert issubclass(forkload.DataLoader, tud.DataLoader)
    loader = forkload.DataLoader(IndexDataset(4))
    assert isinstance(loader, tud.DataLoader)
    assert loader._dataset_kind == tud_dataloader._DatasetKind.Map
    assert forkload.DataLoader(Stream())._dataset_kind == \
        tud_dataloader._DatasetKind.Iterable


def test_nothing_of_torchs_loader_runs(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch's DataLoader code ran")

    monkeypatch.setattr(tud.DataLoader, "__init__", refuse)
    monkeypatch.setattr(tud.DataLoader, "_get_iterator", refuse)
    monkeypatch.setattr(tud_dataloader, "_SingleProcessDataLoaderIter", refuse)
    monkeypatch.setattr(tud_dataloader, "_MultiProcessingDataLoaderIter",
                        refuse)
    for kw in (dict(), dict(num_workers=2),
               dict(num_workers=2, persistent_workers=True)):
        loader = forkload.DataLoader(IndexDataset(6), batch_size=4, **kw)
        for _ in range(2):
            assert [len(b["i"]) for b in loader] == [4, 2]
        assert len(loader) == 2
        del loader


def test_multiprocessing_context_is_forkloads():
    loader = forkload.DataLoader(IndexDataset(4), num_workers=2,
                                 multiprocessing_context="fork")
    assert loader.multiprocessing_context == "fork"  # as given, not an object
    loader.multiprocessing_context = None
    assert loader.multiprocessing_context is None
    with pytest.raises(ValueError, match="fork"):
        loader.multiprocessing_context = "spawn"
    with pytest.raises(ValueError):
        forkload.DataLoader(IndexDataset(4)).multiprocessing_context = "fork"


def recreate(loader, **changes):
    """type(loader)(...) from the loader's own attributes, as Lightning
    re-creates a loader with its sampler."""
    kw = dict(batch_size=loader.batch_size, drop_last=loader.drop_last,
              num_workers=loader.num_workers,
              collate_fn=loader.collate_fn,
              worker_init_fn=loader.worker_init_fn,
              prefetch_factor=loader.prefetch_factor,
              persistent_workers=loader.persistent_workers,
              multiprocessing_context=loader.multiprocessing_context,
              generator=loader.generator, timeout=loader.timeout,
              pin_memory=loader.pin_memory)
    if isinstance(loader, forkload.DataLoader):
        kw.update(sharing=loader.sharing, tensor_type=loader.tensor_type,
                  shuffle_algorithm=loader.shuffle_algorithm,
                  sample_bytes=loader.sample_bytes)
    kw.update(changes)
    return type(loader)(loader.dataset, **kw)


@pytest.mark.parametrize("rank", [0, 1])
def test_recreated_with_a_distributed_sampler_as_lightning_does(rank):
    def make(cls):
        loader = cls(WorkerInfoDataset(), batch_size=4, shuffle=True,
                     num_workers=2, multiprocessing_context="fork")
        sampler = tud.DistributedSampler(loader.dataset, num_replicas=2,
                                         rank=rank, shuffle=True, seed=3)
        return recreate(loader, sampler=sampler, shuffle=False)

    runs = []
    for cls in (forkload.DataLoader, tud.DataLoader):
        torch.manual_seed(0)
        loader = make(cls)
        assert type(loader) is cls
        epochs = []
        for epoch in range(2):
            loader.sampler.set_epoch(epoch)
            epochs.append([b.clone() for b in loader])
        runs.append(epochs)
        del loader
    fl, th = runs
    for a, b in zip(fl, th):
        assert len(a) == len(b) == 2
        for x, y in zip(a, b):
            assert torch.equal(x, y)


def test_torchs_get_worker_info_in_forkloads_workers():
    fl, th = run_both(WorkerInfoDataset(), batch_size=3, shuffle=True,
                      num_workers=3, epochs=2)
    assert_runs_same(fl, th)
    ids = {int(w) for batch in fl.epochs[0] for w in batch[:, 1]}
    assert ids == {0, 1, 2}


def test_without_torch_a_class_of_its_own():
    code = """
import sys
sys.modules["torch"] = None
import numpy as np
import forkload
import typing
# Generic (DataLoader[T]) as torch's is, but no torch class.
assert forkload.DataLoader.__bases__ == (typing.Generic,), forkload.DataLoader.__mro__
assert forkload.DataLoader[int] is not None
loader = forkload.DataLoader(np.arange(10, dtype=np.int64), batch_size=4,
                             num_workers=2, multiprocessing_context="fork")
assert loader.tensor_type == "numpy" and loader.multiprocessing_context == "fork"
print([b.tolist() for b in loader])
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]"
