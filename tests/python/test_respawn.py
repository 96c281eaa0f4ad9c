"""max_worker_restarts: a worker that dies (SIGKILLed from outside by pid,
as the OOM killer would, or by an aimed fault) is forked again and the run
goes on, every batch once and in order, with the same values: the batches
a respawned worker redoes start from the generator states (torch's,
numpy's, random's) its predecessor began them in.  Past the budget, or with
none, a death is the error torch gives, within a second; a sample that kills
every worker touching it is an error at its batch naming it, and the rest
of the epoch comes."""

import os
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
import forkload._worker  # noqa: E402
from loader_helpers import children  # noqa: E402
from test_readme import doc_block  # noqa: E402


class Augmented(tud.Dataset):
    """Sample i with noise from each generator a worker seeds, as an
    augmentation draws it."""

    def __init__(self, n=96):
        self.n = n
        self.w = torch.linspace(-1, 1, 8)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.randn(8) + float(np.random.normal()) + random.random()
        return x, (x * self.w).sum() + 0.01 * i


def workers(parent=None):
    """parent's live children (this process's), the loader's workers: torch's
    reference interpreter, which another test file run in this process may
    have started, left out (loader_helpers.children)."""
    return sorted(pid for pid, state in children(parent).items()
                  if state != "Z")


