"""state_dict() / load_state_dict(): a loader that loads the state of one
stopped after k batches hands out exactly the batches the first would have
handed next (its own continuation is the reference); a state saved between
epochs resumes at the next epoch.  The samples are deterministic (a worker's
random streams are not part of the state)."""

import pickle

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import (  # noqa: E402
    IndexDataset, ShardedIterable, assert_same, end_iterator, fresh, run_epochs,
    seed_all)

N = 20
BS = 3   # 7 batches, the last one short


def dataset():
    return IndexDataset(N, with_worker=False)


def checkpoint(sd):
    """What a training script does with the state: save it and load it."""
    return pickle.loads(pickle.dumps(sd))


def assert_batches_same(a, b, what):
    assert len(a) == len(b), "%s: %d batches, expected %d" % (what, len(a), len(b))
    for i, (x, y) in enumerate(zip(a, b)):
        assert_same(x, y, "%s batch %d" % (what, i))


def stop_and_resume(kw, k, epochs_before=0, seed=41):
    """Runs `epochs_before` whole epochs, then k batches of the next, takes
    the state, goes on to the end of that epoch (the reference); then a new
    loader under another global seed loads the state and runs one epoch.
    Returns (head, reference tail, resumed)."""
    seed_all(seed)
    first = forkload.DataLoader(dataset(), **{a: (v.make() if isinstance(v, fresh) else v)
                                              for a, v in kw.items()})
    for _ in range(epochs_before):
        list(first)
    it = iter(first)
    head = [next(it) for _ in range(k)]
    sd = checkpoint(first.state_dict())
    tail = list(it)
    end_iterator(it)
    del it, first

    seed_all(seed + 1000)  # the state, not the global generator, says the order
    second = forkload.DataLoader(dataset(), **{a: (v.make() if isinstance(v, fresh) else v)
                                               for a, v in kw.items()})
    second.load_state_dict(sd)
    resumed = list(second)
    del second
    return head, tail, resumed


def gen(seed):
    return fresh(lambda: torch.Generator().manual_seed(seed))


CONFIGS = {
    "sequential_0": dict(batch_size=BS),
    "shuffle_0": dict(batch_size=BS, shuffle=True),
    "shuffle_2": dict(batch_size=BS, shuffle=True, num_workers=2),
    "shuffle_2_persistent": dict(batch_size=BS, shuffle=True, num_workers=2,
                                 persistent_workers=True),
    "shuffle_generator_2": dict(batch_size=BS, shuffle=True, num_workers=2,
                                generator=gen(9)),
    "drop_last_3": dict(batch_size=BS, shuffle=True, drop_last=True, num_workers=3),
}


CASES = sorted({(c, 4) for c in CONFIGS} |
               {(c, k) for c in ("shuffle_0", "shuffle_2") for k in (0, 1, 7)} |
               {("shuffle_2_persistent", 7), ("drop_last_3", 7)})


@pytest.mark.parametrize("config,k", CASES)
def test_resumed_loader_hands_out_the_remaining_batches(config, k):
    kw = CONFIGS[config]
    k = min(k, len(forkload.DataLoader(dataset(), **{a: v for a, v in kw.items()
                                                     if a != "generator"})))
    head, tail, resumed = stop_and_resume(kw, k)
    assert_batches_same(resumed, tail, "resumed")
    # The first loader's epoch is torch's (so the reference is right).
    torch_run = run_epochs(tud.DataLoader, dataset(), seed=41, **kw)
    assert_batches_same(head + tail, torch_run.epochs[0], "first loader")


@pytest.mark.parametrize("config", ["shuffle_0", "shuffle_2", "shuffle_2_persistent"])
def test_resumed_loader_in_a_later_epoch_hands_out_the_remaining_batches(config):
    head, tail, resumed = stop_and_resume(CONFIGS[config], 3, epochs_before=2)
    assert len(tail) == 4
    assert_batches_same(resumed, tail, "resumed")


@pytest.mark.parametrize("config", ["sequential_0", "shuffle_0", "shuffle_2",
                                    "shuffle_2_persistent"])
def test_state_saved_between_epochs_resumes_at_the_next_epoch(config):
    kw = CONFIGS[config]
    seed_all(42)
    first = forkload.DataLoader(dataset(), **kw)
    epoch1 = list(first)
    sd = checkpoint(first.state_dict())
    epoch2 = list(first)
    del first
    second = forkload.DataLoader(dataset(), **kw)
    second.load_state_dict(sd)
    resumed = list(second)
    del second
    # A whole epoch, not what was left of the first one (nothing).
    assert len(resumed) == len(epoch2) == len(epoch1)
    assert sorted(i for b in resumed for i in b["i"].tolist()) == list(range(N))
    if not kw.get("shuffle"):
        assert_batches_same(resumed, epoch2, "resumed")


def test_resumed_loader_goes_on_with_later_epochs():
    kw = CONFIGS["shuffle_2"]
    head, tail, resumed = stop_and_resume(kw, 2)
    assert_batches_same(resumed, tail, "resumed")
    # The loader that resumed goes on with whole epochs afterwards.
    seed_all(43)
    first = forkload.DataLoader(dataset(), **kw)
    it = iter(first)
    next(it)
    sd = checkpoint(first.state_dict())
    end_iterator(it)
    del it, first
    second = forkload.DataLoader(dataset(), **kw)
    second.load_state_dict(sd)
    assert len(list(second)) == 6
    for _ in range(2):
        epoch = list(second)
        assert len(epoch) == 7
        assert sorted(i for b in epoch for i in b["i"].tolist()) == list(range(N))


def test_state_dict_is_plain_data():
    loader = forkload.DataLoader(dataset(), batch_size=BS, shuffle=True, num_workers=2)
    it = iter(loader)
    next(it)
    sd = loader.state_dict()
    end_iterator(it)
    del it

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return all(plain(v) for v in x)
        if isinstance(x, torch.Tensor):
            return True
        return x is None or isinstance(x, (bool, int, float, str, bytes))

    assert isinstance(sd, dict) and plain(sd)
    torch.save(sd, "/dev/null")


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_iterable_dataset_resumes_with_the_remaining_batches(num_workers, k):
    kw = dict(batch_size=2, num_workers=num_workers)
    seed_all(44)
    first = forkload.DataLoader(ShardedIterable(17), **kw)
    it = iter(first)
    head = [next(it) for _ in range(k)]
    sd = checkpoint(first.state_dict())
    tail = list(it)
    end_iterator(it)
    del it, first
    second = forkload.DataLoader(ShardedIterable(17), **kw)
    second.load_state_dict(sd)
    resumed = list(second)
    del second
    assert_batches_same(resumed, tail, "resumed")
    torch_run = run_epochs(tud.DataLoader, ShardedIterable(17), seed=44, **kw)
    assert_batches_same(head + tail, torch_run.epochs[0], "first loader")
