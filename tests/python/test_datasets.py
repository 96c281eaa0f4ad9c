"""forkload.datasets: the C library's built-in datasets as the dataset of
forkload.DataLoader, compared with what torchvision, numpy, lmdb and tarfile
make of the same files.

Every fixture is written here, small, in tmp_path: images with PIL (their
sides under twice the output's, where forkload's crop is torchvision's to
the byte: see tests/image_test.c), token shards, LMDB environments, tar
shards and .npy files with numpy, lmdb and tarfile.
"""

import gzip
import io
import os
import sys
import tarfile

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from forkload import datasets as fds  # noqa: E402

from loader_helpers import children, seed_all  # noqa: E402

Image = pytest.importorskip("PIL.Image")

# torchvision is the reference of the image tests only: where it cannot be
# imported (not installed, or a wheel built for another torch, which fails
# with more than ImportError), those skip saying why and the rest run.
try:
    import torchvision.datasets as tv_datasets
    import torchvision.transforms as T
    NO_TORCHVISION = None
except Exception as e:  # noqa: BLE001
    T = tv_datasets = None
    NO_TORCHVISION = "needs torchvision, which cannot be imported here (%s: %s)" % (
        type(e).__name__, str(e).splitlines()[-1] if str(e) else "")
needs_torchvision = pytest.mark.skipif(NO_TORCHVISION is not None,
                                       reason=NO_TORCHVISION or "")

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------

def picture(rng, h, w):
    """A smooth gradient with noise: an image a JPEG keeps close."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                     (x + y) * 255 // max(h + w - 2, 1)], axis=-1)
    noise = rng.integers(-12, 13, size=(h, w, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def write_tree(root, classes=("cat", "dog", "eel"), per_class=5, seed=0):
    """ROOT/CLASS/IMAGE, JPEGs and PNGs of 36 to 52 x 34 to 46 pixels, a
    nested folder, and a file torchvision skips."""
    rng = np.random.default_rng(seed)
    for c in classes:
        os.makedirs(os.path.join(root, c, "sub"))
        for i in range(per_class):
            h, w = 34 + 3 * i, 36 + 4 * i
            img = Image.fromarray(picture(rng, h, w))
            sub = "sub" if i == per_class - 1 else ""
            if i % 2:
                img.save(os.path.join(root, c, sub, "%02d.png" % i))
            else:
                img.save(os.path.join(root, c, sub, "%02d.jpg" % i),
                         quality=90)
        with open(os.path.join(root, c, "notes.txt"), "w") as f:
            f.write("not an image\n")
    return root


@pytest.fixture
def image_root(tmp_path):
    return write_tree(str(tmp_path / "images"))


def jpeg_bytes(rng, h, w):
    out = io.BytesIO()
    Image.fromarray(picture(rng, h, w)).save(out, format="JPEG", quality=90)
    return out.getvalue()


def tv_transform(size, resize=None, as_float=False):
    """torchvision's evaluation transform, as forkload's crop='center'
    makes it: uint8 H x W x 3, or ToTensor + Normalize."""
    h, w = (size, size) if isinstance(size, int) else size
    steps = [T.Resize(resize or h), T.CenterCrop((h, w))]
    if as_float:
        steps += [T.ToTensor(), T.Normalize(MEAN, STD)]
    else:
        steps += [T.PILToTensor(), T.Lambda(lambda x: x.permute(1, 2, 0))]
    return T.Compose(steps)


def all_batches(loader):
    return [b for b in loader]


def stacked(batches, field):
    return torch.cat([b[field] for b in batches])


class Indices(tud.Dataset):
    """Sample i is i: the order a sampler gives, through torch's loader."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


def torch_order(n, **kwargs):
    """The batches of indices torch's DataLoader hands out for a dataset
    of n samples, after torch.manual_seed(0)."""
    seed_all(0)
    return [b.tolist() for b in tud.DataLoader(Indices(n), **kwargs)]


# --------------------------------------------------------------------------
# ImageFolder
# --------------------------------------------------------------------------

