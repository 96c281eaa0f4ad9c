"""Errors: bad arguments (the installed torch's exception types and
messages, torch 1.13's or torch 2's), start methods other than fork refused, worker
exceptions re-raised at their batch with torch's message and iteration going
on, workers that die, timeouts, Ctrl-C, loaders dropped mid-epoch, and the GIL
released while the consumer waits."""

import io
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
import warnings

import pytest
torch = pytest.importorskip("torch")
import torch.utils.data as tud  # noqa: E402

import forkload  # noqa: E402
import forkload._worker  # noqa: E402
import forkload.datasets  # noqa: E402
from loader_helpers import (  # noqa: E402
    FnDataset, IndexDataset, PidDataset, assert_outcomes_same, assert_runs_same,
    end_iterator, forkload_names, is_gone, outcomes, proc_stat, run_both,
    subprocess_env, wait_until)

# How long after a worker's death, or a Ctrl-C, the consumer may take to say
# so (the spec: about a second; torch takes a few milliseconds).
PROMPT_S = 2.0


# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------

class Stream(tud.IterableDataset):
    def __iter__(self):
        return iter(range(4))


MAP = IndexDataset(10)
STREAM = Stream()
SAMPLER = tud.SequentialSampler(range(10))
BATCHES = [[0, 1], [2, 3]]

# name: (dataset, keywords, compare the message too)
ARG_ERRORS = {
    "negative_num_workers": (MAP, dict(num_workers=-1), True),
    "negative_timeout": (MAP, dict(timeout=-1), True),
    "prefetch_factor_without_workers": (MAP, dict(prefetch_factor=3), True),
    "persistent_workers_without_workers": (MAP, dict(persistent_workers=True), True),
    "iterable_with_shuffle": (STREAM, dict(shuffle=True), True),
    "iterable_with_sampler": (STREAM, dict(sampler=SAMPLER), True),
    "iterable_with_batch_sampler": (STREAM, dict(batch_sampler=BATCHES), True),
    "sampler_with_shuffle": (MAP, dict(sampler=SAMPLER, shuffle=True), True),
    "batch_sampler_with_batch_size": (MAP, dict(batch_sampler=BATCHES, batch_size=2), True),
    "batch_sampler_with_shuffle": (MAP, dict(batch_sampler=BATCHES, shuffle=True), True),
    "batch_sampler_with_sampler": (MAP, dict(batch_sampler=BATCHES, sampler=SAMPLER), True),
    "batch_sampler_with_drop_last": (MAP, dict(batch_sampler=BATCHES, drop_last=True), True),
    "no_batching_with_drop_last": (MAP, dict(batch_size=None, drop_last=True), True),
    "batch_size_zero": (MAP, dict(batch_size=0), True),
    "batch_size_negative": (MAP, dict(batch_size=-2), True),
    "batch_size_float": (MAP, dict(batch_size=2.5), True),
    "batch_size_bool": (MAP, dict(batch_size=True), True),
    "drop_last_not_bool": (MAP, dict(drop_last=1), True),
    "context_without_workers": (MAP, dict(multiprocessing_context="fork"), False),
    "context_unknown": (MAP, dict(num_workers=2, multiprocessing_context="no-such"), False),
}


@pytest.mark.parametrize("case", sorted(ARG_ERRORS))
def test_bad_arguments_raise_torchs_exception(case):
    ds, kw, same_message = ARG_ERRORS[case]
    with pytest.raises(Exception) as want:
        tud.DataLoader(ds, **kw)
    with pytest.raises(Exception) as got:
        forkload.DataLoader(ds, **kw)
    assert got.type is want.type, "%s, torch raises %s" % (got.type, want.type)
    if same_message:
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("attr", ["batch_size", "batch_sampler", "sampler", "drop_last",
                                  "dataset", "persistent_workers"])
def test_attributes_are_frozen_after_init_as_in_torch(attr):
    a = forkload.DataLoader(MAP, batch_size=2)
    b = tud.DataLoader(MAP, batch_size=2)
    with pytest.raises(ValueError) as want:
        setattr(b, attr, getattr(b, attr))
    with pytest.raises(ValueError) as got:
        setattr(a, attr, getattr(a, attr))
    assert str(got.value) == str(want.value)


