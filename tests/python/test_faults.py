"""Faults on demand (forkload.DataLoader's `faults`): a worker killed, a
segment's creation or a descriptor's passing failed, at a chosen batch,
through the paths a real fault takes.  A death is the loader's error naming
the worker; a lost segment or descriptor changes no batch: where it is an
error at its batch, the next call hands that batch out, and the epoch is
torch's."""

import re

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402

DATA = torch.arange(200.).reshape(100, 2)


def outcomes(loader):
    """Each next() of an epoch: a batch, or the exception it raised."""
    out = []
    it = iter(loader)
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            break
        except forkload.Error as e:
            out.append(e)
            if e.name in ("FL_EWORKER", "FL_EINVAL"):
                break
    return out


def batches(out):
    return [b for b in out if not isinstance(b, Exception)]


def torch_epoch():
    return list(tud.DataLoader(DATA, batch_size=4))


def assert_torchs(out):
    want = torch_epoch()
    got = batches(out)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("how", ["kill", "exit"])
def test_a_worker_killed_at_a_chosen_batch_is_the_loaders_error(how):
    dl = forkload.DataLoader(DATA, batch_size=4, num_workers=2,
                             faults="%s@5" % how)
    out = outcomes(dl)
    err = out[-1]
    assert isinstance(err, RuntimeError) and err.name == "FL_EWORKER"
    # Batch 5 is worker 1's; it dies before filling it.
    assert re.search(r"worker 1 \(pid \d+\)", str(err)), err
    assert ("signal 9" if how == "kill" else "status 1") in str(err)
    assert len(batches(out)) <= 5
    for k, b in enumerate(batches(out)):
        assert torch.equal(b, DATA[4 * k:4 * k + 4])
    del out, dl


@pytest.mark.parametrize("sharing", ["fd", "file_system"])
def test_a_segment_that_cannot_be_made_fails_its_batch_only(sharing):
    dl = forkload.DataLoader(DATA, batch_size=4, num_workers=2,
                             sharing=sharing, faults="enospc@0")
    out = outcomes(dl)
    assert isinstance(out[0], forkload.Error)
    assert out[0].name == "FL_ENOSPC" and "batch 0" in str(out[0])
    assert_torchs(out)
    assert dl.stats()["faults_injected"] == 1
    del out, dl


@pytest.mark.parametrize("sharing", ["fd", "file_system"])
def test_a_descriptor_lost_changes_no_batch(sharing):
    # The segment is made again: under file_system, where the consumer was
    # already waiting for that batch, it hears of it as an error at the
    # batch (timing decides), and the batch comes at the next call.
    dl = forkload.DataLoader(DATA, batch_size=4, num_workers=2,
                             sharing=sharing, faults="emfile@1")
    for epoch in range(2):
        out = outcomes(dl)
        errs = [b for b in out if isinstance(b, Exception)]
        assert len(errs) <= (1 if sharing == "file_system" else 0)
        for e in errs:
            assert e.name == "FL_EMFILE" and out.index(e) == 1
        assert_torchs(out)
        # Struck again in each epoch; stats are this epoch's loader's.
        assert dl.stats()["faults_injected"] == 1
        del out, errs
    del dl


def test_a_malformed_list_is_refused_quoting_its_token():
    dl = forkload.DataLoader(DATA, batch_size=4, num_workers=2,
                             faults="kill@soon")
    with pytest.raises(forkload.Error, match='"kill@soon"') as e:
        list(dl)
    assert e.value.name == "FL_EINVAL"
    with pytest.raises(TypeError, match="faults"):
        forkload.DataLoader(DATA, faults=3)
