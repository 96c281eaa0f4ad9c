"""pin_memory=True: each shared segment is page-locked where it lies, once
(cudaHostRegister through torch.cuda.cudart()), and a batch's segment goes
back to be refilled only once an event recorded when its last view went has
completed, so that a copy made with non_blocking=True never reads a refilled
segment.

Without a GPU, a fake copy engine stands in for torch.cuda (as
tests/async_copy_test.c plays the copy engine for the C library): its
register and unregister calls are logged, and its events complete only when
the test says so.  The tests that need a real GPU skip where
torch.cuda.is_available() is False."""

import ctypes
import gc
import threading
import time
import warnings

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
import forkload.dataloader as fdl  # noqa: E402
from loader_helpers import assert_same, end_iterator  # noqa: E402

N = 1024  # int32 elements a sample: 4 KiB
BS = 4


class Samples(tud.Dataset):
    """Sample i: N int32 of value i."""

    def __init__(self, n=256):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((N,), i, dtype=torch.int32)


def mapped(addr, size):
    """[addr, addr + size) lies within one mapping of this process."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr and addr + size <= hi:
                return True
    return False


def read_batch(addr, like):
    """The bytes at addr, as a tensor shaped like `like`."""
    raw = bytearray(ctypes.string_at(addr, like.numel() * like.element_size()))
    return torch.frombuffer(raw, dtype=like.dtype).view(like.shape)


class FakeEvent:
    """Completes when the test says so (complete()), or when waited for
    (synchronize(), which waits, bounded, for the test's word when
    hold_sync is set)."""

    def __init__(self, engine):
        self.engine = engine
        self.done = False
        self.synchronized = False
        self.recorded_after = len(engine.log)

    def complete(self):
        self.done = True

    def query(self):
        return self.done

    def synchronize(self):
        self.engine.log.append(("sync", id(self)))
        self.synchronized = True
        if self.engine.hold_sync is not None:
            assert self.engine.hold_sync.wait(5), "synchronize waited 5 s"
        self.done = True


class FakeStream:
    def __init__(self, engine):
        self.engine = engine

    def record_event(self):
        e = FakeEvent(self.engine)
        if self.engine.auto_complete:
            e.done = True
        self.engine.events.append(e)
        self.engine.log.append(("record", id(e)))
        return e


class FakeCudart:
    def __init__(self, engine):
        self.engine = engine

    def cudaHostRegister(self, ptr, size, flags):
        eng = self.engine
        assert flags == 0
        assert ptr not in eng.registered, "registered twice: %#x" % ptr
        assert mapped(ptr, size)
        eng.log.append(("register", ptr, size))
        if eng.fail_register and eng.fail_register(len(eng.registrations)):
            eng.registrations.append((ptr, size, False))
            return 2  # cudaErrorMemoryAllocation
        eng.registrations.append((ptr, size, True))
        eng.registered[ptr] = size
        return 0

    def cudaHostUnregister(self, ptr):
        eng = self.engine
        size = eng.registered.pop(ptr, None)
        assert size is not None, "unregistered but not registered: %#x" % ptr
        # Before the segment is unmapped, never after.
        eng.unregistered_mapped.append(mapped(ptr, size))
        eng.log.append(("unregister", ptr, size))
        return 0


class FakeCuda:
    """torch.cuda's is_available, cudart and current_stream, logged."""

    def __init__(self):
        self.log = []
        self.events = []
        self.registered = {}     # ptr -> size, now
        self.registrations = []  # (ptr, size, ok), ever
        self.unregistered_mapped = []
        self.auto_complete = False
        self.hold_sync = None
        self.fail_register = None

    def is_available(self):
        return True

    def cudart(self):
        return FakeCudart(self)

    def current_stream(self):
        return FakeStream(self)

    def pinned(self, ptr):
        """ptr lies in a range registered now."""
        return any(p <= ptr < p + n for p, n in self.registered.items())

    def pending(self):
        return [e for e in self.events if not e.done]


@pytest.fixture
def fake_cuda(monkeypatch):
    eng = FakeCuda()
    monkeypatch.setattr(fdl, "_cuda", eng)
    # What torch's iterator asks before it pins: torch 1.13 whether CUDA is
    # available, torch 2 whether there is an accelerator, and which.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    if hasattr(torch, "accelerator"):
        monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
        monkeypatch.setattr(torch.accelerator, "current_accelerator",
                            lambda *a, **k: torch.device("cuda"))
    yield eng
    gc.collect()
    # Everything registered was unregistered, while still mapped.
    assert eng.registered == {}
    assert all(eng.unregistered_mapped)


def end(it):
    """Drop an iterator and what it holds; its loader goes with it."""
    it._close()
    del it
    gc.collect()