# Where torch versions differ: torch 1.13's prefetch_factor defaults to 2
# and must be 2 without workers, and must be positive; torch 2's defaults to
# None, must be None without workers, and 0 passes __init__ but not iter().
PREFETCH_CASES = [dict(num_workers=0, prefetch_factor=2),
                  dict(num_workers=0, prefetch_factor=3),
                  dict(num_workers=0),
                  dict(num_workers=2),
                  dict(num_workers=2, prefetch_factor=0),
                  dict(num_workers=2, prefetch_factor=-1),
                  dict(num_workers=2, prefetch_factor=3)]


def built_and_iterated(cls, kw):
    """('ok', prefetch_factor, first batch) or where it failed and how."""
    try:
        loader = cls(IndexDataset(4, with_worker=False), batch_size=2, **kw)
    except Exception as e:  # noqa: BLE001
        return ("init", type(e), str(e))
    try:
        it = iter(loader)
        first = next(it)
        end_iterator(it)
    except Exception as e:  # noqa: BLE001
        return ("iter", type(e), str(e))
    return ("ok", loader.prefetch_factor, first["i"].tolist())


# torch 2's iterator refused for prefetch_factor=0 fails again in its __del__.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("kw", PREFETCH_CASES, ids=str)
def test_prefetch_factor_is_checked_as_the_installed_torch_checks_it(kw):
    assert built_and_iterated(forkload.DataLoader, kw) == \
        built_and_iterated(tud.DataLoader, kw)


def test_too_many_workers_warn_as_torch():
    """torch's advice where num_workers exceeds the CPUs this process may
    use, at __init__ and at iter(), in the installed torch's words."""
    n = len(os.sched_getaffinity(0)) + 1

    def warned(cls):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = cls(IndexDataset(4), num_workers=n)
            it = iter(loader)
            end_iterator(it)
            del it
        return [(w.category, str(w.message)) for w in caught]

    want = warned(tud.DataLoader)
    assert len(want) == 2 and "This DataLoader will create" in want[0][1]
    assert warned(forkload.DataLoader) == want


def test_timeout_without_workers_fails_by_iter_as_in_torch():
    # torch accepts it in __init__ and fails iter() with an AssertionError
    # (_SingleProcessDataLoaderIter asserts timeout == 0): with no message
    # in torch 1.13, with one in torch 2.
    with pytest.raises(Exception) as want:
        iter(tud.DataLoader(MAP, timeout=2))
    with pytest.raises(Exception) as got:
        iter(forkload.DataLoader(MAP, timeout=2))
    assert got.type is want.type
    assert str(got.value) == str(want.value)


@pytest.mark.parametrize("context", ["fork", multiprocessing.get_context("fork"), None],
                         ids=["name", "object", "none"])
def test_fork_context_is_accepted(context):
    fl, th = run_both(IndexDataset(9), batch_size=2, num_workers=2,
                      multiprocessing_context=context)
    assert_runs_same(fl, th)


@pytest.mark.parametrize("context", ["spawn", "forkserver",
                                     multiprocessing.get_context("spawn"),
                                     multiprocessing.get_context("forkserver")],
                         ids=["spawn", "forkserver", "spawn_object", "forkserver_object"])
def test_start_methods_other_than_fork_are_refused(context):
    with pytest.raises(ValueError) as e:
        loader = forkload.DataLoader(MAP, num_workers=2, multiprocessing_context=context)
        iter(loader)
    # A sentence saying that forkload forks its workers.
    assert re.search(r"\bforks?\b", str(e.value)), str(e.value)


def test_private_loader_refuses_a_second_init_after_a_late_failure():
    """forkload._forkload.Loader, which DataLoader makes once: an __init__
    that failed after keeping the dataset (here at create, on a bad
    faults list) may not be run again over what it kept."""
    from forkload import _forkload
    data = list(range(10))
    kept = sys.getrefcount(data)
    loader = _forkload.Loader.__new__(_forkload.Loader)
    kw = dict(batch_size=2, length=10, num_workers=1, sample_bytes=64)
    with pytest.raises(forkload.Error, match="faults"):
        loader.__init__(data, "map", None, None, faults="nonsense@@", **kw)
    with pytest.raises(RuntimeError, match="already made"):
        loader.__init__(data, "map", None, None, **kw)
    del loader
    assert sys.getrefcount(data) == kept


# --------------------------------------------------------------------------
# Exceptions in workers
# --------------------------------------------------------------------------

class CustomError(Exception):
    pass


class TwoArgError(Exception):
    """Cannot be rebuilt from one message: torch raises RuntimeError."""

    def __init__(self, a, b):
        super().__init__(a, b)


