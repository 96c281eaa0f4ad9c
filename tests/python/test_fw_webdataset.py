"""The `webdataset` library's WebDataset pipeline (pip install webdataset),
an IterableDataset that splits its shards over the workers itself, through
forkload.DataLoader beside torch.utils.data.DataLoader.

webdataset asks torch.utils.data.get_worker_info() which worker it runs in
(webdataset.utils.pytorch_worker_info): in forkload's workers it must get
forkload's id and number of workers, so that each shard is read by one
worker exactly, and the samples, batched in each worker and interleaved as
torch interleaves them, must be torch's. Not forkload.datasets.WebDataset,
libforkload's reader in C (tests/python/test_datasets.py).
"""

import io
import json
import random
import tarfile

import pytest
torch = pytest.importorskip("torch")

wds = pytest.importorskip("webdataset", reason="the webdataset library is "
                          "not installed: pip install webdataset")

from loader_helpers import assert_runs_same, run_both  # noqa: E402

SHARDS, PER_SHARD = 5, 7


def add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """5 tar shards of 7 samples: key s<shard>_<i>, .cls its number, .json
    a small record."""
    root = tmp_path_factory.mktemp("wds")
    for s in range(SHARDS):
        with tarfile.open(root / f"shard-{s:02d}.tar", "w") as tar:
            for i in range(PER_SHARD):
                n = s * PER_SHARD + i
                add(tar, f"s{s}_{i:02d}.cls", str(n).encode())
                add(tar, f"s{s}_{i:02d}.json", json.dumps(
                    {"n": n, "x": [n, n / 2.0]}).encode())
    return str(root / ("shard-{00..%02d}.tar" % (SHARDS - 1)))


def to_sample(sample):
    rec = sample["json"]
    return torch.tensor(rec["x"]), sample["cls"], sample["__key__"]


def jitter(sample):
    """A draw from the worker's own `random`, which the loader seeds."""
    x, n, key = sample
    return x + random.random(), n, key


def pipeline(url, shuffle=0):
    ds = wds.WebDataset(url, shardshuffle=False, empty_check=False)
    if shuffle:
        # Without a seed, webdataset seeds its buffer's Random from the pid
        # and the time: with one, the same in any loader.
        ds = ds.shuffle(shuffle, seed=shuffle)
    return ds.decode().map(to_sample)


def numbers(run):
    return [int(n) for batch in run.epochs[0] for n in batch[1]]


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_webdataset_samples_are_torchs(shards, num_workers):
    fl, th = run_both(pipeline(shards), batch_size=4,
                      num_workers=num_workers)
    assert_runs_same(fl, th)
    # Every sample once: each shard read by one worker.
    assert sorted(numbers(fl)) == list(range(SHARDS * PER_SHARD))


def test_webdataset_splits_shards_by_forkloads_workers(shards):
    fl, _ = run_both(pipeline(shards), batch_size=None, num_workers=2,
                     torch_kwargs={"num_workers": 0})
    keys = [sample[2] for sample in fl.epochs[0]]
    # Worker w reads shards w, w + 2, ...; the two interleave sample by
    # sample, as torch's workers do.
    assert keys[:4] == ["s0_00", "s1_00", "s0_01", "s1_01"]
    assert sorted(int(k[1]) for k in keys) == sorted(
        s for s in range(SHARDS) for _ in range(PER_SHARD))


def test_webdataset_shuffled_and_jittered_as_in_torchs_workers(shards):
    fl, th = run_both(pipeline(shards, shuffle=6).map(jitter), batch_size=3,
                      num_workers=2, epochs=2)
    assert_runs_same(fl, th)
    assert sorted(numbers(fl)) == list(range(SHARDS * PER_SHARD))
