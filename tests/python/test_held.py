"""Batches held by the consumer: every batch of `list(loader)` keeps its
values, under both sharing strategies; tensors are views that outlive the
loader and the batch; many held batches cost no descriptor each; DLPack,
numpy and memoryview views of batches; and no forkload name left in /dev/shm
once the loader and its batches are gone."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    FnDataset, assert_same, end_iterator, forkload_names, run_epochs,
    subprocess_env, wait_until)

SHARINGS = ["fd", "file_system"]


def sample(i):
    return {"x": torch.full((16,), float(i)), "y": np.arange(4, dtype=np.int64) + i,
            "i": i}


def check_batch(b, indices):
    """b is the batch of samples `indices`, as sample() made them."""
    idx = torch.tensor(indices)
    assert torch.equal(b["i"], idx)
    assert torch.equal(b["x"], idx[:, None].float().expand(-1, 16))
    assert torch.equal(b["y"], torch.arange(4)[None, :] + idx[:, None])


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sharing", SHARINGS)
def test_list_of_batches_keeps_every_batchs_values(sharing, num_workers):
    n, bs = 41, 3
    batches = list(forkload.DataLoader(FnDataset(n, sample), batch_size=bs,
                                       num_workers=num_workers, sharing=sharing))
    assert len(batches) == (n + bs - 1) // bs
    for k, b in enumerate(batches):
        check_batch(b, list(range(k * bs, min(n, (k + 1) * bs))))
    want = list(tud.DataLoader(FnDataset(n, sample), batch_size=bs))
    for k, (a, b) in enumerate(zip(batches, want)):
        assert_same(a, b, "batch %d" % k)


@pytest.mark.parametrize("sharing", SHARINGS)
def test_batches_held_over_several_epochs_keep_their_values(sharing):
    fl = run_epochs(forkload.DataLoader, FnDataset(20, sample), epochs=3,
                    batch_size=4, shuffle=True, num_workers=2,
                    persistent_workers=True, sharing=sharing)
    for e in fl.epochs:
        for b in e:
            check_batch(b, b["i"].tolist())
        assert sorted(i for b in e for i in b["i"].tolist()) == list(range(20))


@pytest.mark.parametrize("sharing", SHARINGS)
def test_tensors_outlive_the_loader_and_their_batch(sharing):
    loader = forkload.DataLoader(FnDataset(12, sample), batch_size=4, num_workers=2,
                                 sharing=sharing)
    batches = list(loader)
    del loader
    gc.collect()
    for k, b in enumerate(batches):
        check_batch(b, list(range(4 * k, 4 * k + 4)))
    # Only views of parts of each batch are left.
    parts = [(b["x"][1:3], b["y"][:, 2], b["i"][-1]) for b in batches]
    del batches, b
    gc.collect()
    for k, (x, y, last) in enumerate(parts):
        assert torch.equal(x, torch.tensor([4.0 * k + 1, 4.0 * k + 2])[:, None].expand(-1, 16))
        assert y.tolist() == [4 * k + j + 2 for j in range(4)]
        assert int(last) == 4 * k + 3


@pytest.mark.parametrize("sharing", SHARINGS)
def test_views_made_through_dlpack_numpy_and_memoryview_outlive_the_batch(sharing):
    loader = forkload.DataLoader(FnDataset(8, sample), batch_size=4, num_workers=2,
                                 sharing=sharing)
    views = []
    for b in loader:
        x = b["x"]
        views.append((torch.from_dlpack(x), np.from_dlpack(x), x.numpy(),
                      memoryview(b["y"].numpy()), int(b["i"][0])))
    del loader, b, x
    gc.collect()
    for via_dlpack, via_np_dlpack, via_numpy, mv, first in views:
        want = torch.arange(first, first + 4).float()[:, None].expand(-1, 16)
        assert torch.equal(via_dlpack, want)
        assert np.array_equal(via_np_dlpack, want.numpy())
        assert np.array_equal(via_numpy, want.numpy())
        assert np.array_equal(np.asarray(mv), np.arange(4)[None, :] + np.arange(first, first + 4)[:, None])
        # The same memory, not copies.
        assert via_np_dlpack.ctypes.data == via_dlpack.data_ptr() == via_numpy.ctypes.data


@pytest.mark.parametrize("sharing", SHARINGS)
def test_numpy_batches_outlive_the_loader_through_their_views(sharing):
    loader = forkload.DataLoader(FnDataset(8, sample), batch_size=4, num_workers=2,
                                 sharing=sharing, tensor_type="numpy")
    kept = []
    for b in loader:
        assert isinstance(b["x"], np.ndarray)
        x, y = b["x"], b["y"]
        # torch takes only writable arrays (DLPack cannot say read-only).
        if x.flags.writeable:
            x = torch.from_dlpack(x)
        if y.flags.writeable:
            y = torch.from_numpy(y)
        kept.append((memoryview(b["x"]), np.asarray(b["y"])[1:], x, y, int(b["i"][0])))
    del loader, b
    gc.collect()
    for mv, y_view, x, y, first in kept:
        want_x = np.arange(first, first + 4, dtype=np.float32)[:, None].repeat(16, 1)
        want_y = np.arange(4)[None, :] + np.arange(first, first + 4)[:, None]
        assert np.array_equal(np.asarray(mv), want_x)
        assert np.array_equal(y_view, want_y[1:])
        assert np.array_equal(np.asarray(x), want_x)
        assert np.array_equal(np.asarray(y), want_y)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sharing", SHARINGS)
def test_batch_tensors_are_writable_and_their_own(sharing, num_workers):
    """In-place changes to a batch (as a training loop makes them) change that
    batch only, as with torch's tensors."""
    batches = list(forkload.DataLoader(FnDataset(12, sample), batch_size=3,
                                       num_workers=num_workers, sharing=sharing))
    for b in batches:
        b["x"].mul_(-1).add_(0.5)
        b["y"][:, 0] = 99
    for k, b in enumerate(batches):
        idx = torch.arange(3 * k, 3 * k + 3)
        assert torch.equal(b["x"], (0.5 - idx.float())[:, None].expand(-1, 16))
        assert b["y"][:, 0].tolist() == [99] * 3
        assert torch.equal(b["y"][:, 1:], torch.arange(1, 4)[None, :] + idx[:, None])