@needs_torchvision
def test_image_folder_has_torchvisions_attributes(image_root):
    ours = fds.ImageFolder(image_root, 32)
    theirs = tv_datasets.ImageFolder(image_root)
    assert ours.classes == theirs.classes
    assert ours.class_to_idx == theirs.class_to_idx
    assert ours.samples == theirs.samples
    assert ours.imgs == theirs.imgs
    assert ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 15
    assert ours.root == theirs.root
    assert "Number of datapoints: 15" in repr(ours)


@needs_torchvision
@pytest.mark.parametrize("size,resize", [(32, None), ((24, 32), 36)])
def test_center_crop_batches_are_torchvisions(image_root, size, resize):
    ours = fds.ImageFolder(image_root, size, resize=resize)
    theirs = tv_datasets.ImageFolder(image_root,
                                     transform=tv_transform(size, resize))
    got = all_batches(forkload.DataLoader(ours, batch_size=4, num_workers=2))
    want = all_batches(tud.DataLoader(theirs, batch_size=4))
    assert len(got) == len(want) == 4
    for (x, y), (wx, wy) in zip(got, want):
        h, w = (size, size) if isinstance(size, int) else size
        assert x.dtype == torch.uint8 and x.shape == (len(wy), h, w, 3)
        assert y.dtype == torch.int64
        assert torch.equal(x, wx)
        assert torch.equal(y, wy)


@needs_torchvision
def test_float_batches_are_to_tensor_and_normalize(image_root):
    ours = fds.ImageFolder(image_root, 28, float=True)
    theirs = tv_datasets.ImageFolder(image_root,
                                     transform=tv_transform(28, None, True))
    got = all_batches(forkload.DataLoader(ours, batch_size=8, num_workers=1))
    want = all_batches(tud.DataLoader(theirs, batch_size=8))
    for (x, y), (wx, wy) in zip(got, want):
        assert x.dtype == torch.float32 and x.shape == wx.shape
        assert torch.allclose(x, wx, rtol=0, atol=1e-6)
        assert torch.equal(y, wy)


@needs_torchvision
def test_getitem_is_one_sample_made_in_this_process(image_root):
    ours = fds.ImageFolder(image_root, 32)
    theirs = tv_datasets.ImageFolder(image_root, transform=tv_transform(32))
    for i in (0, 7, -1):
        x, y = ours[i]
        wx, wy = theirs[i]
        assert isinstance(y, int) and y == wy
        assert torch.equal(x, wx)
    with pytest.raises(IndexError):
        ours[len(ours)]
    assert not children()


def test_numpy_batches_and_unbatched_samples(image_root):
    ds = fds.ImageFolder(image_root, 32)
    first = next(iter(forkload.DataLoader(ds, batch_size=3)))
    arrays = next(iter(forkload.DataLoader(ds, batch_size=3,
                                           tensor_type="numpy")))
    assert isinstance(arrays[0], np.ndarray) and arrays[0].dtype == np.uint8
    assert np.array_equal(arrays[0], first[0].numpy())
    assert arrays[1].dtype == np.int64
    one = next(iter(forkload.DataLoader(ds, batch_size=None)))
    assert one[0].shape == (32, 32, 3) and one[1].shape == ()
    assert torch.equal(one[0], first[0][0])


# --------------------------------------------------------------------------
# Orders, seeds and resume: forkload.DataLoader's, unchanged
# --------------------------------------------------------------------------

def images_by_index(ds):
    """Every image of ds, in index order, made without workers."""
    batches = all_batches(forkload.DataLoader(ds, batch_size=len(ds)))
    return batches[0][0].clone()


def test_shuffle_order_is_the_samplers(image_root):
    ds = fds.ImageFolder(image_root, 16)
    every = images_by_index(ds)
    labels = torch.tensor(ds.targets)
    for kwargs in (dict(shuffle=True, batch_size=4),
                   dict(shuffle=True, batch_size=4, drop_last=True)):
        want = torch_order(len(ds), **kwargs)
        seed_all(0)
        loader = forkload.DataLoader(ds, num_workers=2, **kwargs)
        got = all_batches(loader)
        assert len(got) == len(want)
        for (x, y), idx in zip(got, want):
            assert torch.equal(x, every[idx])
            assert torch.equal(y, labels[idx])


