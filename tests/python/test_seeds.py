"""Random draws: the workers seeded as PyTorch seeds its own (random, torch,
numpy.random from the base seed and the worker id), worker_init_fn and
get_worker_info as torch's, and the consumer's global generator left as
torch's loader leaves it."""

import random

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    FnDataset, IndexDataset, assert_runs_same, assert_same, fresh, run_both,
    run_epochs, seed_all)

N = 14
BS = 3


class DrawDataset(tud.Dataset):
    """Each sample draws from random, torch and numpy.random and says which
    worker drew it, with which seed."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        info = tud.get_worker_info()
        return {
            "i": i,
            "py": random.random(),
            "torch": torch.rand(2),
            "torch_int": torch.randint(0, 1 << 30, (1,)),
            "np": np.random.rand(2),
            "np_int": int(np.random.randint(0, 1 << 30)),
            "wid": -1 if info is None else info.id,
            "num_workers": -1 if info is None else info.num_workers,
            # Seeds may not fit an int64 tensor: strings, collated as lists.
            "wseed": "" if info is None else str(info.seed),
            "initial_seed": str(torch.initial_seed()),
        }


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_worker_draws_match_torch(num_workers, shuffle):
    fl, th = run_both(DrawDataset(), seed=21, batch_size=BS, shuffle=shuffle,
                      num_workers=num_workers)
    assert_runs_same(fl, th)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_persistent_workers_keep_their_streams_across_epochs(num_workers):
    fl, th = run_both(DrawDataset(), seed=22, epochs=3, batch_size=BS,
                      shuffle=True, num_workers=num_workers,
                      persistent_workers=True)
    assert_runs_same(fl, th)
    # Not reseeded between epochs: the draws of epoch 2 are new ones.
    assert not torch.equal(fl.epochs[0][0]["torch"], fl.epochs[1][0]["torch"])


def test_persistent_workers_are_not_reseeded_after_an_epoch_cut_short():
    """As torch's _reset: a new iter() mid-epoch keeps the persistent
    workers and their random streams; reseeded, the next epoch's first
    batch would draw what the cut epoch's first batch drew."""
    seed_all(24)
    loader = forkload.DataLoader(DrawDataset(), batch_size=BS, num_workers=2,
                                 persistent_workers=True)
    it = iter(loader)
    first = next(it)
    second = next(iter(loader))
    assert not torch.equal(first["torch"], second["torch"])
    del it, loader


@pytest.mark.parametrize("num_workers", [2, 3])
def test_worker_seed_is_base_seed_plus_worker_id(num_workers):
    fl = run_epochs(forkload.DataLoader, DrawDataset(), seed=23, batch_size=1,
                    num_workers=num_workers)
    seeds = {}
    for b in fl.epochs[0]:
        w = int(b["wid"])
        assert b["wseed"][0] == b["initial_seed"][0]  # torch.initial_seed() is it
        seeds.setdefault(w, int(b["wseed"][0]))
        assert seeds[w] == int(b["wseed"][0])
        assert int(b["num_workers"]) == num_workers
    assert sorted(seeds) == list(range(num_workers))
    assert all(seeds[w] - seeds[0] == w for w in seeds)


_init_record = None


def recording_init_fn(worker_id):
    global _init_record
    info = tud.get_worker_info()
    _init_record = {
        "arg": worker_id,
        "id": info.id,
        "num_workers": info.num_workers,
        "seed": str(info.seed),
        "initial_seed": str(torch.initial_seed()),
        # Draws here move the streams the dataset draws from next.
        "py": random.random(),
        "torch": torch.rand(1),
        "np": np.random.rand(1),
    }