@pytest.mark.parametrize("sharing", SHARINGS)
def test_no_forkload_names_left_once_the_loader_and_batches_are_gone(sharing):
    before = forkload_names()
    loader = forkload.DataLoader(FnDataset(30, sample), batch_size=3, num_workers=2,
                                 sharing=sharing)
    it = iter(loader)
    held = [next(it) for _ in range(4)]   # a loader stopped mid-epoch
    end_iterator(it)
    del it
    held += list(loader)                  # and a whole epoch
    for b in held:
        check_batch(b, b["i"].tolist())
    del loader, held, b
    gc.collect()
    assert wait_until(lambda: forkload_names() <= before, 5), \
        sorted(forkload_names() - before)


HELD_SCRIPT = r'''
import gc, os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
limit = 1024 if hard == resource.RLIM_INFINITY else min(1024, hard)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
import forkload


class Small:
    def __len__(self):
        return 20000

    def __getitem__(self, i):
        return i


for sharing in ("fd", "file_system"):
    batches = list(forkload.DataLoader(Small(), batch_size=1, num_workers=2, sharing=sharing))
    assert len(batches) == 20000, len(batches)
    bad = [k for k, b in enumerate(batches) if int(b[0]) != k]
    assert not bad, bad[:10]
    fds = len(os.listdir("/proc/self/fd"))
    assert fds < 200, "%d descriptors open with 20000 batches held" % fds
    del batches
    gc.collect()
    for _ in range(500):
        left = [n for n in os.listdir("/dev/shm") if n.startswith("forkload.%d." % os.getpid())]
        if not left:
            break
        time.sleep(0.01)
    assert not left, left[:10]
    print(sharing, "ok", fds, flush=True)
'''


def test_many_held_batches_need_no_descriptor_each(tmp_path):
    """20,000 batches held at once under a limit of 1024 descriptors (torch's
    file_descriptor strategy keeps one per held storage and fails here)."""
    script = tmp_path / "held.py"
    script.write_text(HELD_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fd ok" in proc.stdout and "file_system ok" in proc.stdout, proc.stdout


class DyingAfterwards(tud.Dataset):
    """Sample 9 kills its worker; the others are tensors."""

    def __init__(self):
        self.main_pid = os.getpid()

    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 9 and os.getpid() != self.main_pid:
            os.kill(os.getpid(), 9)
        return torch.full((8,), float(i))


def test_batches_of_a_worker_that_died_stay_readable():
    loader = forkload.DataLoader(DyingAfterwards(), batch_size=1, num_workers=2)
    it = iter(loader)
    held = []
    with pytest.raises(Exception) as e:
        while True:
            held.append(next(it))
    assert not isinstance(e.value, StopIteration)
    end_iterator(it)
    del it
    gc.collect()
    for k, b in enumerate(held):
        assert torch.equal(b, torch.full((1, 8), float(k)))
