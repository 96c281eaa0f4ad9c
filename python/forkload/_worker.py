"""What forkload's workers run in Python, once per worker (not per batch):
seeding as PyTorch's worker loop does, worker_init_fn, get_worker_info();
and the records of exceptions raised in a worker, re-raised in the consumer
as PyTorch's ExceptionWrapper does."""

import collections.abc
import copy
import pickle
import random
import re
import signal
import traceback

try:
    import numpy as _np
except ImportError:
    _np = None
try:
    import torch as _torch
except ImportError:
    _torch = None


class Leaf(tuple):
    """(offset, dtype, shape, kind): an array of a batch's blob."""

    __slots__ = ()


class WorkerInfo:
    """What get_worker_info() returns in a worker where torch is missing:
    id, num_workers, seed and dataset, as torch 1.13's WorkerInfo.  With
    torch, a worker's WorkerInfo is the installed torch's own (torch 2's
    is a frozen dataclass that also has rng and worker_method)."""

    __initialized = False

    def __init__(self, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)
        self.__keys = tuple(kwargs.keys())
        self.__initialized = True

    def __setattr__(self, key, val):
        if self.__initialized:
            raise RuntimeError(
                f"Cannot assign attributes to {type(self).__name__} objects")
        return super().__setattr__(key, val)

    def __repr__(self):
        items = ", ".join(f"{k}={getattr(self, k)}" for k in self.__keys)
        return f"{type(self).__name__}({items})"


_worker_info = None


def get_worker_info():
    """In a worker of forkload.DataLoader: its WorkerInfo (id, num_workers,
    seed, dataset); None in the main process."""
    return _worker_info


def numpy_seed(base_seed, worker_id):
    """The four 32-bit words PyTorch seeds numpy.random with in a worker: a
    SeedSequence-style hash of (worker_id, base_seed), as torch's
    _generate_state computes it."""
    mask = 0xFFFFFFFF
    const_a = 0x43B0D7E5

    def hashed(value):
        nonlocal const_a
        value = (value ^ const_a) & mask
        const_a = (const_a * 0x931E8875) & mask
        value = (value * const_a) & mask
        return (value ^ (value >> 16)) & mask

    def mix(x, y):
        r = ((0xCA01F9DD * x) - (0x4973F715 * y)) & mask
        return (r ^ (r >> 16)) & mask

    pool = [hashed(v) for v in
            (worker_id, base_seed & mask, base_seed >> 32, 0)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hashed(pool[src]))
    const_b = 0x8B51F9DD
    state = []
    for v in pool:
        v = (v ^ const_b) & mask
        const_b = (const_b * 0x58F38DED) & mask
        v = (v * const_b) & mask
        state.append((v ^ (v >> 16)) & mask)
    return state


def setup(num_workers, dataset, worker_init_fn, shard, worker_id, base_seed):
    """A worker's start, in PyTorch's order: the thread's name (torch 2's),
    one thread for torch, seeds, WorkerInfo (the installed torch's), a
    DataPipe's sharding (shard: torch.distributed's world size and rank,
    None for other datasets), then worker_init_fn."""
    global _worker_info
    seed = base_seed + worker_id
    # torch 2 names its workers' thread (ps and top show "pt_data_worker");
    # torch 1.13 leaves the parent's name.
    name_thread = getattr(getattr(_torch, "multiprocessing", None),
                          "_set_thread_name", None)
    if name_thread is not None:
        name_thread("pt_data_worker")
    random.seed(seed)
    if _torch is not None:
        # One thread for torch: the parent's OpenMP threads are not in
        # this forked child, and a parallel region would wait for them
        # forever.
        _torch.set_num_threads(1)
        _torch.manual_seed(seed)
    if _np is not None:
        _np.random.seed(numpy_seed(base_seed, worker_id))
    if _torch is not None:
        # Datasets written for torch shard with torch's get_worker_info(),
        # and forkload's returns the same object, of the installed torch's
        # class.
        from torch.utils.data._utils import worker as torch_worker
        _worker_info = torch_worker._worker_info = torch_worker.WorkerInfo(
            id=worker_id, num_workers=num_workers, seed=seed,
            dataset=dataset)
    else:
        _worker_info = WorkerInfo(id=worker_id, num_workers=num_workers,
                                  seed=seed, dataset=dataset)
    if shard is not None:
        # torch's _sharding_worker_init_fn: across the processes first,
        # then across their workers.
        from torch.utils.data import graph_settings
        world_size, rank = shard
        graph_settings.apply_sharding(dataset, num_workers * world_size,
                                      worker_id * world_size + rank)
    if worker_init_fn is not None:
        worker_init_fn(worker_id)


