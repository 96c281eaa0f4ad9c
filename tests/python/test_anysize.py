"""Batches of any size (issue 33): what torch's DataLoader carries,
forkload's carries, with no sample_bytes to guess.  A batch larger than the
room measured from the first sample moves to a larger segment in its worker
(libforkload's fl_worker_grow), under both sharing strategies, with workers
and without; each case is compared batch for batch with torch's DataLoader.
A batch that cannot fit anywhere (RLIMIT_FSIZE, a small private /dev/shm)
is an error at its position that names its size and the limit, and the
next batch comes."""

import os
import subprocess
import sys
import textwrap

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

from loader_helpers import (  # noqa: E402
    TORCH_IN_PROCESS, assert_runs_same, run_both, subprocess_env)

SHARINGS = [("fd", 0), ("fd", 2), ("file_system", 2)]


def pad(samples):
    """A collate_fn that pads to the batch's longest sequence, as Hugging
    Face's DataCollatorWithPadding does: ids and an attention mask."""
    n = max(len(s) for s in samples)
    ids = torch.zeros(len(samples), n, dtype=torch.int64)
    mask = torch.zeros(len(samples), n, dtype=torch.int64)
    for k, s in enumerate(samples):
        ids[k, :len(s)] = s
        mask[k, :len(s)] = 1
    return {"input_ids": ids, "attention_mask": mask}


class Lengths(tud.Dataset):
    """Sample i: the token ids of a sequence of length lengths[i]."""

    def __init__(self, lengths):
        self.lengths = lengths

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        return torch.arange(self.lengths[i], dtype=torch.int64) * 7 + i


def shuffled_lengths(n, most, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(1, most + 1, (n,), generator=g)).tolist()


@pytest.mark.parametrize("sharing,num_workers", SHARINGS)
def test_growing_samples_padded_per_batch(sharing, num_workers):
    ds = Lengths([1 + 40 * i for i in range(48)])
    kw = dict(batch_size=4, collate_fn=pad, num_workers=num_workers)
    fl, th = run_both(ds, fl_kwargs={"sharing": sharing},
                      torch_kwargs=TORCH_IN_PROCESS, **kw)
    assert_runs_same(fl, th)
    assert fl.epochs[0][-1]["input_ids"].shape == (4, 1 + 40 * 47)


@pytest.mark.parametrize("sharing,num_workers", SHARINGS)
def test_shuffled_dynamic_padding_lengths_1_to_3000(sharing, num_workers):
    ds = Lengths(shuffled_lengths(300, 3000))
    kw = dict(batch_size=8, shuffle=True, collate_fn=pad,
              num_workers=num_workers)
    fl, th = run_both(ds, epochs=2, fl_kwargs={"sharing": sharing},
                      torch_kwargs=TORCH_IN_PROCESS, **kw)
    assert_runs_same(fl, th)


@pytest.mark.parametrize("sharing,num_workers", SHARINGS)
def test_one_batch_200_times_the_first(sharing, num_workers):
    lengths = [64] * 40
    lengths[21] = 64 * 200
    ds = Lengths(lengths)
    kw = dict(batch_size=4, collate_fn=pad, num_workers=num_workers)
    fl, th = run_both(ds, epochs=2, fl_kwargs={"sharing": sharing},
                      torch_kwargs=TORCH_IN_PROCESS, **kw)
    assert_runs_same(fl, th)
    assert fl.epochs[0][5]["input_ids"].shape == (4, 64 * 200)


def test_default_collate_of_growing_arrays():
    """default_collate's own stacking: each batch's samples alike, the
    batches growing."""
    ds = Lengths([8 * (i // 4 + 1) for i in range(40)])
    fl, th = run_both(ds, batch_size=4, num_workers=2,
                      torch_kwargs=TORCH_IN_PROCESS)
    assert_runs_same(fl, th)


class Growing(tud.IterableDataset):
    """A stream whose sequences grow: value v is v * 29 + 1 tokens long,
    sharded across torch's workers by v % num_workers."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = tud.get_worker_info()
        wid, nw = (0, 1) if info is None else (info.id, info.num_workers)
        for v in range(wid, self.n, nw):
            yield torch.arange(v * 29 + 1, dtype=torch.int64) + v


@pytest.mark.parametrize("sharing,num_workers", SHARINGS)
def test_a_growing_iterable_stream(sharing, num_workers):
    ds = Growing(90)
    fl, th = run_both(ds, batch_size=3, collate_fn=pad,
                      num_workers=num_workers, fl_kwargs={"sharing": sharing})
    assert_runs_same(fl, th)


@pytest.mark.parametrize("sharing,num_workers", SHARINGS)
def test_the_hint_still_serves(sharing, num_workers):
    """sample_bytes, given, sizes the first segments: too small a hint
    grows as none does, and the batches are torch's."""
    ds = Lengths(shuffled_lengths(64, 2000))
    fl, th = run_both(ds, batch_size=4, collate_fn=pad,
                      num_workers=num_workers,
                      fl_kwargs={"sharing": sharing, "sample_bytes": 64},
                      torch_kwargs=TORCH_IN_PROCESS)
    assert_runs_same(fl, th)


# A batch that cannot fit: run in a child, whose limits are its own.
CANNOT_FIT = textwrap.dedent("""
    import resource, sys
    import torch, torch.utils.data as tud
    import forkload
    from loader_helpers import outcomes
    from test_anysize import Lengths, pad

    sharing, limit = sys.argv[1], int(sys.argv[2])
    if limit:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    lengths = [64] * 24
    lengths[9] = 1 << 20          # batch 2: 4 x 1M int64 ids and mask: 64 MB
    dl = forkload.DataLoader(Lengths(lengths), batch_size=4, collate_fn=pad,
                             num_workers=2, sharing=sharing)
    for o in outcomes(dl):
        if o[0] == "batch":
            print("batch", tuple(o[1]["input_ids"].shape))
        else:
            print("error", o[1].__name__, o[2].replace("\\n", " "))
""")


def run_child(args, prefix=()):
    r = subprocess.run(list(prefix) + [sys.executable, "-c", CANNOT_FIT] +
                       [str(a) for a in args], env=subprocess_env(),
                       capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.abspath(__file__)))
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def check_cannot_fit(lines, limit_words):
    assert len(lines) == 6, lines
    for i, line in enumerate(lines):
        if i != 2:
            assert line == "batch (4, 64)", lines
    assert lines[2].startswith("error RuntimeError"), lines
    assert "needs a segment of" in lines[2], lines[2]
    for w in limit_words:
        assert w in lines[2], lines[2]


@pytest.mark.parametrize("sharing", ["fd", "file_system"])
def test_a_batch_past_rlimit_fsize_is_an_error_at_its_position(sharing):
    check_cannot_fit(run_child([sharing, 16 << 20]), ["RLIMIT_FSIZE"])


def test_a_batch_past_a_small_dev_shm_is_an_error_at_its_position():
    if os.geteuid() != 0 or subprocess.run(
            ["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare -m for a private /dev/shm")
    script = ("mount -t tmpfs -o size=16m forkload-test /dev/shm && "
              'exec "$@"')
    lines = run_child(["file_system", 0],
                      prefix=["unshare", "-m", "sh", "-c", script, "sh"])
    check_cannot_fit(lines, ["/dev/shm"])