class InitRecordDataset(tud.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return {"init": _init_record, "i": i, "after_init": torch.rand(1),
                "np_after_init": np.random.rand(1)}


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_worker_init_fn_sees_the_same_ids_and_seeds_as_torch(num_workers):
    fl, th = run_both(InitRecordDataset(), seed=24, batch_size=2,
                      num_workers=num_workers, worker_init_fn=recording_init_fn)
    assert_runs_same(fl, th)
    ids = sorted({int(b["init"]["arg"][0]) for b in fl.epochs[0]})
    assert ids == list(range(num_workers))
    for b in fl.epochs[0]:
        assert b["init"]["arg"].tolist() == b["init"]["id"].tolist()


def reseeding_init_fn(worker_id):
    torch.manual_seed(12345)


class InitialSeedDataset(tud.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.initial_seed()


def test_worker_init_fn_runs_after_the_workers_are_seeded():
    fl, th = run_both(InitialSeedDataset(), seed=25, batch_size=2, num_workers=2,
                      worker_init_fn=reseeding_init_fn)
    assert_runs_same(fl, th)
    assert all(b.tolist() == [12345, 12345] for b in fl.epochs[0])


_init_calls = 0


def counting_init_fn(worker_id):
    global _init_calls
    _init_calls += 1


class InitCountDataset(tud.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return _init_calls


def test_worker_init_fn_runs_once_per_worker_with_persistent_workers():
    fl, th = run_both(InitCountDataset(), seed=26, epochs=3, batch_size=2,
                      num_workers=2, persistent_workers=True,
                      worker_init_fn=counting_init_fn)
    assert_runs_same(fl, th)
    assert all(b.tolist() == [1, 1] for e in fl.epochs for b in e)


def test_get_worker_info_is_none_in_the_main_process():
    assert forkload.get_worker_info() is None
    loader = forkload.DataLoader(IndexDataset(8), batch_size=2, num_workers=2)
    for _ in loader:
        assert forkload.get_worker_info() is None
        assert tud.get_worker_info() is None
    assert forkload.get_worker_info() is None
    for _ in forkload.DataLoader(IndexDataset(4), batch_size=2, num_workers=0):
        assert forkload.get_worker_info() is None


class WorkerInfoDataset(tud.Dataset):
    def __len__(self):
        return 9

    def __getitem__(self, i):
        fl = forkload.get_worker_info()
        th = tud.get_worker_info()
        return {
            "fl": (fl.id, fl.num_workers, str(fl.seed)),
            "torch": (th.id, th.num_workers, str(th.seed)),
            "fl_dataset_is_self": fl.dataset is self,
            "torch_dataset_is_self": th.dataset is self,
            "initial_seed": str(torch.initial_seed()),
        }


@pytest.mark.parametrize("num_workers", [1, 3])
def test_torch_get_worker_info_works_in_forkload_workers(num_workers):
    fl = run_epochs(forkload.DataLoader, WorkerInfoDataset(), seed=27,
                    batch_size=1, num_workers=num_workers)
    for i, b in enumerate(fl.epochs[0]):
        assert_same(b["fl"], b["torch"], "worker info of batch %d" % i)
        wid, nw, seed = b["fl"]
        assert wid.tolist() == [i % num_workers]
        assert nw.tolist() == [num_workers]
        # (strings inside a tuple are collated into a tuple: zip's)
        assert list(seed) == list(b["initial_seed"])
        assert b["fl_dataset_is_self"].tolist() == [True]
        assert b["torch_dataset_is_self"].tolist() == [True]


class WorkerInfoLooks(tud.Dataset):
    """What a worker's get_worker_info() is: its type, repr and fields,
    and what assigning to it raises, as text."""

    def __len__(self):
        return 4

    def __repr__(self):
        return "WorkerInfoLooks()"

    def __getitem__(self, i):
        info = tud.get_worker_info()
        try:
            info.id = 7
            refused = "nothing"
        except Exception as e:  # noqa: BLE001
            refused = "%s: %s" % (type(e).__name__, e)
        return ("%s.%s" % (type(info).__module__, type(info).__qualname__),
                repr(info), refused)


def test_worker_info_is_the_installed_torchs():
    """torch 1.13's WorkerInfo raises RuntimeError on assignment and shows
    id, num_workers, seed and dataset; torch 2's is a frozen dataclass with
    rng and worker_method as well: a worker's is the installed torch's."""
    fl = run_epochs(forkload.DataLoader, WorkerInfoLooks(), seed=5,
                    batch_size=None, num_workers=2)
    th = run_epochs(tud.DataLoader, WorkerInfoLooks(), seed=5,
                    batch_size=None, num_workers=2)
    assert_runs_same(fl, th)
    same = run_epochs(forkload.DataLoader, FnDataset(
        4, lambda i: forkload.get_worker_info() is tud.get_worker_info()),
        batch_size=None, num_workers=2)
    assert same.epochs == [[True] * 4]


def thread_name(i):
    with open("/proc/thread-self/comm") as f:
        return f.read().strip()


def test_worker_thread_name_is_the_installed_torchs():
    """torch 2 names its workers' thread pt_data_worker; torch 1.13 leaves
    the name a fork inherits."""
    fl = run_epochs(forkload.DataLoader, FnDataset(4, thread_name),
                    batch_size=None, num_workers=2)
    th = run_epochs(tud.DataLoader, FnDataset(4, thread_name),
                    batch_size=None, num_workers=2)
    assert_runs_same(fl, th)


def gen(seed):
    return fresh(lambda: torch.Generator().manual_seed(seed))


RNG_CASES = {
    "sequential_0": dict(num_workers=0),
    "sequential_2": dict(num_workers=2),
    "shuffle_0": dict(num_workers=0, shuffle=True),
    "shuffle_2": dict(num_workers=2, shuffle=True),
    "shuffle_generator_2": dict(num_workers=2, shuffle=True, generator=gen(3)),
    "persistent_2": dict(num_workers=2, shuffle=True, persistent_workers=True),
}


@pytest.mark.parametrize("case", sorted(RNG_CASES))
def test_global_rng_after_iter_and_first_batch_matches_torch(case):
    """The draws happen at the same points: the base seed at iter(), the
    sampler's seed at its first next() (at iter() too with workers, which
    prefetch)."""
    states = {}
    for cls in (forkload.DataLoader, tud.DataLoader):
        kw = {k: (v.make() if isinstance(v, fresh) else v) for k, v in RNG_CASES[case].items()}
        seed_all(28)
        loader = cls(IndexDataset(N), batch_size=BS, **kw)
        seen = []
        it = iter(loader)
        seen.append(torch.get_rng_state())
        first = next(it)
        seen.append(torch.get_rng_state())
        rest = list(it)
        seen.append(torch.get_rng_state())
        del it
        it = iter(loader)  # a second epoch
        seen.append(torch.get_rng_state())
        rest2 = list(it)
        seen.append(torch.get_rng_state())
        states[cls] = (seen, [first] + rest, rest2)
        del it, loader
    (a, ab, ab2), (b, bb, bb2) = states[forkload.DataLoader], states[tud.DataLoader]
    for k, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), "global generator differs at step %d" % k
    assert_same(ab, bb)
    assert_same(ab2, bb2)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_global_rng_after_an_early_break_matches_torch(num_workers):
    fl, th = run_both(IndexDataset(N), seed=29, takes=[1, 2], batch_size=BS,
                      shuffle=True, num_workers=num_workers)
    assert_runs_same(fl, th)


class ParallelDataset(tud.Dataset):
    """Each sample is a parallel reduction: torch's OpenMP threads at work."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return (torch.ones(1 << 20) * i).sum()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_dataset_using_torch_threads_loads_after_the_consumer_used_them(
        num_workers):
    # The consumer's OpenMP threads are not in a forked child; a worker
    # that entered a parallel region on the consumer's thread count waited
    # for them forever.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert (torch.ones(1 << 22) * 2).sum().item() == 2 << 22
        batches = list(forkload.DataLoader(ParallelDataset(), batch_size=2,
                                           num_workers=num_workers, timeout=60
                                           if num_workers else 0))
    finally:
        torch.set_num_threads(threads)
    assert [b.tolist() for b in batches] == [[0.0, 1 << 20], [2 << 20, 3 << 20]]