def no_fetcher():
    """What torch's worker loop raises at a task when its worker_init_fn
    (or an iterable's iter()) raised: its local fetcher was never made,
    an UnboundLocalError in this interpreter's words."""
    del fetcher  # noqa: F821  (never bound: the error is the point)


def rng_state():
    """The generators a worker seeds, random's, numpy.random's and torch's,
    as bytes: what a respawned worker takes to redo a batch as its
    predecessor began it."""
    return pickle.dumps((
        random.getstate(),
        None if _np is None else _np.random.get_state(),
        None if _torch is None else
        _torch.get_rng_state().numpy().tobytes()), pickle.HIGHEST_PROTOCOL)


def set_rng_state(state):
    r, n, t = pickle.loads(state)
    random.setstate(r)
    if n is not None:
        _np.random.set_state(n)
    if t is not None:
        _torch.set_rng_state(_torch.frombuffer(bytearray(t),
                                               dtype=_torch.uint8))


def like(elem, values, template=False):
    """The container of elem's type over values (a dict, or a list), as
    the installed torch's default_collate and default_convert make it:
    torch 2 copies a mutable mapping or sequence and sets the values in the
    copy (a defaultdict keeps its default_factory, a subclass its
    attributes and constructor), torch 1.13 calls type(elem)(values); both
    fall back to values where that raises TypeError.  In the consumer,
    elem is a skeleton's template, which serves again for each batch of the
    same skeleton: its copy is a deep one, so that no batch shares the
    template's state (a mapping's own dict) with another."""
    if isinstance(values, dict):
        mutable = isinstance(elem, collections.abc.MutableMapping)
    else:
        mutable = isinstance(elem, collections.abc.MutableSequence)
    try:
        if mutable and _torch_copies():
            clone = copy.deepcopy(elem) if template else copy.copy(elem)
            if isinstance(values, dict):
                clone.update(values)
            else:
                for i, v in enumerate(values):
                    clone[i] = v
            return clone
        return type(elem)(values)
    except TypeError:
        return values


_copies = None


def _torch_copies():
    """Whether the installed torch's default_collate fills a copy of a
    mutable mapping (torch 2) or calls its type (torch 1.13): asked of
    torch once, on a dict subclass with an attribute."""
    global _copies
    if _copies is None:
        _copies = False
        if _torch is not None:
            from torch.utils.data._utils.collate import default_collate

            class Probe(dict):
                pass

            probe = Probe(k=0)
            probe.kept = True
            try:
                _copies = getattr(default_collate([probe]), "kept", False) \
                    is True
            except Exception:  # noqa: BLE001  (a torch that cannot say)
                pass
    return _copies


def torch_collate(samples):
    """A column of a batch that forkload's C collation could not write
    (a dtype or layout it does not know, samples that do not stack):
    the installed torch's default_collate makes it or refuses it."""
    from torch.utils.data._utils.collate import default_collate
    return carried(default_collate(list(samples)))


def torch_convert(obj):
    """default_convert's, for an array the C path could not write."""
    from torch.utils.data._utils.collate import default_convert
    return carried(default_convert(obj))


def carried(obj):
    """A tensor made by torch_collate or torch_convert, as the batch's
    skeleton carries it: its bytes, pickled (torch 2.13's own pickling of
    a uint16 tensor cannot be loaded back, torch 1.13's of a complex32 one
    cannot be made)."""
    if isinstance(obj, _torch.Tensor) and obj.layout == _torch.strided \
            and not getattr(obj, "is_nested", False):
        return _TensorBytes(obj)
    return obj


