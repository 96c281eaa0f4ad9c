"""Which batches come out, in which order: forkload.DataLoader against
torch.utils.data.DataLoader built with the same arguments under the same
torch.manual_seed, batch for batch."""

import time

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    FnDataset, IndexDataset, assert_runs_same, assert_same, fresh, multiset,
    run_both, run_epochs, seed_all, draw_after)

# 20 samples in batches of 3: 7 batches, a number 2 and 3 workers do not divide.
N = 20
BS = 3


def gen(seed):
    return fresh(lambda: torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_sequential_batches_match_torch(index_dataset, num_workers):
    assert len(index_dataset) == N
    fl, th = run_both(index_dataset, batch_size=BS, num_workers=num_workers)
    assert_runs_same(fl, th)
    assert [b["i"].tolist() for b in fl.epochs[0]] == \
        [list(range(k, min(k + BS, N))) for k in range(0, N, BS)]


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_batch_i_comes_from_worker_i_mod_num_workers(num_workers):
    fl = run_epochs(forkload.DataLoader, IndexDataset(N), batch_size=BS,
                    num_workers=num_workers)
    for i, b in enumerate(fl.epochs[0]):
        assert b["w"].tolist() == [i % num_workers] * len(b["i"]), "batch %d" % i


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_shuffle_matches_torch(index_dataset, num_workers):
    fl, th = run_both(index_dataset, seed=3, batch_size=BS, shuffle=True,
                      num_workers=num_workers)
    assert_runs_same(fl, th)
    order = torch.cat([b["i"] for b in fl.epochs[0]]).tolist()
    assert sorted(order) == list(range(N)) and order != list(range(N))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_shuffle_with_generator_matches_torch_and_leaves_global_rng(num_workers):
    fl, th = run_both(IndexDataset(N), seed=4, batch_size=BS, shuffle=True,
                      num_workers=num_workers, generator=gen(1234))
    assert_runs_same(fl, th)
    # Every draw came from the loader's generator: the global ones are as seeded.
    seed_all(4)
    assert_same(fl.after, draw_after(), "generators after the run")


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_drop_last_matches_torch(shuffle, num_workers):
    fl, th = run_both(IndexDataset(N), seed=5, batch_size=BS, shuffle=shuffle,
                      drop_last=True, num_workers=num_workers)
    assert_runs_same(fl, th)
    assert len(fl.epochs[0]) == N // BS
    assert all(len(b["i"]) == BS for b in fl.epochs[0])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_several_epochs_match_torch(num_workers):
    fl, th = run_both(IndexDataset(N), seed=6, epochs=3, batch_size=BS,
                      shuffle=True, num_workers=num_workers)
    assert_runs_same(fl, th)
    orders = [torch.cat([b["i"] for b in e]).tolist() for e in fl.epochs]
    assert len({tuple(o) for o in orders}) == 3


@pytest.mark.parametrize("num_workers", [1, 2, 3])
def test_persistent_workers_later_epochs_match_torch(num_workers):
    fl, th = run_both(IndexDataset(N), seed=7, epochs=3, batch_size=BS,
                      shuffle=True, num_workers=num_workers,
                      persistent_workers=True)
    assert_runs_same(fl, th)
    for e in fl.epochs:
        for i, b in enumerate(e):
            assert b["w"].tolist() == [i % num_workers] * len(b["i"])


@pytest.mark.parametrize("persistent_workers", [False, True])
def test_epoch_after_a_partial_epoch_matches_torch(persistent_workers):
    # Breaking out of an epoch leaves prefetched batches behind; the next
    # epoch starts afresh all the same.
    fl, th = run_both(IndexDataset(N), seed=8, takes=[2, None, 1, None],
                      batch_size=BS, shuffle=True, num_workers=2,
                      persistent_workers=persistent_workers)
    assert_runs_same(fl, th)


@pytest.mark.parametrize("num_workers,shuffle", [(2, False), (3, True)])
def test_in_order_false_gives_the_same_multiset_of_batches(num_workers, shuffle):
    def sample(i):
        if i % 4 == 0:  # some batches come later than the ones after them
            time.sleep(0.02)
        return {"x": torch.tensor([i, 2 * i]), "i": i}

    ds = FnDataset(N, sample)
    fl, th = run_both(ds, seed=9, epochs=2, batch_size=2, shuffle=shuffle,
                      num_workers=num_workers, fl_kwargs={"in_order": False})
    for a, b in zip(fl.epochs, th.epochs):
        assert multiset(a) == multiset(b)
    assert_same(fl.after, th.after, "generators after the run")


@pytest.mark.parametrize("num_workers", [0, 2])
def test_bijection_order_is_a_permutation_other_than_torchs(num_workers):
    n = 64
    fl = run_epochs(forkload.DataLoader, IndexDataset(n, with_worker=False),
                    seed=10, epochs=2, batch_size=4, shuffle=True,
                    num_workers=num_workers, shuffle_algorithm="bijection")
    th = run_epochs(tud.DataLoader, IndexDataset(n, with_worker=False), seed=10,
                    epochs=2, batch_size=4, shuffle=True, num_workers=num_workers)
    for e in range(2):
        order = torch.cat([b["i"] for b in fl.epochs[e]]).tolist()
        torch_order = torch.cat([b["i"] for b in th.epochs[e]]).tolist()
        assert sorted(order) == list(range(n)), "epoch %d: not each index once" % e
        assert order != torch_order
        assert order != list(range(n))


def test_bijection_with_drop_last_gives_each_index_at_most_once():
    n = 50
    fl = run_epochs(forkload.DataLoader, IndexDataset(n, with_worker=False),
                    seed=11, batch_size=8, shuffle=True, drop_last=True,
                    num_workers=2, shuffle_algorithm="bijection",
                    generator=gen(5))
    order = torch.cat([b["i"] for b in fl.epochs[0]]).tolist()
    assert len(fl.epochs[0]) == n // 8
    assert len(order) == len(set(order)) == (n // 8) * 8
    assert set(order) <= set(range(n))


class CountingBatchSampler:
    def __iter__(self):
        yield [0, 1]
        yield [2, 3, 4]

    def __len__(self):
        return 2


LEN_CASES = {
    "batches": dict(batch_size=3),
    "batches_drop_last": dict(batch_size=3, drop_last=True),
    "exact": dict(batch_size=4),
    "no_batching": dict(batch_size=None),
    "shuffle_workers": dict(batch_size=6, shuffle=True, num_workers=2),
    "sampler": dict(batch_size=2, sampler=range(3, 10)),
    "batch_sampler": dict(batch_sampler=CountingBatchSampler()),
}


@pytest.mark.parametrize("case", sorted(LEN_CASES))
def test_len_matches_torch(case):
    ds = IndexDataset(N)
    kw = LEN_CASES[case]
    assert len(forkload.DataLoader(ds, **kw)) == len(tud.DataLoader(ds, **kw))


ATTR_CASES = {
    "defaults": dict(),
    "shuffle": dict(batch_size=4, shuffle=True),
    "workers": dict(batch_size=4, num_workers=2, drop_last=True, timeout=5,
                    persistent_workers=True, prefetch_factor=3),
    "sampler": dict(batch_size=2, sampler=range(3, 10)),
    "batch_sampler": dict(batch_sampler=CountingBatchSampler()),
    "no_batching": dict(batch_size=None),
}


def _init_fn(worker_id):
    pass


@pytest.mark.parametrize("case", sorted(ATTR_CASES))
def test_attributes_match_torch(case):
    ds = IndexDataset(N)
    kw = dict(ATTR_CASES[case])
    g = torch.Generator()
    kw.update(worker_init_fn=_init_fn, generator=g)
    a = forkload.DataLoader(ds, **kw)
    b = tud.DataLoader(ds, **kw)
    assert a.dataset is ds
    for name in ("batch_size", "drop_last", "num_workers", "pin_memory", "timeout",
                 "persistent_workers"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.worker_init_fn is _init_fn
    assert a.generator is g
    if b.num_workers > 0:
        assert a.prefetch_factor == b.prefetch_factor
    assert type(a.sampler).__name__ == type(b.sampler).__name__
    assert type(a.batch_sampler).__name__ == type(b.batch_sampler).__name__
    if "sampler" in kw:
        assert a.sampler is kw["sampler"]
    if "batch_sampler" in kw:
        assert a.batch_sampler is kw["batch_sampler"]
    assert a.in_order is True
    assert forkload.DataLoader(ds, num_workers=2, in_order=False).in_order is False