no_cuda = pytest.mark.skipif(torch.cuda.is_available(),
                             reason="CUDA is available: pin_memory pins")
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a GPU: torch.cuda.is_available() is False (a CPU-only "
    "torch, or no device)")


# Without CUDA: torch's warnings, and plain batches.

def warnings_of(make, then=lambda it: None):
    """The warnings (category, text) that iter(make()) gives, and then(it),
    and what then returned."""
    loader = make()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        it = iter(loader)
        out = then(it)
    if out is not it:  # the caller reads on from the iterator it asked for
        end_iterator(it)
    return [(w.category, str(w.message)) for w in caught], out


@no_cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_without_cuda_pin_memory_warns_at_iter_as_torch_and_batches_are_plain(
        monkeypatch, num_workers):
    """torch 2 warns that there is no accelerator; torch 1.13 says
    nothing.  Either way the batches are plain and nothing is copied."""
    kw = dict(batch_size=BS, num_workers=num_workers, pin_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing at construction
        dl = forkload.DataLoader(Samples(20), **kw)
    want_warnings, _ = warnings_of(lambda: tud.DataLoader(Samples(20), **kw))

    def no_copy(*args, **kwargs):
        raise AssertionError("pin_memory copied a batch")

    monkeypatch.setattr("torch.utils.data._utils.pin_memory.pin_memory",
                        no_copy)
    got_warnings, it = warnings_of(lambda: dl, lambda it: it)
    assert got_warnings == want_warnings
    got = list(it)
    assert all(not b.is_pinned() for b in got)
    assert it._loader is None or it._loader.inflight == 0
    want = list(tud.DataLoader(Samples(20), batch_size=BS))
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        assert_same(a, b, "batch %d" % k)


def test_pin_memory_device_without_pin_memory_warns_as_torch():
    """torch 1.13 warns that pin_memory_device is not used without
    pin_memory; torch 2 says nothing."""
    def run(cls):
        return warnings_of(
            lambda: cls(Samples(8), batch_size=BS, pin_memory_device="cuda"),
            list)

    (got_warnings, got), (want_warnings, want) = run(forkload.DataLoader), \
        run(tud.DataLoader)
    assert got_warnings == want_warnings
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert_same(a, b)


def first_batch_or_error(loader):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = ("batch", next(iter(loader)))
        except Exception as e:  # noqa: BLE001
            out = ("error", type(e))
    return out, [(w.category, str(w.message)) for w in caught]


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_pin_memory_device_without_cuda_is_torchs(device):
    """torch 1.13 pins a batch for a pin_memory_device it is given without
    asking whether the device is there; without it, that batch raises.
    torch 2 warns that pin_memory_device is deprecated, and without an
    accelerator, pins nothing."""
    kw = dict(batch_size=BS, pin_memory=True, pin_memory_device=device)
    (theirs, want_warnings) = first_batch_or_error(
        tud.DataLoader(Samples(8), **kw))
    (ours, got_warnings) = first_batch_or_error(
        forkload.DataLoader(Samples(8), **kw))
    assert got_warnings == want_warnings
    assert ours[0] == theirs[0]
    if ours[0] == "batch":
        assert_same(ours[1], theirs[1])
    else:
        assert ours[1] is theirs[1]


# The fake copy engine: the order of registration, events and refills.

@pytest.mark.parametrize("sharing", ["fd", "file_system"])
def test_segment_is_not_refilled_while_its_copy_is_in_flight(fake_cuda,
                                                             sharing):
    """Batch 0 is "copied" and dropped at once, its event pending: the
    batches after it, all held so that the worker needs a free segment for
    each, never come in batch 0's segment, whose bytes stay batch 0's.
    Once the event completes, the segment is refilled within the prefetch
    window."""
    dl = forkload.DataLoader(Samples(), batch_size=BS, num_workers=1,
                             pin_memory=True, persistent_workers=True,
                             sharing=sharing)
    it = iter(dl)
    b0 = next(it)
    a0, want = b0.data_ptr(), b0.clone()
    assert fake_cuda.pinned(a0)
    assert fake_cuda.events == []
    del b0  # right after a non_blocking copy
    assert len(fake_cuda.events) == 1 and fake_cuda.pending()
    assert it._loader.inflight == 1
    held = []
    for _ in range(8):
        held.append(next(it))
        assert held[-1].data_ptr() != a0
        assert fake_cuda.pinned(held[-1].data_ptr())
        assert torch.equal(read_batch(a0, want), want)
    assert it._loader.inflight == 1
    fake_cuda.events[0].complete()
    reused_at = None
    for k in range(4):
        held.append(next(it))
        if held[-1].data_ptr() == a0:
            reused_at = k
            break
    assert reused_at is not None, "batch 0's segment never came back"
    assert it._loader.inflight == 0
    # It was refilled with another batch, which is whole.
    b = held[-1]
    first = int(b[0, 0])
    assert first != 0
    assert torch.equal(b, torch.arange(first, first + BS, dtype=torch.int32)
                       [:, None].expand(BS, N))
    del held, b
    end(it)


def test_without_the_wait_a_released_segment_is_refilled():
    """The control: the same steps with pin_memory off, where a dropped
    batch goes back at once; its segment is refilled under the "copy"."""
    dl = forkload.DataLoader(Samples(), batch_size=BS, num_workers=1,
                             persistent_workers=True)
    it = iter(dl)
    b0 = next(it)
    a0, want = b0.data_ptr(), b0.clone()
    del b0
    held, refilled = [], False
    for _ in range(8):
        held.append(next(it))
        refilled = refilled or not torch.equal(read_batch(a0, want), want)
    assert refilled
    del held
    end(it)


def test_event_is_recorded_when_the_batchs_last_view_goes(fake_cuda):
    """One event per batch, not per tensor, recorded when the last view of
    the batch is gone: a tensor kept, a numpy view of it, a slice."""
    dl = forkload.DataLoader(Samples(16), batch_size=BS, pin_memory=True,
                             collate_fn=None)
    it = iter(dl)
    b = next(it)
    x, y = b[0], b[1:]
    arr = y.numpy()
    del b
    assert fake_cuda.events == []
    del x, y
    assert fake_cuda.events == []
    del arr
    assert len(fake_cuda.events) == 1
    assert it._loader.inflight == 1
    fake_cuda.events[0].complete()
    b = next(it)  # settles: the batch goes back
    assert it._loader.inflight == 0
    del b
    end(it)


@pytest.mark.parametrize("persistent", [True, False])
def test_each_segment_is_registered_once_and_unregistered_before_unmap(
        fake_cuda, persistent):
    fake_cuda.auto_complete = True  # every copy done at once
    dl = forkload.DataLoader(Samples(48), batch_size=BS, num_workers=2,
                             pin_memory=True, shuffle=True,
                             persistent_workers=persistent)
    batches = 0
    for _ in range(3):
        for b in dl:
            # Registered before it is handed out.
            assert fake_cuda.pinned(b.data_ptr())
            assert b.is_pinned() is False  # a CPU torch cannot tell
            batches += 1
            del b
    assert batches == 3 * 48 // BS
    regs = [e for e in fake_cuda.log if e[0] == "register"]
    assert len(regs) == len({e[1] for e in regs}) or not persistent
    # Once per segment, not per batch: the window's worth of segments.
    per_epoch = len(regs) / (1 if persistent else 3)
    assert per_epoch <= 2 * (2 + 2), fake_cuda.log
    assert len(fake_cuda.events) == batches
    dl = None
    gc.collect()
    unregs = [e for e in fake_cuda.log if e[0] == "unregister"]
    assert sorted(e[1:] for e in unregs) == sorted(e[1:] for e in regs)
    assert all(fake_cuda.unregistered_mapped)


def test_close_waits_for_copies_in_flight(fake_cuda):
    """Dropped batches whose events are pending when the loader goes: each
    event is synchronized (the wait ends when the copy does), and only then
    are the segments unregistered and unmapped."""
    fake_cuda.hold_sync = threading.Event()
    dl = forkload.DataLoader(Samples(64), batch_size=BS, num_workers=2,
                             pin_memory=True)
    it = iter(dl)
    bases = []
    for _ in range(3):
        ptr = next(it).data_ptr()  # dropped at once, its copy in flight
        bases += [p for p, n in fake_cuda.registered.items()
                  if p <= ptr < p + n]
    assert len(fake_cuda.pending()) == 3 and len(bases) == 3
    timer = threading.Timer(0.3, fake_cuda.hold_sync.set)
    timer.start()
    t0 = time.monotonic()
    end(it)
    del dl
    gc.collect()
    took = time.monotonic() - t0
    timer.join()
    assert took >= 0.25
    assert fake_cuda.pending() == []
    assert all(e.synchronized for e in fake_cuda.events)
    # Each of their segments is unregistered after its copy's wait (the
    # others may go as soon as their workers stop).
    log = fake_cuda.log
    for base, event in zip(bases, fake_cuda.events):
        synced = log.index(("sync", id(event)))
        unregistered = [i for i, e in enumerate(log)
                        if e[0] == "unregister" and e[1] == base]
        assert len(unregistered) == 1 and unregistered[0] > synced, log


def test_batches_dropped_on_another_thread_wait_for_their_events(fake_cuda):
    """A thread drops batches while the consumer waits in next() (the
    loader's lock busy): their events go on the pending list all the
    same, and their segments come back once the events complete."""
    dl = forkload.DataLoader(Samples(128), batch_size=BS, num_workers=2,
                             pin_memory=True, persistent_workers=True)
    it = iter(dl)
    held = [next(it) for _ in range(4)]
    ptrs = {b.data_ptr() for b in held}
    wants = [b.clone() for b in held]
    addrs = [b.data_ptr() for b in held]

    def drop():
        time.sleep(0.05)
        held.clear()

    t = threading.Thread(target=drop)
    t.start()
    more = []
    for _ in range(6):
        more.append(next(it))
        assert more[-1].data_ptr() not in ptrs  # held, then in flight
    t.join()
    assert len(fake_cuda.events) == 4 and len(fake_cuda.pending()) == 4
    for a, w in zip(addrs, wants):
        assert torch.equal(read_batch(a, w), w)
    for e in fake_cuda.events:
        e.complete()
    # Within the next prefetch window (2 workers, 2 each) and one more.
    for _ in range(8):
        more.append(next(it))
    assert it._loader.inflight == 0
    assert ptrs & {b.data_ptr() for b in more[6:]}
    del more
    end(it)


def test_a_segment_that_cannot_be_registered_is_warned_of_and_serves(
        fake_cuda):
    """cudaHostRegister fails for the second segment: a RuntimeWarning at
    its first batch with libforkload's sentence and torch's error, and the
    batch comes whole, unpinned, nothing lost."""
    fake_cuda.fail_register = lambda k: k == 1
    fake_cuda.auto_complete = True
    dl = forkload.DataLoader(Samples(32), batch_size=BS, num_workers=1,
                             pin_memory=True)
    with pytest.warns(RuntimeWarning) as caught:
        got = [b.clone() for b in dl]
    msgs = [str(w.message) for w in caught]
    assert len(msgs) == 1, msgs
    assert "pin hook returned" in msgs[0] and "cudaHostRegister" in msgs[0]
    assert "unpinned" in msgs[0]
    assert torch.equal(torch.cat(got)[:, 0],
                       torch.arange(32, dtype=torch.int32))
    assert [r[2] for r in fake_cuda.registrations].count(False) == 1


# With a GPU.

@needs_cuda
def test_gpu_batches_are_pinned_and_the_copy_does_not_wait_for_the_stream():
    """The tensors report is_pinned(), and .to('cuda', non_blocking=True)
    returns while the stream is still busy (a copy from pageable memory
    would wait for it): the copy overlaps with what runs before it."""
    dl = forkload.DataLoader(Samples(64), batch_size=16, num_workers=2,
                             pin_memory=True)
    stream = torch.cuda.current_stream()
    for b in dl:
        assert b.is_pinned()
        torch.cuda._sleep(50_000_000)  # some tens of ms of GPU time
        d = b.to("cuda", non_blocking=True)
        assert not stream.query(), "the copy waited for the stream"
        want = b.clone()
        del b
        torch.cuda.synchronize()
        assert torch.equal(d.cpu(), want)


class OwnBatch:
    """A custom batch type with its own pin_memory(), which torch calls."""

    def __init__(self, x):
        self.x = x
        self.pinned = False

    def pin_memory(self):
        self.x = self.x.pin_memory()
        self.pinned = True
        return self


def structured(samples):
    x = torch.stack(samples)
    return {"t": (x, x[:1]), "own": OwnBatch(x.clone())}


@needs_cuda
@pytest.mark.parametrize("num_workers", [0, 2])
def test_gpu_batches_have_torchs_pinned_structure(num_workers):
    """torch's pin_memory walk: a collate_fn's tuple (a list with torch
    1.13), a custom batch's own pin_memory() called; the tensors of the
    segment pinned where they lie."""
    kw = dict(batch_size=BS, num_workers=num_workers, pin_memory=True,
              collate_fn=structured)
    got = list(forkload.DataLoader(Samples(16), **kw))
    want = list(tud.DataLoader(Samples(16), **kw))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert type(a["t"]) is type(b["t"])
        assert a["own"].pinned and b["own"].pinned
        assert a["own"].x.is_pinned() and a["t"][0].is_pinned()
        assert torch.equal(a["t"][0], b["t"][0])


@needs_cuda
def test_gpu_segment_is_not_refilled_under_a_copy_in_flight():
    """The host tensor is dropped right after a non_blocking copy queued
    behind a long kernel on a side stream: its segment does not come back
    while the copy waits, and the device gets the batch's own bytes."""
    dl = forkload.DataLoader(Samples(), batch_size=BS, num_workers=1,
                             pin_memory=True, persistent_workers=True)
    it = iter(dl)
    side = torch.cuda.Stream()
    b0 = next(it)
    a0, want = b0.data_ptr(), b0.clone()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        d0 = b0.to("cuda", non_blocking=True)
        del b0
    held = []
    while not side.query() and len(held) < 8:
        held.append(next(it))
        assert held[-1].data_ptr() != a0 or side.query()
    side.synchronize()
    assert torch.equal(d0.cpu(), want)
    del held
    end(it)