class _TensorBytes:
    """Pickled as the bytes, dtype and shape of a CPU tensor, unpickled as
    that tensor (tensor_from_bytes)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor

    def __reduce__(self):
        t = self.tensor.detach().contiguous()
        raw = t.reshape(-1).view(_torch.uint8).numpy().tobytes()
        return (tensor_from_bytes,
                (str(t.dtype).replace("torch.", ""), tuple(t.shape), raw))


def tensor_from_bytes(dtype, shape, raw):
    dtype = getattr(_torch, dtype)
    if not raw:
        return _torch.empty(shape, dtype=dtype)
    return _torch.frombuffer(bytearray(raw), dtype=_torch.uint8).view(
        dtype).reshape(shape)


# Exceptions raised in the consumer itself (num_workers 0), kept whole
# until the consumer raises them: they never leave the process.
_inline = {}


# An error record is cut only past its batch's room, and never below
# 64 KiB (its segment grows for it as for a batch), less the slack the
# blob's header and alignment take.
RECORD_FLOOR = 1 << 16
RECORD_SLACK = 512


def wrap(exc, worker_id, room=0):
    """The record of exc for the blob of a batch of room bytes, pickled,
    cut to fit."""
    max_bytes = max(room, RECORD_FLOOR) - RECORD_SLACK
    if worker_id < 0:
        key = id(exc)
        _inline[key] = exc
        return pickle.dumps(("inline", key))
    if exc.__traceback__ is None:  # raised by forkload's C collation
        text = ("Traceback (most recent call last):\n"
                "  (forkload's default_collate, in C)\n" +
                "".join(traceback.format_exception_only(type(exc), exc)))
    else:
        text = "".join(traceback.format_exception(type(exc), exc,
                                                  exc.__traceback__))
    where = f"in DataLoader worker process {worker_id}"
    exc_type = type(exc)
    try:
        pickle.dumps(exc_type)
    except Exception:
        exc_type = RuntimeError
    while True:
        rec = pickle.dumps(("worker", exc_type, text, where))
        if len(rec) <= max_bytes or len(text) < 64:
            return rec
        text = "...\n" + text[len(text) // 2:]


class KeyErrorMessage(str):
    """A KeyError's message shown as it is, not as repr() of a key."""

    def __repr__(self):
        return self


def reraise(rec):
    """Raise what a worker raised, as PyTorch's ExceptionWrapper.reraise:
    the installed torch's own, where there is one (torch 2 raises
    RuntimeError for an exception type that cannot be built from the
    message for any reason, torch 1.13 only for a TypeError)."""
    if rec[0] == "inline":
        exc = _inline.pop(rec[1])
        raise exc
    _, exc_type, text, where = rec
    wrapper = _torch_wrapper(exc_type, text, where)
    if wrapper is not None:
        wrapper.reraise()
    msg = f"Caught {exc_type.__name__} {where}.\nOriginal {text}"
    if exc_type is KeyError:
        msg = KeyErrorMessage(msg)
    elif getattr(exc_type, "message", None):
        raise exc_type(message=msg)
    try:
        exception = exc_type(msg)
    except TypeError:
        raise RuntimeError(msg) from None
    raise exception


def _torch_wrapper(exc_type, text, where):
    """torch's ExceptionWrapper for a worker's record, made as the worker
    loop makes it from sys.exc_info(): exc_type, exc_msg (the traceback's
    text) and where; None without torch."""
    try:
        from torch._utils import ExceptionWrapper
        wrapper = object.__new__(ExceptionWrapper)
        wrapper.exc_type = exc_type
        wrapper.exc_msg = text
        wrapper.where = where
    except (ImportError, AttributeError, TypeError):
        return None
    return wrapper


class Error(RuntimeError):
    """An error of libforkload: code is its (negative) code, name its
    FL_E* name."""

    # The name users catch it by, in tracebacks and pickles alike.
    __module__ = "forkload"

    def __init__(self, message, code=0, name=""):
        super().__init__(message)
        self.code = code
        self.name = name


# libforkload's sentence for a worker's death (lib/worker.c), read back
# for torch's own words.
_DEATH = re.compile(r"worker \d+ \(pid (\d+)\) (?:was killed by signal "
                    r"(\d+)|exited unexpectedly with status (\d+))")


def _torch_death(why):
    """What torch's DataLoader says of the worker death in why ('' where
    why tells none): its words, which a user's code may look for."""
    m = _DEATH.search(why)
    if m is None:
        return ""
    pid, sig, status = m.groups()
    if sig is not None:
        try:
            what = signal.strsignal(int(sig)) or "Unknown signal"
        except ValueError:
            what = "Unknown signal"
        text = f"DataLoader worker (pid {pid}) is killed by signal: {what}. "
        if int(sig) == signal.SIGBUS:
            text += ("It is possible that dataloader's workers are out of "
                     "shared memory. Please try to raise your shared memory "
                     "limit. ")
        return text
    return (f"DataLoader worker (pid {pid}) exited unexpectedly with exit "
            f"code {status}. Details are lost due to multiprocessing. "
            "Rerunning with num_workers=0 may give better error trace. ")


def error(code, why, name):
    """The exception for libforkload's code and sentence; a worker's death
    opens with torch's sentence for it."""
    lead = _torch_death(why) if name == "FL_EWORKER" else ""
    return Error(f"{lead}forkload: {why} ({name})", code, name)