def test_distributed_and_custom_samplers_give_their_order(image_root):
    ds = fds.ImageFolder(image_root, 16)
    every = images_by_index(ds)
    cases = [
        lambda: dict(sampler=tud.DistributedSampler(
            ds, num_replicas=2, rank=1, shuffle=True, seed=5)),
        lambda: dict(sampler=tud.DistributedSampler(
            ds, num_replicas=3, rank=0, shuffle=False, drop_last=True)),
        lambda: dict(sampler=list(reversed(range(len(ds))))),
        lambda: dict(sampler=tud.RandomSampler(ds, replacement=True,
                                               num_samples=9)),
    ]
    for make in cases:
        kw = make()
        sampler = kw["sampler"]
        seed_all(0)
        want = [b.tolist() for b in tud.DataLoader(
            Indices(len(ds)), batch_size=4,
            sampler=(tud.DistributedSampler(
                Indices(len(ds)), num_replicas=sampler.num_replicas,
                rank=sampler.rank, shuffle=sampler.shuffle,
                seed=sampler.seed, drop_last=sampler.drop_last)
                if isinstance(sampler, tud.DistributedSampler)
                else sampler))]
        seed_all(0)
        got = all_batches(forkload.DataLoader(ds, batch_size=4,
                                              num_workers=2, **kw))
        assert [len(b[1]) for b in got] == [len(i) for i in want]
        for (x, _), idx in zip(got, want):
            assert torch.equal(x, every[idx])


def test_uneven_batches_of_a_batch_sampler_are_refused(image_root):
    ds = fds.ImageFolder(image_root, 16)
    loader = forkload.DataLoader(ds, batch_sampler=[[0, 1], [2], [3, 4]])
    with pytest.raises(ValueError, match="batch 1 of the sampler has 1"):
        next(iter(loader))
    ok = all_batches(forkload.DataLoader(ds, batch_sampler=[[0, 1], [3]]))
    assert [b[1].tolist() for b in ok] == [[0, 0], [0]]


def random_crops(root, seed, epochs=2, num_workers=2, persistent=False):
    ds = fds.ImageFolder(root, 16, crop="random", hflip=0.5)
    seed_all(seed)
    loader = forkload.DataLoader(ds, batch_size=5, num_workers=num_workers,
                                 persistent_workers=persistent)
    return [torch.cat([x for x, _ in loader]) for _ in range(epochs)]


