"""loader.stats() and loader.budget(): libforkload's counters and its budget
(what `forkload doctor` prints) from Python.  The counters follow what the
consumer holds; the budget's arithmetic is the one fl_loader_budget(3)
documents, and a consumer keeping batches in a list learns from it how many
it can keep before the binding limit stops the loader."""

import gc

import pytest
torch = pytest.importorskip("torch")

import forkload  # noqa: E402
from loader_helpers import FnDataset  # noqa: E402


def sample(i):
    return torch.full((256,), float(i))


def held_loader(num_workers, sharing="fd", **kw):
    return forkload.DataLoader(FnDataset(60, sample), batch_size=4,
                               num_workers=num_workers, sharing=sharing, **kw)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("sharing", ["fd", "file_system"])
def test_stats_count_the_batches_held(num_workers, sharing):
    dl = held_loader(num_workers, sharing)
    it = iter(dl)
    held = [next(it) for _ in range(5)]
    st = dl.stats()
    assert st["batches_held"] == 5
    assert st["batches_delivered"] == 5
    assert st["segments"] >= 5 and st["bytes_mapped"] > 0
    assert st["worker_restarts"] == 0 and st["faults_injected"] == 0
    del held[1]
    gc.collect()
    assert dl.stats()["batches_held"] == 4
    held += list(it)
    st = dl.stats()
    assert st["batches_held"] == len(held) == 14
    assert st["batches_delivered"] == 15
    assert st["segments_peak"] >= 14
    del held[:10]
    gc.collect()
    assert dl.stats()["batches_held"] == 4
    del held, it
    gc.collect()
    # The epoch over and its batches gone: what its loader said at its end.
    st = dl.stats()
    assert st["batches_held"] == 0 and st["batches_delivered"] == 15
    assert st["segments_peak"] >= 14 and st["in_flight"] == 0
    b = dl.budget()
    assert b["binding"] is not None
    assert all(i["in_use"] is None or i["resource"] != "memory bytes" or
               i["in_use"] == st["bytes_mapped"] for i in b["items"])


@pytest.mark.parametrize("num_workers", [0, 2])
def test_budget_arithmetic_holds_for_the_batches_kept(num_workers):
    dl = held_loader(num_workers)
    it = iter(dl)
    held = []
    for _ in range(6):
        held.append(next(it))
        b = dl.budget()
        mem = next(x for x in b["items"] if x["resource"] == "memory bytes")
        assert mem["in_use"] == dl.stats()["bytes_mapped"]
        assert mem["per_batch"] > 0
        ahead = (num_workers - 1) * 2 if num_workers else 0
        assert mem["max_held"] == mem["limit"] // mem["per_batch"] - ahead
        # The binding item is the least max_held, and says so at the top.
        finite = [x["max_held"] for x in b["items"]
                  if x["max_held"] is not None]
        assert b["max_held"] == min(finite)
        assert b["binding"] == next(x["resource"] for x in b["items"]
                                    if x["max_held"] == b["max_held"])
        # The fds: the fd strategy lets go of held batches' at the limit.
        fds = next(x for x in b["items"] if x["resource"] == "fds")
        assert fds["per_batch"] == 0 and fds["max_held"] is None
        assert len(held) < b["max_held"]
    del held, it, dl


def test_budget_of_dev_shm_with_file_system_sharing():
    dl = held_loader(2, "file_system")
    it = iter(dl)
    held = [next(it) for _ in range(3)]
    b = dl.budget()
    shm = next(x for x in b["items"] if x["resource"] == "/dev/shm bytes")
    assert shm["limit"] > 0 and shm["per_batch"] > 0
    # What is free there, plus what the loader's segments take, is room.
    free = shm["limit"] - shm["in_use"] + dl.stats()["bytes_mapped"]
    assert shm["max_held"] == free // shm["per_batch"] - 2
    assert b["max_held"] <= shm["max_held"]
    del held, it, dl


def test_stats_and_budget_outlive_the_epoch_while_batches_are_held():
    dl = held_loader(2)
    held = list(dl)
    assert dl.stats()["batches_held"] == len(held) == 15
    assert dl.budget()["binding"] is not None
    del held, dl


def test_persistent_workers_count_across_epochs():
    dl = held_loader(2, persistent_workers=True)
    for _ in range(2):
        n = sum(1 for _ in dl)
    assert n == 15
    st = dl.stats()
    assert st["batches_delivered"] == 30 and st["batches_held"] == 0
    del dl


def test_no_iterator_no_figures():
    dl = held_loader(2)
    with pytest.raises(RuntimeError, match="iter"):
        dl.stats()
    with pytest.raises(RuntimeError, match="iter"):
        dl.budget()