class PickyError(Exception):
    """Refuses a message that is not an int: torch 1.13 lets the
    ValueError out of its reraise, torch 2 raises RuntimeError instead."""

    def __init__(self, code):
        if not isinstance(code, int):
            raise ValueError("PickyError wants an int")
        super().__init__(code)


RAISERS = {
    "PickyError": lambda i: PickyError(i),
    "ValueError": lambda i: ValueError("bad index %d" % i),
    "KeyError": lambda i: KeyError("missing %d" % i),
    "CustomError": lambda i: CustomError("custom %d" % i),
    "TwoArgError": lambda i: TwoArgError(i, "two"),
    "IndexError": lambda i: IndexError("index %d out of range" % i),
}


class RaisingDataset(tud.Dataset):
    def __init__(self, n, bad, make):
        self.n = n
        self.bad = bad
        self.make = make

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.bad:
            raise self.make(i)
        return {"i": i, "x": torch.full((2,), float(i))}


@pytest.mark.parametrize("kind,num_workers",
                         [(k, w) for k in sorted(RAISERS) for w in (0, 2)] + [("ValueError", 3)])
def test_worker_exception_is_reraised_at_its_batch_as_torch(kind, num_workers):
    ds = RaisingDataset(14, {3, 8}, RAISERS[kind])
    got = outcomes(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers))
    want = outcomes(tud.DataLoader(ds, batch_size=2, num_workers=num_workers))
    assert_outcomes_same(got, want, num_workers)
    assert [o[0] for o in got] == ["batch", "error", "batch", "batch", "error",
                                   "batch", "batch"]


@pytest.mark.parametrize("num_workers", [2, 3])
def test_worker_exception_message_names_the_worker_and_holds_the_traceback(num_workers):
    ds = RaisingDataset(14, {3, 8}, RAISERS["ValueError"])
    got = outcomes(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers))
    for batch in (1, 4):
        kind, typ, msg = got[batch]
        assert typ is ValueError
        lines = msg.splitlines()
        assert lines[0] == "Caught ValueError in DataLoader worker process %d." % (
            batch % num_workers)
        assert lines[1] == "Original Traceback (most recent call last):"
        assert "in __getitem__" in msg
        assert "raise self.make(i)" in msg
        assert lines[-1] == "ValueError: bad index %d" % (3 if batch == 1 else 8)


