"""Threads around a loader (issue 43): while the main thread iterates,
breaks and starts epochs again, one thread asks stats() and budget(), one
drops the batches the main thread hands it, and one iterates a loader of
its own; with pinned batches (a stand-in for torch.cuda whose register,
unregister and events run Python) and under both sharing strategies.
Nothing may hang (each join is bounded), every batch is the one torch's
loader gives, and each thread ends without an error.  CI runs this file
under ASan and UBSan too, where every worker is forked before the threads
start: GCC 12's libasan takes no lock around fork, and a worker forked
while another thread is inside its allocator waits forever at its first
allocation (glibc's malloc is safe there, and the plain passes fork while
the threads run)."""

import os
import queue
import threading

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
from loader_helpers import UNDER_ASAN, FnDataset, wait_until  # noqa: E402
from test_pinned import fake_cuda  # noqa: E402,F401  (the fixture)

JOIN_S = 60


def sample(i):
    return {"x": torch.full((64,), i, dtype=torch.int32), "i": i}


class Helpers:
    """The three threads; stop() ends them and returns their errors."""

    def __init__(self, loader):
        self.loader = loader
        self.other = forkload.DataLoader(list(range(16)), batch_size=2,
                                         num_workers=1,
                                         persistent_workers=UNDER_ASAN)
        if UNDER_ASAN:
            next(iter(self.other))  # its worker forked now
        self.done = threading.Event()
        self.drop = queue.Queue()
        self.errors = []
        self.counts = {"asked": 0, "dropped": 0, "other": 0}
        self.threads = [threading.Thread(target=self._guard, args=(f,))
                        for f in (self._ask, self._drop, self._other)]
        for t in self.threads:
            t.start()

    def _guard(self, f):
        try:
            f()
        except Exception as e:  # noqa: BLE001  (reported by stop())
            self.errors.append(e)

    def _ask(self):
        while not self.done.is_set():
            try:
                self.loader.stats()
                self.loader.budget()
            except RuntimeError as e:
                # Before the first iter() there is no loader to ask.
                if "no loader to ask" not in str(e):
                    raise
            self.counts["asked"] += 1

    def _drop(self):
        while not self.done.is_set():
            try:
                b = self.drop.get(timeout=0.05)
            except queue.Empty:
                continue
            del b
            self.counts["dropped"] += 1

    def _other(self):
        want = [[2 * k, 2 * k + 1] for k in range(8)]
        while not self.done.is_set():
            got = [b.tolist() for b in self.other]
            assert got == want, got
            self.counts["other"] += 1

    def stop(self):
        self.done.set()
        for t in self.threads:
            t.join(JOIN_S)
            assert not t.is_alive(), "a helper thread hung"
            if UNDER_ASAN:
                # Joined, a thread may still be exiting, libasan draining
                # its allocator cache under the allocator's lock: the
                # next test's fork waits until it is gone.
                assert wait_until(lambda: not os.path.exists(
                    "/proc/self/task/%d" % t.native_id), JOIN_S)
        self.other = None
        return self.errors


@pytest.mark.parametrize("sharing", ["fd", "file_system"])
@pytest.mark.parametrize("pinned", [False, True])
def test_threads_ask_drop_and_iterate_while_the_main_thread_iterates(
        request, sharing, pinned):
    if pinned:
        request.getfixturevalue("fake_cuda").auto_complete = True
    ds = FnDataset(48, sample)
    want = list(tud.DataLoader(ds, batch_size=4))
    loader = forkload.DataLoader(ds, batch_size=4, num_workers=2,
                                 persistent_workers=True, sharing=sharing,
                                 pin_memory=pinned)
    if UNDER_ASAN:
        next(iter(loader))  # the persistent workers forked now
    helpers = Helpers(loader)
    try:
        for epoch in range(6):
            for k, b in enumerate(loader):
                assert torch.equal(b["x"], want[k]["x"])
                helpers.drop.put(b)
                del b
                if epoch % 2 == 0 and k == 4:
                    break  # the next epoch begins with batches in flight
    finally:
        errors = helpers.stop()
    assert errors == []
    assert helpers.counts["asked"] > 0 and helpers.counts["dropped"] > 0
    assert helpers.counts["other"] > 0
    del loader