def test_random_crops_follow_the_loaders_seed(image_root):
    a = random_crops(image_root, 0)
    b = random_crops(image_root, 0, num_workers=0)
    c = random_crops(image_root, 1)
    p = random_crops(image_root, 0, epochs=3, persistent=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert not torch.equal(a[0], a[1])  # new crops each epoch
    assert not torch.equal(p[1], p[2])  # persistent workers too


def test_resume_gives_the_remaining_batches(image_root):
    def make():
        ds = fds.ImageFolder(image_root, 16, crop="random", hflip=0.5)
        return forkload.DataLoader(ds, batch_size=3, shuffle=True,
                                   num_workers=2)

    seed_all(0)
    whole = [(x.clone(), y.clone()) for x, y in make()]
    seed_all(0)
    first = make()
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    del it, head, first
    seed_all(99)  # the state, not the generator, says what comes next
    resumed = make()
    resumed.load_state_dict(state)
    rest = all_batches(resumed)
    assert len(rest) == len(whole) - 2
    for (x, y), (wx, wy) in zip(rest, whole[2:]):
        assert torch.equal(x, wx) and torch.equal(y, wy)


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

def test_a_bad_image_fails_its_batch_naming_the_file(image_root):
    bad = os.path.join(image_root, "dog", "00.jpg")
    with open(bad, "rb") as f:
        head = f.read(200)
    with open(bad, "wb") as f:
        f.write(head)  # truncated
    ds = fds.ImageFolder(image_root, 16)
    where = [p for p, _ in ds.samples].index(bad)
    it = iter(forkload.DataLoader(ds, batch_size=4, num_workers=2))
    got = []
    while True:
        try:
            got.append(("batch", next(it)))
        except StopIteration:
            break
        except forkload.Error as e:
            got.append(("error", str(e), e.name))
    assert [g[0] for g in got] == ["error" if i == where // 4 else "batch"
                                   for i in range(4)]
    _, message, name = got[where // 4]
    assert bad in message and name == "FL_EDATASET"


def test_bad_arguments_say_why(image_root, tmp_path):
    with pytest.raises(ValueError, match="height and width must be"):
        fds.ImageFolder(image_root, 0)
    with pytest.raises(ValueError, match="hflip is a probability"):
        fds.ImageFolder(image_root, 8, hflip=2)
    with pytest.raises(ValueError, match="crop should be"):
        fds.ImageFolder(image_root, 8, crop="middle")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no class folder"):
        fds.ImageFolder(str(tmp_path / "empty"), 8)
    with pytest.raises(ValueError, match="No such file"):
        fds.ImageFolder(str(tmp_path / "none"), 8)
    with pytest.raises(ValueError, match="collate_fn must be None"):
        forkload.DataLoader(fds.ImageFolder(image_root, 8), collate_fn=list)
    np.save(tmp_path / "u16.npy", np.zeros((4, 2), np.uint16))
    with pytest.raises(TypeError, match="cannot hold"):
        fds.NpyArray(tmp_path / "u16.npy")
    with pytest.raises(ValueError, match="header of an llm.c token shard"):
        fds.Tokens(tmp_path / "u16.npy", 4)
    with pytest.raises(ValueError, match="DataLoader with IterableDataset"):
        forkload.DataLoader(fds.WebDataset(["x.tar"], {"a": 1}),
                            shuffle=True)


# --------------------------------------------------------------------------
# No Python in the workers
# --------------------------------------------------------------------------

_watch = {"dir": None, "parent": None}


def _mark(event):
    d = _watch["dir"]
    if d is not None and os.getpid() != _watch["parent"]:
        try:
            os.close(os.open(os.path.join(d, "%d.%s" % (os.getpid(), event)),
                             os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError:
            pass


def _profile(frame, event, arg):
    _mark("profile")


os.register_at_fork(after_in_child=lambda: _mark("fork"))


def test_no_python_runs_in_the_workers(image_root, tmp_path):
    """A forked child that runs Python runs PyOS_AfterFork_Child (which
    calls the after_in_child hooks) and, from this thread's state, the
    profile function: either leaves a mark named by its pid.  A loader
    over a Python dataset, or over a built-in one with a worker_init_fn,
    leaves marks; one over a built-in dataset alone leaves none."""
    marks = tmp_path / "marks"
    ds = fds.ImageFolder(image_root, 16)

    def run(**kwargs):
        marks.mkdir()
        seen = set()
        _watch.update(dir=str(marks), parent=os.getpid())
        sys.setprofile(_profile)
        try:
            loader = forkload.DataLoader(kwargs.pop("dataset", ds),
                                         batch_size=3, num_workers=2,
                                         **kwargs)
            for _ in loader:
                seen.update(children())
        finally:
            sys.setprofile(None)
            _watch["dir"] = None
        del loader
        found = sorted(os.listdir(marks))
        for name in found:
            os.unlink(marks / name)
        marks.rmdir()
        return seen, found

    workers, found = run()
    assert len(workers) >= 2, "the batches came from 2 forked workers"
    assert found == []
    workers, found = run(worker_init_fn=lambda wid: None)
    assert {n.split(".")[1] for n in found} == {"fork", "profile"}
    assert {int(n.split(".")[0]) for n in found} <= workers
    _, found = run(dataset=Indices(12))
    assert found != []


# --------------------------------------------------------------------------
# Tokens, LMDB, WebDataset, NPY
# --------------------------------------------------------------------------

def write_shard(path, tokens):
    header = np.zeros(256, np.int32)
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, np.uint16).tobytes())


def test_tokens_are_the_shards_windows(tmp_path):
    rng = np.random.default_rng(3)
    seq = 8
    shards, windows = [], []
    for k, n in enumerate((61, 45)):
        toks = rng.integers(0, 50257, n)
        path = str(tmp_path / ("s%d.bin" % k))
        write_shard(path, toks)
        shards.append(path)
        windows += [toks[j * seq:j * seq + seq + 1]
                    for j in range((n - 1) // seq)]
    ds = fds.Tokens(shards, seq)
    assert len(ds) == len(windows)
    seed_all(0)
    got = all_batches(forkload.DataLoader(ds, batch_size=4, shuffle=True,
                                          num_workers=2))
    order = [i for b in torch_order(len(ds), batch_size=4, shuffle=True)
             for i in b]
    x = stacked(got, 0)
    y = stacked(got, 1)
    assert x.dtype == torch.int32 and x.shape == (len(ds), seq)
    want = np.stack([windows[i] for i in order]).astype(np.int32)
    assert np.array_equal(x.numpy(), want[:, :-1])
    assert np.array_equal(y.numpy(), want[:, 1:])
    inputs, targets = ds[2]
    assert np.array_equal(inputs.numpy(), windows[2][:-1])


def test_lmdb_values_are_lmdbs(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    rng = np.random.default_rng(4)
    path = str(tmp_path / "db")
    env = lmdb.open(path, map_size=1 << 22)
    with env.begin(write=True) as txn:
        for i in range(23):
            txn.put(b"k%03d" % (23 - i),
                    rng.bytes(int(rng.integers(1, 40))))
    env.close()
    env = lmdb.open(path, readonly=True, lock=False)
    with env.begin() as txn:
        values = [v for _, v in txn.cursor()]
    env.close()
    ds = fds.LMDB(path, 40)
    assert len(ds) == len(values)
    got = all_batches(forkload.DataLoader(ds, batch_size=5, num_workers=2))
    rows, sizes = stacked(got, 0), stacked(got, 1)
    assert rows.shape == (23, 40) and sizes.dtype == torch.int64
    for i, v in enumerate(values):
        assert sizes[i] == len(v)
        assert bytes(rows[i, :len(v)].numpy()) == v
        assert not rows[i, len(v):].any()
    assert ds[7] == values[7]
    small = fds.LMDB(path, 10)
    over = [i for i, v in enumerate(values) if len(v) > 10][0]
    with pytest.raises(forkload.Error, match="10"):
        small[over]


def write_tars(directory, nshards, per_shard, seed=5):
    """Tar shards of samples KEY.bin (random bytes) and KEY.cls; the
    samples in order, as (key, bin, cls)."""
    rng = np.random.default_rng(seed)
    shards, samples = [], []
    for s in range(nshards):
        path = os.path.join(directory, "shard-%d.tar" % s)
        with tarfile.open(path, "w") as tar:
            for i in range(per_shard):
                key = "s%d/%04d" % (s, i)
                members = {"bin": rng.bytes(int(rng.integers(1, 30))),
                           "cls": b"%d" % (i % 7)}
                for ext, data in members.items():
                    info = tarfile.TarInfo(key + "." + ext)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                samples.append((key.encode(), members["bin"],
                                members["cls"]))
        shards.append(path)
    return shards, samples


def wds_samples(batches):
    out = []
    for b in batches:
        key, data, cls, sizes = b
        for i in range(len(sizes)):
            n = sizes[i].tolist()
            out.append((bytes(key[i, :n[0]].numpy()),
                        bytes(data[i, :n[1]].numpy()),
                        bytes(cls[i, :n[2]].numpy())))
    return out


def test_webdataset_samples_are_the_tars_members(tmp_path):
    shards, samples = write_tars(str(tmp_path), 3, 7)
    ds = fds.WebDataset(shards, [("__key__", 16), ("bin", 30), ("cls", 4)])
    inline = wds_samples(all_batches(forkload.DataLoader(ds, batch_size=4)))
    assert inline == samples
    two = wds_samples(all_batches(forkload.DataLoader(ds, batch_size=4,
                                                      num_workers=2)))
    assert sorted(two) == sorted(samples)
    key, data, cls, sizes = next(iter(ds))  # in this process
    assert sizes.shape == (3,) and bytes(data[:sizes[1]].numpy()) == \
        samples[0][1]


def test_webdataset_reads_pipe_commands_and_tar_gz(tmp_path):
    shards, samples = write_tars(str(tmp_path), 2, 5)
    with open(shards[1], "rb") as f, \
            gzip.open(shards[1] + ".gz", "wb") as g:
        g.write(f.read())
    ds = fds.WebDataset(["pipe:cat '%s'" % shards[0], shards[1] + ".gz"],
                        [("__key__", 16), ("bin", 30), ("cls", 4)])
    two = wds_samples(all_batches(forkload.DataLoader(ds, batch_size=3,
                                                      num_workers=2)))
    assert sorted(two) == sorted(samples)
    failing = fds.WebDataset(["pipe:exit 3"], [("bin", 30)])
    with pytest.raises(forkload.Error, match="pipe:exit 3: .*exit 3"):
        all_batches(forkload.DataLoader(failing, batch_size=3))


def test_npy_datasets_are_numpys(tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    rng = np.random.default_rng(6)
    files = [rng.standard_normal((3, 2)).astype(np.float32)
             for _ in range(9)]
    for i, a in enumerate(files):
        np.save(d / ("%03d.npy" % i), a)
    X = rng.standard_normal((11, 4)).astype(np.float64)
    y = rng.integers(0, 9, 11)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    raw = rng.integers(-300, 300, (10, 2, 3)).astype(np.int16)
    with open(tmp_path / "raw.bin", "wb") as f:
        f.write(b"H" * 16 + raw.tobytes())

    got = torch.cat(all_batches(forkload.DataLoader(
        fds.NpyDir(d), batch_size=4, num_workers=2)))
    assert np.array_equal(got.numpy(), np.stack(files))
    got = torch.cat(all_batches(forkload.DataLoader(
        fds.NpyArray(tmp_path / "X.npy"), batch_size=4)))
    assert got.dtype == torch.float64 and np.array_equal(got.numpy(), X)
    zipped = all_batches(forkload.DataLoader(
        fds.NpyZip([tmp_path / "X.npy", tmp_path / "y.npy"]), batch_size=4,
        num_workers=2))
    assert np.array_equal(stacked(zipped, 0).numpy(), X)
    assert np.array_equal(stacked(zipped, 1).numpy(), y)
    rec = fds.Raw(tmp_path / "raw.bin", 12, 16, dtype="int16",
                  shape=(2, 3))
    got = torch.cat(all_batches(forkload.DataLoader(rec, batch_size=3)))
    assert np.array_equal(got.numpy(), raw)
    assert np.array_equal(rec[4].numpy(), raw[4])


# --------------------------------------------------------------------------
# decode_images
# --------------------------------------------------------------------------

@needs_torchvision
def test_decode_images_over_an_lmdb_of_jpegs(tmp_path):
    lmdb = pytest.importorskip("lmdb")
    rng = np.random.default_rng(7)
    path = str(tmp_path / "jpegs")
    jpegs = [jpeg_bytes(rng, 34 + i, 40 + 2 * i) for i in range(10)]
    env = lmdb.open(path, map_size=1 << 22)
    with env.begin(write=True) as txn:
        for i, v in enumerate(jpegs):
            txn.put(b"%04d" % i, v)
    env.close()
    ds = fds.decode_images(fds.LMDB(path, 1 << 14), 0, 24)
    got = all_batches(forkload.DataLoader(ds, batch_size=4, num_workers=2))
    images = stacked(got, 0)
    tf = tv_transform(24)
    want = torch.stack([tf(Image.open(io.BytesIO(v)).convert("RGB"))
                        for v in jpegs])
    assert images.shape == (10, 24, 24, 3)
    assert torch.equal(images, want)
    assert len(ds) == 10 and torch.equal(ds[3][0], want[3])


@needs_torchvision
def test_decode_images_over_a_webdatasets_jpg_field(tmp_path):
    rng = np.random.default_rng(8)
    path = str(tmp_path / "imgs.tar")
    jpegs = [jpeg_bytes(rng, 30 + i, 36) for i in range(6)]
    with tarfile.open(path, "w") as tar:
        for i, v in enumerate(jpegs):
            for ext, data in (("jpg", v), ("cls", b"%d" % i)):
                info = tarfile.TarInfo("%03d.%s" % (i, ext))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    ds = fds.decode_images(fds.WebDataset(path, {"jpg": 1 << 14, "cls": 4}),
                           "jpg", 20, float=True)
    got = all_batches(forkload.DataLoader(ds, batch_size=4))
    tf = tv_transform(20, None, True)
    want = torch.stack([tf(Image.open(io.BytesIO(v)).convert("RGB"))
                        for v in jpegs])
    assert torch.allclose(stacked(got, 0), want, rtol=0, atol=1e-6)
    assert [bytes(c[:1].numpy()) for c in stacked(got, 1)] == \
        [b"%d" % i for i in range(6)]