def long_message(i, size):
    """Sample i raises a ValueError of size characters, each line
    numbered, so that what is kept of it can be told."""
    raise ValueError("\n".join("line %07d" % k
                               for k in range(size // 13)))


@pytest.mark.parametrize("size, sample_bytes, whole", [
    (40_000, 0, True),        # under the 64 KiB floor
    (200_000, 0, False),      # past it: the end is kept
    (200_000, 300_000, True),  # within the batch's own room
])
def test_a_workers_long_error_message_is_cut_only_past_its_batchs_room(
        size, sample_bytes, whole):
    ds = FnDataset(2, lambda i: long_message(i, size))
    kw = {"sample_bytes": sample_bytes} if sample_bytes else {}
    with pytest.raises(ValueError) as e:
        next(iter(forkload.DataLoader(ds, batch_size=1, num_workers=2,
                                      **kw)))
    text = str(e.value)
    last = "line %07d" % (size // 13 - 1)
    assert text.rstrip().endswith(last), text[-200:]
    assert ("line 0000000" in text) == whole
    if not whole:
        assert len(text.encode()) < forkload._worker.RECORD_FLOOR


def test_keyerror_message_reads_as_text_as_in_torch():
    ds = RaisingDataset(4, {1}, RAISERS["KeyError"])
    got = outcomes(forkload.DataLoader(ds, batch_size=1, num_workers=2))
    assert got[1][1] is KeyError
    assert got[1][2].startswith("Caught KeyError in DataLoader worker process 1.\n")


def test_iteration_goes_on_after_a_worker_exception():
    ds = RaisingDataset(10, {2}, RAISERS["ValueError"])
    loader = forkload.DataLoader(ds, batch_size=1, num_workers=2)
    it = iter(loader)
    seen = [int(next(it)["i"]), int(next(it)["i"])]
    with pytest.raises(ValueError):
        next(it)
    seen += [int(b["i"]) for b in it]
    assert seen == [0, 1] + list(range(3, 10))


class RaisingGetItems(tud.Dataset):
    def __len__(self):
        return 9

    def __getitem__(self, i):
        raise AssertionError("__getitems__ is there")

    def __getitems__(self, indices):
        if 5 in indices:
            raise CustomError("no batch with 5: %s" % indices)
        return list(indices)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_getitems_exception_is_reraised_as_torch(num_workers):
    got = outcomes(forkload.DataLoader(RaisingGetItems(), batch_size=2,
                                       num_workers=num_workers))
    want = outcomes(tud.DataLoader(RaisingGetItems(), batch_size=2,
                                   num_workers=num_workers))
    assert_outcomes_same(got, want, num_workers)
    assert [o[0] for o in got] == ["batch", "batch", "error", "batch", "batch"]


def failing_collate(samples):
    if any(s["i"] == 5 for s in samples):
        raise CustomError("collate refused %s" % [s["i"] for s in samples])
    return tud.default_collate(samples)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_collate_fn_exception_is_reraised_as_torch(num_workers):
    ds = RaisingDataset(9, set(), None)
    got = outcomes(forkload.DataLoader(ds, batch_size=2, num_workers=num_workers,
                                       collate_fn=failing_collate))
    want = outcomes(tud.DataLoader(ds, batch_size=2, num_workers=num_workers,
                                   collate_fn=failing_collate))
    assert_outcomes_same(got, want, num_workers)
    assert [o[0] for o in got] == ["batch", "batch", "error", "batch", "batch"]


def failing_init_fn(worker_id):
    if worker_id == 1:
        raise CustomError("worker_init_fn of worker %d failed" % worker_id)


def test_worker_init_fn_exception_reaches_the_consumer_at_that_workers_batch():
    ds = RaisingDataset(8, set(), None)
    got = outcomes(forkload.DataLoader(ds, batch_size=1, num_workers=2,
                                       worker_init_fn=failing_init_fn), stop_at_error=True)
    want = outcomes(tud.DataLoader(ds, batch_size=1, num_workers=2,
                                   worker_init_fn=failing_init_fn), stop_at_error=True)
    assert_outcomes_same(got, want, 2)
    assert [o[0] for o in got] == ["batch", "error"]
    assert "worker_init_fn of worker 1 failed" in got[1][2]


# --------------------------------------------------------------------------
# Workers that die
# --------------------------------------------------------------------------

class DyingDataset(tud.Dataset):
    """Sample `victim` ends the worker reading it (SIGKILL or os._exit(3)),
    after writing its pid and the time to `record`; the others are the pid
    of their worker, as text.  Never in the process that made it.

    (Text, not tensors: torch 1.13 passes a tensor's descriptor through the
    sending worker's resource_sharer thread, and a batch of the dead worker
    still in the pipe then fails with ConnectionResetError or EOFError instead
    of the RuntimeError about the worker.)"""

    def __init__(self, n, victim, how, record):
        self.n = n
        self.victim = victim
        self.how = how
        self.record = str(record)
        self.main_pid = os.getpid()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.victim and os.getpid() != self.main_pid:
            with open(self.record, "w") as f:
                f.write("%d %r" % (os.getpid(), time.monotonic()))
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                os._exit(3)
        return str(os.getpid())


def chain_text(err):
    """The messages of err and the exceptions it was raised from (torch 1.13
    names the signal or the exit code in the SIGCHLD handler's RuntimeError,
    and raises "exited unexpectedly" from it)."""
    texts = []
    while err is not None:
        texts.append(str(err))
        err = err.__cause__ or err.__context__
    return "\n".join(texts)


def run_until_error(loader):
    """Iterates loader; returns (batches, the RuntimeError, when it came)."""
    got = []
    it = iter(loader)
    try:
        while True:
            got.append(next(it))
    except StopIteration:
        return got, None, None
    except RuntimeError as e:
        return got, e, time.monotonic()
    finally:
        end_iterator(it)


def test_worker_killed_by_a_signal_raises_runtime_error_naming_pid_and_signal(tmp_path):
    record = tmp_path / "victim"
    loader = forkload.DataLoader(DyingDataset(12, 5, "kill", record), num_workers=2)
    got, err, when = run_until_error(loader)
    assert err is not None, "no error after the worker was killed"
    pid, killed_at = record.read_text().split()
    msg = chain_text(err)
    assert pid in msg, msg
    assert re.search(r"SIGKILL|Killed|signal:? *9\b", msg), msg
    # torch's own sentence first, as its DataLoader raises it.
    assert str(err).startswith(
        f"DataLoader worker (pid {pid}) is killed by signal: Killed. "), msg
    assert when - float(killed_at) < PROMPT_S
    assert len(got) <= 5 and all(b != [str(os.getpid())] for b in got)


def test_worker_calling_os_exit_raises_runtime_error_naming_pid_and_status(tmp_path):
    record = tmp_path / "victim"
    loader = forkload.DataLoader(DyingDataset(12, 4, "exit", record), num_workers=2)
    got, err, when = run_until_error(loader)
    assert err is not None, "no error after the worker exited"
    pid, exited_at = record.read_text().split()
    msg = chain_text(err)
    assert pid in msg, msg
    assert re.search(r"(?<!\d)3(?!\d)", msg.replace(pid, "")), msg
    assert str(err).startswith(
        f"DataLoader worker (pid {pid}) exited unexpectedly with exit code "
        "3. "), msg
    assert when - float(exited_at) < PROMPT_S


class GatedDataset(tud.Dataset):
    """Sample 0 waits for the gate (at most `limit` s) and says whether it
    opened; the others are 1."""

    def __init__(self, n, gate, limit=30.0, waiting=None):
        self.n = n
        self.gate = gate
        self.limit = limit
        self.waiting = None if waiting is None else str(waiting)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i != 0:
            return 1
        if self.waiting is not None:
            open(self.waiting, "w").close()
        return int(self.gate.wait(self.limit))


def test_timeout_raises_timed_out(gate):
    loader = forkload.DataLoader(GatedDataset(4, gate), num_workers=1, timeout=1)
    it = iter(loader)
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 1 seconds$"):
            next(it)
        waited = time.monotonic() - start
    finally:
        gate.open()
        end_iterator(it)
        del it
    assert 0.9 <= waited < 20


# --------------------------------------------------------------------------
# Ctrl-C, in a child interpreter
# --------------------------------------------------------------------------

SIGINT_SCRIPT = r'''
import os, sys, time
import torch.utils.data as tud
import forkload

where, mode = sys.argv[1], sys.argv[2]


class Slow(tud.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        if i == 0:  # batch 0 comes; then both workers wait
            return i
        open(os.path.join(where, "waiting.%d" % os.getpid()), "w").close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return i


loader = forkload.DataLoader(Slow(), num_workers=2)
try:
    if mode == "for":
        for b in loader:
            pass
    else:
        it = iter(loader)  # held: its end is left to the interpreter's exit
        while True:
            next(it)
except KeyboardInterrupt:
    sys.stderr.write("KI-AT %r\n" % time.monotonic())
    sys.stderr.flush()
    raise
'''


def descendants(pid):
    found = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = proc_stat(int(name))
                if st is not None and st[1] == p:
                    found.append(int(name))
                    todo.append(int(name))
    return found


def start_consumer(tmp_path, mode):
    """SIGINT_SCRIPT in a session of its own, once both its workers wait
    in a sample: (the process, its descendants)."""
    script = tmp_path / "sigint.py"
    script.write_text(SIGINT_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(), start_new_session=True)
    started = wait_until(
        lambda: len([n for n in os.listdir(tmp_path) if n.startswith("waiting.")]) >= 2
        or proc.poll() is not None, 60)
    if not started or proc.poll() is not None:
        proc.kill()
        pytest.fail("the consumer's workers did not start: %r" % (proc.communicate(timeout=30),))
    family = descendants(proc.pid)
    assert family, "no worker processes"
    return proc, family


@pytest.mark.parametrize("target,mode", [("group", "for"), ("consumer", "held")],
                         ids=["ctrl_c_to_the_group", "sigint_to_the_consumer"])
def test_sigint_raises_keyboard_interrupt_promptly_and_leaves_nothing(tmp_path, target, mode):
    proc, family = start_consumer(tmp_path, mode)
    try:
        sent = time.monotonic()
        if target == "group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        exited = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = err.decode(errors="replace")
    assert "KeyboardInterrupt" in err, err
    m = re.search(r"KI-AT ([0-9.]+)", err)
    assert m, err
    print("KeyboardInterrupt after %.3f s, exit after %.3f s" % (float(m.group(1)) - sent,
                                                              exited - sent))
    assert float(m.group(1)) - sent < PROMPT_S, err
    if target == "group":
        assert exited - sent < PROMPT_S + 1.0
    assert wait_until(lambda: all(is_gone(p) for p in family), 10), \
        "processes left: %s" % [p for p in family if not is_gone(p)]
    assert not forkload_names(owner=proc.pid)


def test_workers_exit_when_the_consumer_is_killed(tmp_path):
    """A consumer killed outright (SIGKILL: no handler, no atexit) takes its
    workers with it promptly; PyTorch's poll their parent every 5 s."""
    proc, family = start_consumer(tmp_path, "for")
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert wait_until(lambda: all(is_gone(p) for p in family), PROMPT_S), \
        "processes left: %s" % [p for p in family if not is_gone(p)]


# --------------------------------------------------------------------------
# Loaders dropped mid-epoch
# --------------------------------------------------------------------------

def test_break_ends_the_worker_processes(pid_dataset):
    loader = forkload.DataLoader(pid_dataset, batch_size=2, num_workers=2)
    pids = set()
    for k, b in enumerate(loader):
        pids.update(b.tolist())
        if k == 3:
            break
    assert len(pids) == 2 and os.getpid() not in pids
    assert wait_until(lambda: all(is_gone(p, os.getpid()) for p in pids), 10)


def test_deleting_the_iterator_ends_the_worker_processes(pid_dataset):
    loader = forkload.DataLoader(pid_dataset, batch_size=2, num_workers=3)
    it = iter(loader)
    pids = set()
    for _ in range(3):
        pids.update(next(it).tolist())
    assert len(pids) == 3
    del it
    assert wait_until(lambda: all(is_gone(p, os.getpid()) for p in pids), 10)


def test_persistent_workers_live_until_the_loader_is_deleted():
    loader = forkload.DataLoader(PidDataset(12), batch_size=2, num_workers=2,
                                 persistent_workers=True)
    first = {p for b in loader for p in b.tolist()}
    assert not any(is_gone(p, os.getpid()) for p in first)
    second = set()
    for k, b in enumerate(loader):
        second.update(b.tolist())
        if k == 2:
            break
    assert second == first  # the same processes
    del loader
    assert wait_until(lambda: all(is_gone(p, os.getpid()) for p in first), 10)


# --------------------------------------------------------------------------
# The GIL while waiting
# --------------------------------------------------------------------------

def test_gil_is_released_while_the_consumer_waits(tmp_path, gate):
    """Sample 0 waits for a gate that only a Python thread of this process
    opens, after counting, while the consumer waits for that sample: with the
    GIL held the thread cannot count and the sample says the gate never
    opened (after 30 s)."""
    waiting = tmp_path / "waiting"
    loader = forkload.DataLoader(GatedDataset(3, gate, limit=30.0, waiting=waiting),
                                 batch_size=1, num_workers=1)
    counted = []

    def count():
        while not waiting.exists():
            time.sleep(0.001)
        n = 0
        while n < 3_000_000:
            n += 1
        counted.append(n)
        gate.open()

    it = iter(loader)
    thread = threading.Thread(target=count)
    thread.start()
    try:
        first = next(it)
    finally:
        gate.open()
        thread.join(60)
        end_iterator(it)
        del it
    assert counted == [3_000_000]
    assert first.tolist() == [1], "the gate opened only by its time limit"


def _deep_dir(root, part):
    """A folder of about 4 KiB of UTF-8 under root, each folder made."""
    path = str(root)
    while len(os.fsencode(path)) + len(os.fsencode(part)) < 4000:
        path = os.path.join(path, part)
    os.makedirs(path)
    return path


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_4_kib_path_in_a_native_datasets_error_keeps_its_cause(
        tmp_path, num_workers):
    # Multibyte names: a message cut inside a character would not be text.
    deep = _deep_dir(tmp_path, "dossier-très-long-語")
    shard = os.path.join(deep, "train_000.bin")
    with open(shard, "wb") as f:
        f.write(bytes([7]) + bytes(1023))
    with pytest.raises(ValueError) as made:
        forkload.datasets.Tokens([shard], 8)
    assert str(made.value).endswith(
        "/train_000.bin: magic 7, not llm.c's 20240520: not a token shard")
    tar = os.path.join(deep, "shard.tar")
    with tarfile.open(tar, "w") as t:
        for name, data in (("a.bin", b"A"), ("b.bin", b"B" * 2000)):
            info = tarfile.TarInfo("é" * 60 + "/" + name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    ds = forkload.datasets.WebDataset(
        ["pipe:head -c 2048 '%s'; exit 3" % tar], [("bin", 4096)])
    with pytest.raises(forkload.Error) as failed:
        list(forkload.DataLoader(ds, batch_size=1, num_workers=num_workers))
    message = str(failed.value)
    assert "..." in message
    assert message.startswith("forkload: batch 0 (worker 0): ")
    assert message.endswith("the tar ends, but the command failed: exit 3 "
                            "(sample 1, 2048 bytes in) (FL_EDATASET)")