def train(loader, epochs=2, kill_at=None, kill_all=False):
    """A small regression trained over `loader`; at step kill_at of the
    first epoch one worker (or each) is SIGKILLed from outside.  The final
    weights and the loss of every step."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            if epoch == 0 and step == kill_at:
                pids = workers()
                assert pids
                for pid in pids if kill_all else pids[-1:]:
                    os.kill(pid, signal.SIGKILL)
                # Let the deaths be seen while batches are still due.
                time.sleep(0.05)
    return model.weight.detach().clone(), torch.stack(losses)


def make(persistent=False, **kw):
    torch.manual_seed(1)
    return forkload.DataLoader(Augmented(), batch_size=4, shuffle=True,
                               num_workers=2, persistent_workers=persistent,
                               **kw)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_worker_killed_mid_epoch_leaves_the_training_run_bit_for_bit(
        persistent):
    want_w, want_loss = train(make(persistent))
    dl = make(persistent, max_worker_restarts=2)
    got_w, got_loss = train(dl, kill_at=5)
    assert torch.equal(got_loss, want_loss)
    assert torch.equal(got_w, want_w)
    if persistent:
        assert dl.stats()["worker_restarts"] == 1
    del dl


def test_kill_9_of_every_worker_once_leaves_the_run_unchanged():
    want_w, want_loss = train(make(True))
    dl = make(True, max_worker_restarts=2)
    got_w, got_loss = train(dl, kill_at=3, kill_all=True)
    assert torch.equal(got_loss, want_loss)
    assert torch.equal(got_w, want_w)
    assert dl.stats()["worker_restarts"] == 2
    del dl


def test_aimed_deaths_redo_their_batches_with_the_same_values():
    def epoch(**kw):
        torch.manual_seed(3)
        return list(forkload.DataLoader(Augmented(), batch_size=4,
                                        shuffle=True, num_workers=2, **kw))
    want = epoch()
    got = epoch(max_worker_restarts=3, faults="kill@3,exit@8,kill@9")
    assert len(got) == len(want)
    for (gx, gy), (wx, wy) in zip(got, want):
        assert torch.equal(gx, wx) and torch.equal(gy, wy)


def test_without_the_states_a_redone_batch_would_differ(monkeypatch):
    """The control: a respawned worker that keeps its fresh seeds gives
    other values, so the tests above see the states travel."""
    def epoch(**kw):
        torch.manual_seed(3)
        return torch.cat([x for x, _ in forkload.DataLoader(
            Augmented(), batch_size=4, num_workers=2, **kw)])
    want = epoch()
    # The states travel, but setting them does nothing (the module holds
    # forkload._worker.set_rng_state itself: what it calls is patched).
    for mod, name in ((random, "setstate"), (np.random, "set_state"),
                      (torch, "set_rng_state")):
        monkeypatch.setattr(mod, name, lambda s: None)
    assert not torch.equal(epoch(max_worker_restarts=1, faults="kill@3"),
                           want)


class Poison(tud.Dataset):
    """Sample 13 kills the worker reading it."""

    def __len__(self):
        return 40

    def __getitem__(self, i):
        if i == 13:
            os.kill(os.getpid(), signal.SIGKILL)
        return i


def test_a_poison_sample_is_its_batchs_error_and_the_epoch_goes_on():
    dl = forkload.DataLoader(Poison(), batch_size=4, num_workers=2,
                             max_worker_restarts=3)
    it = iter(dl)
    got, errors = [], []
    while True:
        try:
            got.append(next(it).tolist())
        except StopIteration:
            break
        except forkload.Error as e:
            errors.append((len(got) + len(errors), e))
    assert len(errors) == 1
    pos, e = errors[0]
    assert pos == 3 and e.name == "FL_EDATASET"
    assert "samples 12, 13, 14, 15" in str(e) and "killed its worker" in str(e)
    want = [b.tolist() for k, b in enumerate(tud.DataLoader(
        list(range(40)), batch_size=4)) if k != 3]
    assert got == want
    del it, dl


class Pids(tud.Dataset):
    def __init__(self, n=10 ** 6):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.002)
        return os.getpid()


def test_with_no_restarts_a_death_is_torchs_error_within_a_second():
    dl = forkload.DataLoader(Pids(), batch_size=2, num_workers=2)
    it = iter(dl)
    victim = int(next(it)[0])
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        while True:
            next(it)
    assert time.monotonic() - killed < 1.0
    assert str(e.value).startswith(
        f"DataLoader worker (pid {victim}) is killed by signal: Killed. ")
    # forkload's sentence follows, naming the batch the worker was filling
    # (at 2 ms a sample, it had one taken when killed).
    assert re.search(r"forkload: worker \d \(pid %d\) was killed by signal 9 "
                     r"\(SIGKILL: Killed\) while filling batch \d+ "
                     r"\(FL_EWORKER\)$" % victim, str(e.value))
    del it, dl


def test_past_the_budget_a_death_is_the_error():
    dl = forkload.DataLoader(Pids(), batch_size=2, num_workers=2,
                             max_worker_restarts=1,
                             faults="kill@2,kill@5")
    with pytest.raises(RuntimeError, match="budget of 1 worker restarts"):
        for _ in dl:
            pass
    del dl


def test_the_budget_spans_the_loaders_life_not_an_epoch():
    # Without persistent workers each epoch has a loader of its own; the
    # faults kill a worker in each.
    dl = forkload.DataLoader(Pids(20), batch_size=2, num_workers=2,
                             max_worker_restarts=1, faults="kill@2")
    assert len(list(dl)) == len(dl)
    assert dl.stats()["worker_restarts"] == 1
    with pytest.raises(RuntimeError, match="is killed by signal"):
        for _ in dl:
            pass
    assert dl.stats()["worker_restarts"] == 1
    del dl


class Stream(tud.IterableDataset):
    def __iter__(self):
        info = tud.get_worker_info()
        for i in range(info.id, 40, info.num_workers):
            yield i, torch.rand(())


def test_an_iterable_workers_stream_is_read_again_to_where_it_stood():
    def epoch(**kw):
        torch.manual_seed(5)
        return list(forkload.DataLoader(Stream(), batch_size=4,
                                        num_workers=2, **kw))
    want = epoch()
    got = epoch(max_worker_restarts=2, faults="kill@3")
    assert len(got) == len(want)
    for (gi, gx), (wi, wx) in zip(got, want):
        assert torch.equal(gi, wi) and torch.equal(gx, wx)


def test_max_worker_restarts_is_a_whole_number():
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="max_worker_restarts"):
            forkload.DataLoader(Augmented(), max_worker_restarts=bad)


def readme_loop(tmp_path, kill=None):
    """The README's first program, its training loop, with
    max_worker_restarts=2, run in a process of its own: with kill ("one"
    or "all"), once its first epoch's two workers are up, the program is
    stopped (SIGSTOP, so that the epoch is surely under way, its workers
    filling their window), one worker or both are SIGKILLed by pid from
    here, as the OOM killer would, and it goes on.  What it printed, and
    its warnings."""
    source = doc_block("first-python")
    assert source.count("num_workers=2)") == 1
    script = tmp_path / "train.py"
    script.write_text(source.replace(
        "num_workers=2)", "num_workers=2, max_worker_restarts=2)"))
    errors = tmp_path / "stderr"
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, text=True)
        try:
            if kill is not None:
                deadline = time.monotonic() + 60
                while True:
                    os.kill(proc.pid, signal.SIGSTOP)
                    pids = workers(proc.pid)
                    if len(pids) == 2:
                        break
                    os.kill(proc.pid, signal.SIGCONT)
                    assert proc.poll() is None, "it ended first"
                    assert time.monotonic() < deadline
                    time.sleep(0.002)
                for pid in pids if kill == "all" else pids[-1:]:
                    os.kill(pid, signal.SIGKILL)
                os.kill(proc.pid, signal.SIGCONT)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, errors.read_text()
    return out, errors.read_text()


@pytest.mark.parametrize("kill", ["one", "all"])
def test_the_readmes_training_loop_ends_with_the_same_losses_through_a_kill_9(
        tmp_path, kill):
    want, quiet = readme_loop(tmp_path)
    assert "respawned" not in quiet
    got, warned = readme_loop(tmp_path, kill)
    assert got == want and got.count("loss") == 5
    assert warned.count("respawned as pid") == (2 if kill == "all" else 1)
    assert "was killed by signal 9" in warned
