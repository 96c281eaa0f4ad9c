"""forkload.DataLoader: torch.utils.data.DataLoader's arguments, checks and
random draws, in Python; the batches themselves come from libforkload's
workers through forkload._forkload.Loader (C)."""

import functools
import inspect
import math
import os
import threading
import types
import typing
import warnings
import weakref

from forkload import _forkload, _worker

try:
    import torch
    from torch.utils.data import (BatchSampler, DistributedSampler,
                                  IterableDataset, RandomSampler,
                                  SequentialSampler, SubsetRandomSampler,
                                  WeightedRandomSampler)
    # From the module that defines it: code that patches forkload's in
    # for torch.utils.data.DataLoader (as some users and frameworks do)
    # leaves this one torch's, which the checks below run.
    from torch.utils.data.dataloader import DataLoader as _TorchDataLoader
    from torch.utils.data._utils.collate import (
        default_collate as _default_collate,
        default_convert as _default_convert)
except ImportError:  # numpy arrays, without torch's samplers
    torch = None
    _default_collate = _default_convert = None
    BatchSampler = DistributedSampler = RandomSampler = None
    SequentialSampler = IterableDataset = None
    SubsetRandomSampler = WeightedRandomSampler = None
    _TorchDataLoader = object
try:
    from torch.utils.data import IterDataPipe, MapDataPipe, graph_settings
    from torch.utils.data.datapipes.datapipe import (
        _IterDataPipeSerializationWrapper, _MapDataPipeSerializationWrapper)
except ImportError:  # no torch, or one without DataPipes
    IterDataPipe = MapDataPipe = None

# torch's _DatasetKind values, which code written for torch's loader reads
# from its _dataset_kind.
_MAP, _ITERABLE = 0, 1

__all__ = ["DataLoader", "get_worker_info"]

get_worker_info = _worker.get_worker_info


def _torch_parameters():
    """The keyword parameters of the installed torch's DataLoader, with
    their defaults: where torch versions differ (prefetch_factor's default
    is 2 in torch 1.13 and None in torch 2; in_order is torch 2.6's), the
    installed torch's are followed."""
    if torch is None:
        return {}
    try:
        sig = inspect.signature(_TorchDataLoader.__init__)
    except (TypeError, ValueError):
        return {}
    return {name: p.default for name, p in sig.parameters.items()}


_TORCH_PARAMETERS = _torch_parameters()
# None where torch is missing: forkload's own default, torch 2's.
_PREFETCH_DEFAULT = _TORCH_PARAMETERS.get("prefetch_factor")


def _torch_refusal(dataset, kwargs):
    """What the installed torch's DataLoader raises for these arguments, or
    None where it takes them: forkload's argument checks raise torch's
    own exception, with its message, whatever the version."""
    if torch is None:
        return None
    kwargs = {k: v for k, v in kwargs.items() if k in _TORCH_PARAMETERS}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _TorchDataLoader(dataset, **kwargs)
    except Exception as e:  # noqa: BLE001  (torch's, whatever it is)
        e.__traceback__ = None
        return e
    return None


def _torch_iter_refusal(loader):
    """What iter() of the installed torch's DataLoader raises for a timeout
    without workers, or None.  Its single-process iterator is made over
    this loader, so that what it does before it asserts is done too: an
    IterDataPipe's seed and the base seed drawn from the loader's
    generator, iter() of the sampler."""
    if torch is None:
        return None
    from torch.utils.data import dataloader as tdl
    try:
        tdl._SingleProcessDataLoaderIter(loader)
    except AssertionError as e:
        e.__traceback__ = None
        return e
    return None


def _check_worker_number(loader):
    """torch's warning where num_workers exceeds the CPUs this process may
    use, in the installed torch's words (its DataLoader warns at __init__
    and at each iter() that starts workers)."""
    check = getattr(_TorchDataLoader,
                    "check_worker_number_rationality", None) \
        if torch is not None else None
    if check is not None and loader.num_workers:
        check(loader)

# Every Loader alive, closed at exit: their workers are reaped, not left
# to the kernel's parent-death signal.
_live = weakref.WeakSet()
_live_lock = threading.Lock()


def _close_all():
    with _live_lock:
        loaders = list(_live)
    for loader in loaders:
        loader.close()


import atexit  # noqa: E402

atexit.register(_close_all)


# What pins batches for a GPU: torch.cuda, or in a test an object with the
# same is_available(), cudart() (cudaHostRegister, cudaHostUnregister) and
# current_stream().record_event() (an event with query() and
# synchronize()), put here in its place.
_cuda = torch.cuda if torch is not None else None


class _Pinner:
    """pin_memory's engine, which the C Loader calls: each shared segment
    is page-locked where it lies, once (cudaHostRegister), before its first
    batch is handed out, and unlocked before it is unmapped; and when the
    last view of a batch is gone, an event recorded on the current stream
    tells when a copy made from it with ``non_blocking=True`` has read it:
    only then does the segment go back to be refilled."""

    def __init__(self, cuda):
        self._cuda = cuda
        self._rt = cuda.cudart()

    def _check(self, what, err):
        code = int(err)
        if code != 0:
            try:
                name = self._rt.cudaGetErrorString(err)
            except Exception:  # an older cudart, or a stand-in
                name = "error %d" % code
            raise RuntimeError(f"{what} failed: {name}")

    def register(self, ptr, size):
        # cudaHostRegisterDefault: the segment stays where it is.
        self._check(f"cudaHostRegister({ptr:#x}, {size})",
                    self._rt.cudaHostRegister(ptr, size, 0))

    def unregister(self, ptr, size):
        self._check(f"cudaHostUnregister({ptr:#x})",
                    self._rt.cudaHostUnregister(ptr))

    def record(self):
        return self._cuda.current_stream().record_event()


def _torch_pin_plan(loader):
    """What the installed torch's _BaseDataLoaderIter decides at iter() for
    this loader's pin_memory and pin_memory_device, with its warnings:
    (pin, device).  torch 1.13 pins for CUDA where it is available and for
    any pin_memory_device it is given, and warns of a device given without
    pin_memory; torch 2 pins for the current accelerator, warns where there
    is none and where a pin_memory_device (deprecated) is given.  Its own
    __init__ is run on a stand-in of the loader, with a generator of its
    own for the base seed it draws; None where that cannot be done."""
    try:
        from torch.utils.data import dataloader as tdl
        base = tdl._BaseDataLoaderIter
    except (ImportError, AttributeError):
        return None
    stand_in = types.SimpleNamespace(
        dataset=None, _dataset_kind=tdl._DatasetKind.Map,
        _IterableDataset_len_called=None, _auto_collation=False,
        drop_last=False, _index_sampler=(), num_workers=loader.num_workers,
        prefetch_factor=loader.prefetch_factor, pin_memory=loader.pin_memory,
        pin_memory_device=loader.pin_memory_device, timeout=0,
        collate_fn=None, generator=torch.Generator(),
        persistent_workers=False, in_order=loader.in_order,
        worker_init_fn=None, multiprocessing_context=None)
    it = base.__new__(base)
    try:
        base.__init__(it, stand_in)
        return bool(it._pin_memory), it._pin_memory_device
    except AttributeError:  # a torch whose iterator needs more
        return None


def _pin_mode(loader):
    """What torch's _BaseDataLoaderIter decides at iter(), and how forkload
    does it: (None, None), nothing pinned; ('register', None), the segments
    page-locked where they are (CUDA); ('copy', device), torch's own
    pin_memory copy, for another device, or for CUDA where the stand-in
    for torch.cuda (_cuda) says there is none (torch 1.13, given
    pin_memory_device='cuda' without CUDA: each batch then fails as
    torch's)."""
    if torch is None:
        if loader.pin_memory:
            warnings.warn("'pin_memory' argument is set as true but no "
                          "accelerator is found, then device pinned memory "
                          "won't be used.")
        return None, None
    plan = _torch_pin_plan(loader)
    if plan is None:  # torch's decision in short: CUDA's pinned memory
        available = _cuda is not None and _cuda.is_available()
        plan = (loader.pin_memory and available, None)
    pin, device = plan
    if not pin:
        return None, None
    cuda = device is None or device == "cuda" or device.startswith("cuda:")
    if cuda and _cuda is not None and _cuda.is_available():
        return "register", None
    return "copy", device


def _warn_past_len(it, batch):
    """torch's warning when an IterableDataset's iterator yields more
    batches than len(dataset) said (after len(loader) was called), in the
    installed torch's words: its own _BaseDataLoaderIter.__next__ is run on
    a stand-in that hands it this batch."""
    try:
        from torch.utils.data import dataloader as tdl
        base = tdl._BaseDataLoaderIter
        stand_in = base.__new__(base)
        stand_in.__dict__.update(
            _sampler_iter=(), _next_data=lambda: batch,
            _num_yielded=it._yielded - 1,
            _dataset_kind=tdl._DatasetKind.Iterable,
            _IterableDataset_len_called=it._len_called,
            _num_workers=it._num_workers, _dataset=it._dataset,
            _profile_name="enumerate(DataLoader)#_Iterator.__next__")
    except (ImportError, AttributeError):
        stand_in = None
    if stand_in is not None:
        try:
            base.__next__(stand_in)
            return
        except AttributeError:  # a torch whose iterator needs more
            pass
    msg = (f"Length of IterableDataset {it._dataset} was reported to be "
           f"{it._len_called}(when accessing len(dataloader)), but "
           f"{it._yielded} samples have been fetched. ")
    if it._num_workers > 0:
        msg += ("For multiprocessing data-loading, this could be caused by "
                "not properly configuring the IterableDataset replica at "
                "each worker. Please see https://pytorch.org/docs/stable/"
                "data.html#torch.utils.data.IterableDataset for examples.")
    warnings.warn(msg, stacklevel=3)


def _draw_seed(generator):
    """One int64 draw, as torch draws its base and sampler seeds."""
    if torch is None:
        import random
        return random.getrandbits(63)
    return int(torch.empty((), dtype=torch.int64).random_(
        generator=generator).item())


def _lazy_generator(index_sampler):
    """The generator of its own that a sampler of torch's (RandomSampler,
    SubsetRandomSampler, WeightedRandomSampler, alone or in torch's
    BatchSampler) draws from as it is iterated, or None: one whose
    iteration is a function of that generator's state alone."""
    if torch is None:
        return None
    s = index_sampler
    if type(s) is BatchSampler:
        s = s.sampler
    if type(s) in (RandomSampler, SubsetRandomSampler,
                   WeightedRandomSampler):
        return s.generator
    return None


def _native_of(dataset):
    """The _forkload.NativeDataset of a forkload.datasets dataset, or
    None for a Python dataset."""
    native = getattr(dataset, "_native", None)
    return native if isinstance(native, _forkload.NativeDataset) else None


def _is_pipe(dataset, kind="any"):
    """Whether dataset is a DataPipe of that kind ("iter", "map", or
    "any"), which torch's loader seeds, shuffles and shards itself."""
    if IterDataPipe is None:
        return False
    types = {"iter": IterDataPipe, "map": MapDataPipe,
             "any": (IterDataPipe, MapDataPipe)}[kind]
    return isinstance(dataset, types)


def _distributed():
    """torch.distributed's (world size, rank), or (1, 0) outside it: the
    sharding of a DataPipe across processes, as torch's iterator reads
    it."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _is_iterable_dataset(dataset):
    if IterableDataset is not None:
        return isinstance(dataset, IterableDataset)
    return not hasattr(dataset, "__getitem__") and hasattr(dataset,
                                                           "__iter__")


class _InfiniteConstantSampler:
    """An IterableDataset's sampler, as torch's: None forever."""

    def __iter__(self):
        while True:
            yield None


class _SimpleBatchSampler:
    """torch's BatchSampler where torch is missing."""

    def __init__(self, sampler, batch_size, drop_last):
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size


# DataLoader[T], as torch's is generic (Generic[T_co]).
_T_co = typing.TypeVar("_T_co", covariant=True)


class DataLoader(_TorchDataLoader[_T_co] if torch is not None else
                 typing.Generic[_T_co]):
    r"""Batches of a dataset, made by forked workers in shared memory.

    A drop-in for :class:`torch.utils.data.DataLoader`: it accepts the same
    arguments with the same defaults, refuses what torch refuses with the same
    exceptions, and yields the same batches, so moving a training loop over
    takes one changed import::

        # was: from torch.utils.data import DataLoader
        from forkload import DataLoader

    The batches match torch's one for one under a given ``torch.manual_seed``
    (or :attr:`generator`): forkload takes its random numbers from torch's
    generator in the order torch takes them, seeds ``random``, ``torch`` and
    ``numpy.random`` in each worker the way PyTorch does, gives batch ``i`` of
    a map-style dataset to worker ``i % num_workers``, and merges the streams
    of an :class:`~torch.utils.data.IterableDataset`'s workers in PyTorch's
    order.

    Each worker is a forked copy of the calling process. It runs the
    dataset's Python code for a whole batch, collates it and writes the
    arrays directly into a shared memory segment; the tensors the caller gets
    are views of that segment, so no batch is pickled or copied in transit. A
    segment is reused only once every view of its batch is gone, so a batch
    you keep (``batches = list(loader)``) keeps its values.

    ``man forkload.DataLoader`` (``man ./man/forkload.DataLoader.3`` in the
    source tree) has the details. The package carries type stubs
    (``py.typed``) for mypy and other type checkers.

    Args:
        dataset (Dataset): where the samples come from: a map-style dataset
            (``__getitem__`` and ``__len__``; its ``__getitems__`` is used
            when it has one) or an :class:`~torch.utils.data.IterableDataset`.
            Every worker reads its own copy, the one it inherited at the fork.
        batch_size (int, optional): samples per batch; ``None`` hands the
            samples out one at a time, not batched. (default: ``1``)
        shuffle (bool, optional): ``True`` visits the samples in a new random
            order each epoch, drawn as :attr:`shuffle_algorithm` says.
            (default: ``False``)
        sampler (Sampler or Iterable, optional): the order of the indices:
            any iterable of them with a ``__len__``. It cannot be combined
            with :attr:`shuffle`.
        batch_sampler (Sampler or Iterable, optional): whole batches of
            indices (lists) rather than single ones. With it,
            :attr:`batch_size`, :attr:`shuffle`, :attr:`sampler` and
            :attr:`drop_last` must stay at their defaults.
        num_workers (int, optional): the number of worker processes to fork.
            With ``0`` the calling process reads and collates every batch
            itself; the batches and their order do not change.
            (default: ``0``)
        collate_fn (Callable, optional): makes one batch of a list of
            samples. With ``None`` (the attribute is then torch's
            ``default_collate``, or ``default_convert`` without batching, as
            torch sets it) the worker collates as ``default_collate``
            would (its structure, its dtypes), writing straight into the
            batch's shared segment. A function of yours runs in the worker
            as well, and what it returns must be picklable to reach you.
        pin_memory (bool, optional): with ``True`` and CUDA available, the
            tensors handed out lie in page-locked memory (``is_pinned()``),
            so that ``.to('cuda', non_blocking=True)`` overlaps the copy with
            compute. Nothing is copied for it: each shared segment is
            registered in place with ``cudaHostRegister``, once. When the
            last view of a batch is dropped, forkload records an event on the
            current CUDA stream and refills the segment only after that event
            has completed, so a host tensor may be dropped as soon as its
            ``non_blocking`` copy is queued. Whether a batch is pinned, and
            what ``iter()`` warns, follow the installed torch: torch 2 warns
            where it finds no accelerator, torch 1.13 is silent.
            (default: ``False``)
        drop_last (bool, optional): ``True`` leaves out the last batch of an
            epoch when fewer than :attr:`batch_size` samples remain for it;
            ``False`` hands it out short. (default: ``False``)
        timeout (numeric, optional): the longest wait, in seconds, for a
            batch from the workers, after which ``RuntimeError('DataLoader
            timed out after N seconds')`` is raised; ``0`` waits without a
            limit. A negative value is refused. (default: ``0``)
        worker_init_fn (Callable, optional): called in each worker with its
            id, from ``0`` to ``num_workers - 1``, once the worker is seeded
            and before it reads a sample. The workers are forked, so a lambda
            or a closure will do. (default: ``None``)
        multiprocessing_context (str or multiprocessing.context.BaseContext,
            optional): accepted as ``None``, ``'fork'`` or a fork context,
            since forkload always forks its workers; what torch refuses is
            torch's exception (``TypeError`` for a value neither a name nor
            a context); ``'spawn'`` and ``'forkserver'`` raise
            ``ValueError``.
            (default: ``None``)
        generator (torch.Generator, optional): the generator that draws the
            workers' ``base_seed`` and the shuffled order, instead of torch's
            global one. (default: ``None``)
        prefetch_factor (int, optional, keyword-only arg): the batches each
            worker is given ahead of the caller, ``num_workers *
            prefetch_factor`` in all. The default and the values refused are
            the installed torch's: torch 2's default is ``None`` (``2`` with
            workers), and only ``None`` goes without workers; torch 1.13's
            is ``2``, and only ``2`` goes without workers.
            (default: ``None``; ``2`` with torch 1.13)
        persistent_workers (bool, optional): ``True`` keeps the same workers,
            and their copies of the dataset, from one epoch to the next
            instead of forking new ones at each ``iter()``. It needs
            ``num_workers > 0``. As torch's, the iterator keeps what it
            needs, not the loader: ``for b in DataLoader(...)`` with no
            name kept for the loader gets every batch, and ``del loader``
            ends the workers unless the iterator is held elsewhere.
            (default: ``False``)
        pin_memory_device (str, optional): taken as the installed torch
            takes it: torch 1.13 pins for this device (and warns when
            :attr:`pin_memory` is off), torch 2 warns that the argument is
            deprecated and pins for its current accelerator. CUDA is pinned
            in place as above; another device goes through torch's own copy
            (``Tensor.pin_memory(device)``). (default: ``''``)
        in_order (bool, optional): ``True`` hands the batches out in the
            sampler's order; ``False`` lets a batch that is ready go out
            before an earlier one that is not. It matters only with workers.
            torch has it from 2.6; forkload takes it with any torch.
            (default: ``True``)
        sharing (str, optional, keyword-only arg, forkload's own): how a
            batch's shared segment reaches the caller. ``'fd'``: its file
            descriptor is passed over a Unix socket; the segment is a memfd,
            never named in ``/dev/shm`` nor charged to it, and the batches
            held keep at most the prefetch window's descriptors (fewer at the
            open-file limit). ``'file_system'``: it is named in ``/dev/shm``
            until the caller opens it and removes the name; no descriptor is
            held. ``torch.multiprocessing.set_sharing_strategy`` plays no
            part. (default: ``'fd'``)
        shuffle_algorithm (str, optional, keyword-only arg, forkload's own):
            the order ``shuffle=True`` draws. ``'torch'``: the permutation
            ``torch.randperm`` draws, bit for bit (8 bytes a sample).
            ``'bijection'``: no memory for the order, a permutation of the
            same kind but not torch's. (default: ``'torch'``)
        sample_bytes (int, optional, keyword-only arg, forkload's own): a
            hint: the bytes one sample takes in a batch's first segments,
            all its arrays together as collated. ``None``: 4 KiB, and no
            sample is read to measure it. A batch larger than its segment
            moves to a larger one in its worker, whatever its size, which
            keeps it while the batches need it; one that cannot
            fit anywhere (memory, ``/dev/shm``, ``ulimit -f``) raises at its
            position, saying its size and the limit, and the next batch
            comes. (default: ``None``)
        max_worker_restarts (int, optional, keyword-only arg, forkload's
            own): how many times, over the loader's life, a worker that dies
            (the OOM killer, a stray ``kill``) is forked again instead of
            ending the epoch with torch's error. A respawned worker gets the
            seeds and :attr:`worker_init_fn` a fresh one gets, redoes the
            batches its predecessor left unfinished, and the epoch goes on:
            every batch once, in order; each restart is a
            ``RuntimeWarning`` naming the worker, how it died, the batch and
            the new pid. With a map-style dataset the
            generators' states (``torch``'s, ``numpy.random``'s,
            ``random``'s) after each batch are kept in shared memory, and a
            redone batch starts from the state its predecessor began it in,
            so the run is bit for bit the run without the death, as long as
            the dataset keeps no random state of its own that changes per
            sample (a ``numpy.random.Generator`` or ``torch.Generator`` it
            holds, a counter, a cache it fills). An iterable dataset's
            worker cannot be resumed mid-stream: the new one reads its
            stream again from the start, skipping what was handed out, which
            gives the same batches where the stream reads the same again
            (files, a seeded generator), and other samples where it does not
            (a socket, a queue). A batch whose filling kills its worker twice (a poison
            sample) is a :class:`forkload.Error` at its position naming its
            samples, and the next batch comes. (default: ``0``: a death is
            the error, as in torch)
        faults (str, optional, keyword-only arg, forkload's own): faults
            made to happen in the workers, for testing that a training
            loop copes: a comma-separated list where ``kill@N`` makes the
            worker filling batch ``N`` (its position in the epoch, from 0)
            SIGKILL itself before it fills it, ``exit@N`` exit with status 1,
            ``enospc@N`` fails the new shared segment batch ``N`` makes (if
            it makes one) as a full ``/dev/shm`` would, and ``emfile@N``
            drops the descriptor of the new segment batch ``N`` brings as the
            open-file limit would; each strikes its batch's first try in
            every epoch. ``kill=P`` (and ``exit``, ``enospc``, ``emfile``,
            ``delay=P:MS``) strike each batch with probability ``P``,
            ``seed=S`` choosing which. A death is the loader's error, as a
            real one is; a lost segment or descriptor is made again and
            changes no batch. ``None`` reads ``FORKLOAD_FAULTS`` from the
            environment. ``stats()["faults_injected"]`` counts those that
            struck. (default: ``None``)
        tensor_type (str, optional, keyword-only arg, forkload's own):
            ``'torch'`` hands out torch tensors, ``'numpy'`` numpy arrays of
            the same shapes with numpy dtypes. ``None`` means ``'torch'``
            when torch can be imported, else ``'numpy'``. (default: ``None``)

    .. warning:: The workers are forked. As PyTorch documents for its fork
                 context, CUDA initialised in the parent before the fork cannot
                 be used in the workers: the dataset, :attr:`collate_fn` and
                 :attr:`worker_init_fn` must make CPU tensors only, and the
                 training loop moves each batch to the GPU. Changes made to the
                 dataset in the parent after the fork are not seen by the
                 workers.

    .. warning:: A batch's tensors are views of its shared segment, which stays
                 held as long as any of them (or a view of them) lives. Each
                 batch held holds its segment's memory and, with
                 ``sharing='fd'``, a file descriptor until descriptors run
                 short. Copy a tensor (``x.clone()``) to keep its values
                 without its segment.

    .. warning:: With :attr:`pin_memory`, drop a batch's host tensors in the
                 stream context its ``non_blocking`` copy was made in (``with
                 torch.cuda.stream(s):``): the event that holds its segment back
                 is recorded on the stream current when the last view goes, and
                 does not wait for a copy on another stream.

    .. note:: An exception raised in a worker (in ``__getitem__``,
              ``__getitems__``, :attr:`collate_fn`, :attr:`worker_init_fn` or an
              iterable's ``__iter__``/``__next__``) is raised again at its batch,
              of its own type, with PyTorch's message ("Caught ValueError in
              DataLoader worker process 0. ..."), and iteration can go on with
              the next batch. A worker that dies raises ``RuntimeError`` naming
              its id, its pid and the signal or exit status, within about a
              second.

    .. note:: ``state_dict()`` and ``load_state_dict(state)``, torchdata
              ``StatefulDataLoader``'s names, save and resume the loader's
              place: a new loader that loads the state of one stopped after
              ``k`` batches of an epoch hands out exactly the batches the first
              would have handed out next.

    .. note:: Where torch imports, this class is a subclass of
              :class:`torch.utils.data.DataLoader` (its ``__init__``, iterator
              and checks are forkload's: torch's ``__init__`` is never called),
              so that frameworks which test ``isinstance(loader, DataLoader)``
              treat it as torch's: PyTorch Lightning injects its
              ``DistributedSampler`` and re-creates ``type(loader)`` from the
              loader's arguments, a forkload loader still. Accelerate's
              ``prepare()`` shards it too, but always into a loader of torch's
              own (torch's workers): to keep forkload's, give the loader a
              :class:`~torch.utils.data.DistributedSampler` and prepare only
              the model and optimiser (doc/python.md, "Inside frameworks").

    .. note:: ``len(loader)`` counts the sampler's batches. For an
              :class:`~torch.utils.data.IterableDataset` it is only a guess,
              worked out from ``len(dataset)`` and :attr:`batch_size` as torch
              works it out: how the workers split the stream decides the true
              count.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None,
                 batch_sampler=None, num_workers=0, collate_fn=None,
                 pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor=_PREFETCH_DEFAULT,
                 persistent_workers=False, pin_memory_device="",
                 in_order=True, sharing="fd", shuffle_algorithm="torch",
                 sample_bytes=None, tensor_type=None, faults=None,
                 max_worker_restarts=0):
        # torch's checks of these arguments, in its order; where one fails,
        # the installed torch's exception is raised (its words differ from
        # version to version), and where torch takes what forkload doubts
        # (torch 2 takes prefetch_factor=0 until iter()), it is taken.
        problem = None
        if num_workers < 0:
            problem = ValueError(
                "num_workers option should be non-negative; use "
                "num_workers=0 to disable multiprocessing.")
        elif timeout < 0:
            problem = ValueError("timeout option should be non-negative")
        elif num_workers == 0 and prefetch_factor != _PREFETCH_DEFAULT:
            problem = ValueError(
                "prefetch_factor option could only be specified in "
                "multiprocessing.let num_workers > 0 to enable "
                "multiprocessing, otherwise set prefetch_factor to None.")
        elif prefetch_factor is not None and prefetch_factor < 0:
            problem = ValueError(
                "prefetch_factor option should be non-negative")
        elif persistent_workers and num_workers == 0:
            problem = ValueError(
                "persistent_workers option needs num_workers > 0")
        elif multiprocessing_context is not None and num_workers == 0:
            problem = ValueError(
                "multiprocessing_context can only be used with multi-process "
                "loading (num_workers > 0), but got num_workers=0")
        # What torch may take or refuse: a prefetch_factor of 0, or None
        # where its default is 2 (torch 1.13 refuses it).
        doubt = prefetch_factor is None and _PREFETCH_DEFAULT is not None \
            or prefetch_factor is not None and prefetch_factor <= 0
        if problem is not None or doubt:
            if torch is None:
                if problem is not None:
                    raise problem
            else:
                refusal = _torch_refusal(dataset, dict(
                    batch_size=batch_size, shuffle=shuffle, sampler=sampler,
                    batch_sampler=batch_sampler, num_workers=num_workers,
                    drop_last=drop_last, timeout=timeout,
                    multiprocessing_context=multiprocessing_context,
                    generator=generator, prefetch_factor=prefetch_factor,
                    persistent_workers=persistent_workers))
                if refusal is not None:
                    raise refusal
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        _check_context(multiprocessing_context)
        if sharing not in ("fd", "file_system"):
            raise ValueError("sharing should be 'fd' (each batch's segment "
                             "passed as a file descriptor) or 'file_system' "
                             f"(a name in /dev/shm), not {sharing!r}")
        if shuffle_algorithm not in ("torch", "bijection"):
            raise ValueError("shuffle_algorithm should be 'torch' "
                             "(torch.randperm's order) or 'bijection', not "
                             f"{shuffle_algorithm!r}")
        if tensor_type is None:
            tensor_type = "torch" if _forkload.has_torch else "numpy"
        if tensor_type not in ("torch", "numpy"):
            raise ValueError("tensor_type should be 'torch' or 'numpy', not "
                             f"{tensor_type!r}")
        if tensor_type == "torch" and not _forkload.has_torch:
            raise ValueError("tensor_type='torch' needs torch, which does "
                             "not import here; use tensor_type='numpy'")
        if sample_bytes is not None and sample_bytes <= 0:
            raise ValueError("sample_bytes should be a positive number of "
                             "bytes, or None")
        if not isinstance(max_worker_restarts, int) or \
                isinstance(max_worker_restarts, bool) or \
                not 0 <= max_worker_restarts < 2**32:
            raise ValueError("max_worker_restarts should be a whole number "
                             "of restarts, 0 (the default: a dead worker is "
                             f"an error) or more, not {max_worker_restarts!r}")
        if faults is not None and not isinstance(faults, str):
            raise TypeError("faults should be a str such as 'kill@3' or "
                            f"'emfile=0.1,seed=2', or None, not {faults!r}")

        self._native = _native_of(dataset)
        if self._native is not None and collate_fn is not None:
            raise ValueError(
                "collate_fn must be None with a forkload.datasets dataset: "
                "its batches are made in C, in the workers, with no Python")
        self._epochs = 0
        self.dataset = dataset
        # torch's wrappers of DataPipes (for pickling; workers here fork).
        if _is_pipe(dataset, "iter"):
            self.dataset = _IterDataPipeSerializationWrapper(dataset)
        elif _is_pipe(dataset, "map"):
            self.dataset = _MapDataPipeSerializationWrapper(dataset)
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.in_order = in_order
        self.sharing = sharing
        self.shuffle_algorithm = shuffle_algorithm
        self.sample_bytes = sample_bytes
        self.tensor_type = tensor_type
        self.faults = faults
        self.max_worker_restarts = max_worker_restarts

        if _is_iterable_dataset(dataset):
            self._iterable = True
            self._dataset_kind = _ITERABLE
            if _is_pipe(dataset, "iter"):
                # The pipe's own Shuffler steps take the setting.
                if shuffle is not None:
                    dataset = graph_settings.apply_shuffle_settings(
                        dataset, shuffle=shuffle)
            elif shuffle not in {False, None}:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(
                    "DataLoader with IterableDataset: expected unspecified "
                    f"batch_sampler option, but got batch_sampler="
                    f"{batch_sampler}")
        else:
            self._iterable = False
            self._dataset_kind = _MAP
            shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with "
                             "shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive "
                                 "with batch_size, shuffle, sampler, and "
                                 "drop_last")
            batch_size = None
            drop_last = False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching "
                             "and is mutually exclusive with drop_last")
        if sampler is None:
            if self._iterable:
                sampler = _InfiniteConstantSampler()
            elif torch is None:
                if shuffle:
                    raise ValueError("shuffle=True needs torch (its "
                                     "RandomSampler), which does not import")
                sampler = range(len(dataset))
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = (BatchSampler or _SimpleBatchSampler)(
                sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            # torch's: what a batch goes through is in the attribute (the
            # workers do it in C, as they recognise below).
            collate_fn = _default_collate if self._auto_collation else \
                _default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._iterator = None
        self._IterableDataset_len_called = None  # read by torch's code
        self._resume = None
        self._latest = _Latest()
        self.__initialized = True
        _check_worker_number(self)

    def __setattr__(self, attr, val):
        if self.__dict__.get("_DataLoader__initialized") and attr in (
                "batch_size", "batch_sampler", "sampler", "drop_last",
                "dataset", "persistent_workers"):
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{type(self).__name__} is initialized")
        object.__setattr__(self, attr, val)

    # What torch's DataLoader defines and this class does its own way, so
    # that nothing of torch's runs on a forkload loader.

    @property
    def multiprocessing_context(self):
        return self.__dict__.get("_mp_context")

    @multiprocessing_context.setter
    def multiprocessing_context(self, ctx):
        """None, 'fork' or a fork context, kept as given: forkload's
        workers are always forked."""
        if ctx is not None and self.num_workers == 0:
            raise ValueError(
                "multiprocessing_context can only be used with multi-process "
                "loading (num_workers > 0), but got num_workers=0")
        _check_context(ctx)
        self.__dict__["_mp_context"] = ctx

    def _get_iterator(self):
        return _Iterator(self)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        return self.batch_sampler if self._auto_collation else self.sampler

    def __len__(self):
        if self._iterable:
            # As torch: an iterator that yields more batches than the
            # dataset's length warns (_Iterator.__next__).
            length = self._IterableDataset_len_called = len(self.dataset)
            if self.batch_size is not None:
                if self.drop_last:
                    length = length // self.batch_size
                else:
                    length = math.ceil(length / self.batch_size)
            return length
        return len(self._index_sampler)

    def __iter__(self):
        if self.timeout and self.num_workers == 0:
            # torch's single-process iterator asserts it, in words of its
            # version's (none with torch 1.13).
            raise _torch_iter_refusal(self) or AssertionError(
                "timeout needs num_workers > 0: without workers, nothing "
                "is waited for")
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                _check_worker_number(self)
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        # The last epoch's iterator, cut short, stops pulling from its
        # sampler before this one draws.
        last = getattr(self, "_last_iterator", lambda: None)()
        if last is not None:
            last._rewind_sampler()
        _check_worker_number(self)
        return self._get_iterator()

    def state_dict(self):
        """The loader's place, as torchdata's StatefulDataLoader: every
        batch handed out counts as consumed; load_state_dict on a new
        DataLoader with the same arguments resumes right after it."""
        it = self._iterator if self.persistent_workers else \
            getattr(self, "_last_iterator", lambda: None)()
        if it is None or it._finished:
            return {"_iterator_finished": True,
                    "_num_yielded": 0 if it is None else it._yielded,
                    "_snapshot": None}
        return it._state()

    def load_state_dict(self, state_dict):
        """Resume, at the next iter(), where state_dict was saved."""
        if state_dict.get("_iterator_finished", False):
            self._resume = None
            return
        snap = state_dict.get("_snapshot")
        if not isinstance(snap, dict) or "forkload" not in snap:
            raise ValueError("not a forkload.DataLoader state_dict: it has "
                             "no forkload snapshot")
        self._resume = state_dict
        if self._iterator is not None:
            self._iterator._close()
            self._iterator = None

    def _ask(self, what):
        """What the libforkload loader of this loader's latest iterator
        says (its workers started, as the first batch starts them), or
        said at its end, once it and its batches are gone."""
        it = self._iterator if self.persistent_workers else \
            getattr(self, "_last_iterator", lambda: None)()
        if it is not None and not it._begun and not it._finished:
            it._begin(self)
        got = self._latest.ask(what)
        if got is None:
            raise RuntimeError("forkload: no loader to ask: iter(loader) "
                               "first (an epoch of no batch has none)")
        return got

    def stats(self):
        """The counters of the latest iterator's loader (fl_loader_stats):
        segments, bytes_mapped, fds and their peaks, batches_held (handed
        out, not yet freed), batches_delivered, in_flight, reorder_depth,
        wait_seconds and faults_injected, as a dict; once the loader and
        its batches are gone, what they were at its end.  worker_restarts
        counts the DataLoader's whole life, as max_worker_restarts
        does."""
        return self._ask("stats")

    def budget(self):
        """What will stop this loader as batches are held, as ``forkload
        doctor`` says it (fl_loader_budget): a dict with ``items``, one
        per resource (``resource``, ``limit``, ``in_use``, ``per_batch``:
        what each held batch adds, ``max_held``: the batches that can be
        held, those held now included, before that limit), ``binding``:
        the resource that binds first, and its ``max_held``.  ``None`` is
        no limit.  ``max_held`` is a floor: in order, up to ``(num_workers
        - 1) * prefetch_factor`` batches that came early may count too.
        Once the latest loader and its batches are gone, its budget at its
        end, nothing held."""
        items, binding = self._ask("budget")
        first = items[binding] if binding >= 0 else None
        return {"binding": None if first is None else first["resource"],
                "max_held": None if first is None else first["max_held"],
                "items": items}



def _seed_pipe(pipe, seed):
    """An IterDataPipe's random steps seeded for the epoch, as torch seeds
    them in its iterator and again in each worker."""
    rng = torch.Generator()
    rng.manual_seed(seed)
    graph_settings.apply_random_seed(pipe, rng)


class _Opened:
    """A stream opened already, which libforkload's open takes as the
    dataset's."""

    def __init__(self, stream):
        self.stream = stream

    def __iter__(self):
        return self.stream


class _Latest:
    """What stats() and budget() read of a DataLoader's latest libforkload
    loader: a weak reference to it while it lives (its batches keep it),
    then what it said at its end.  And the worker restarts its loaders
    spent: max_worker_restarts spans the DataLoader's life, and an epoch
    without persistent workers has a loader of its own."""

    def __init__(self):
        self.ref = None
        self.made = 0          # loaders made; the latest's number
        self.end = None        # (stats, budget) of the latest, at its end
        self.before = 0        # restarts spent before the latest
        self.spent = 0         # by the loaders closed
        self.pid = None        # the process that made the latest

    def new_loader(self):
        """A loader is made: its number, for on_end, and the restarts it
        may spend."""
        self.made += 1
        self.ref, self.end, self.before = None, None, self.spent
        self.pid = os.getpid()
        return self.made

    def closed(self, fl):
        """Its workers are stopped: no restart comes after.  (Not in a
        child forked since, by another loader say, whose copy of an
        iterator may go there: a loader answers only its maker.)"""
        if os.getpid() == self.pid:
            self.spent += fl.stats()["worker_restarts"]

    def ended(self, number, stats, budget):
        if number == self.made:
            self.end = (stats, budget)

    def ask(self, what):
        fl = self.ref() if self.ref is not None else None
        if fl is not None:
            got = fl.stats() if what == "stats" else fl.budget()
        elif self.end is not None:
            got = self.end[0 if what == "stats" else 1]
        else:
            return None
        if what == "stats":
            got = dict(got, worker_restarts=self.before +
                       got["worker_restarts"])
        return got


def _check_context(ctx):
    if ctx is None:
        return
    # What torch refuses (a start method this platform lacks, a value
    # that is neither a name nor a context), in torch's exception.
    refusal = None
    if torch is not None:
        try:
            _TorchDataLoader([], num_workers=1, multiprocessing_context=ctx)
        except (TypeError, ValueError) as e:
            e.__traceback__ = None
            refusal = e
    if refusal is not None:
        raise refusal
    method = ctx if isinstance(ctx, str) else getattr(
        ctx, "get_start_method", lambda: None)()
    if method != "fork":
        raise ValueError(
            f"multiprocessing_context={ctx!r}: forkload forks its workers "
            "from the consumer (as the 'fork' context does); 'spawn' and "
            "'forkserver' are not available. Pass None or 'fork'.")


class _Iterator:
    """One pass over a DataLoader: what torch's _BaseDataLoaderIter does,
    with libforkload doing the work.

    As torch's, it keeps what it reads of its DataLoader, never the
    persistent loader itself, which holds it: then an iterator nobody else
    holds goes with its loader (`del loader` ends the workers at once),
    and one that is held (`for b in DataLoader(...)`) needs no loader.
    The loader is handed to the methods that start an epoch; only a
    loader without workers, which holds no iterator, is kept (its epoch
    starts at the first batch)."""

    def __init__(self, loader):
        self._persistent = loader.persistent_workers
        self._owner = None if self._persistent else loader
        self._num_workers = loader.num_workers
        self._dataset = loader.dataset
        self._iterable = loader._iterable
        self._index_sampler = loader._index_sampler
        self._latest = loader._latest
        self._loader = None
        self._rewind = None
        if loader.num_workers > 0 and loader.prefetch_factor is not None \
                and loader.prefetch_factor <= 0:
            # Taken by torch 2's DataLoader, refused by its iterator once
            # its base has drawn its seeds, called iter() on the sampler
            # and warned of pin_memory: that much is done here too.
            from torch.utils.data import dataloader as tdl
            base = tdl._BaseDataLoaderIter
            base.__init__(base.__new__(base), loader)
            raise AssertionError("prefetch_factor must be greater than 0 "
                                 "for MultiProcessingDataLoaderIter")
        self._pin, self._pin_device = _pin_mode(loader)
        self._plan_cap = 0
        # Starting an epoch's workers happens once, in whichever thread
        # gets there first: the consumer's next(), or stats() and budget()
        # asked from another thread.
        self._lock = threading.RLock()
        self._begun = False
        self._start(loader, first=True)
        loader._last_iterator = weakref.ref(self)

    # The order of draws is torch's: iter(sampler) draws nothing, then the
    # base seed, then the sampler's seed at its first next(): at iter()
    # with workers, which prefetch, and at the first batch without.
    def _start(self, dl, first):
        with self._lock:
            self._start_locked(dl, first)

    def _start_locked(self, dl, first):
        resume = dl._resume
        dl._resume = None
        self._pipe_seed = None
        if _is_pipe(self._dataset, "iter"):
            # torch's first draw of an epoch over an IterDataPipe: the seed
            # its random steps share in every worker.
            self._pipe_seed = _draw_seed(dl.generator)
            _seed_pipe(self._dataset, self._pipe_seed)
        if dl.num_workers == 0 and _is_pipe(self._dataset):
            graph_settings.apply_sharding(self._dataset, *_distributed())
        if resume is not None:
            if first or not dl.persistent_workers:
                self._base_seed = resume["_snapshot"]["base_seed"]
        elif first:
            self._base_seed = _draw_seed(dl.generator)
        if first and dl.num_workers > 0 and self._pipe_seed is not None:
            # torch's iterator with workers draws a second shared seed as
            # it is made (its _reset), for the consumer's graph; its
            # workers keep the first.
            _seed_pipe(self._dataset, _draw_seed(dl.generator))
        # torch's iterator calls iter() on the sampler as it is made; with
        # workers the plan is drawn now anyway, without them at the first
        # batch, from this call's iterator: a batch_sampler whose __iter__
        # draws or counts eagerly (no generator) sees it at iter(loader).
        self._sampler_iter = None
        if dl.num_workers == 0 and not dl._iterable:
            self._sampler_iter = iter(dl._index_sampler)
        self._stream = None
        if dl.num_workers == 0 and dl._iterable and dl._native is None:
            # torch's iterator without workers opens the stream as it is
            # made: what __iter__ draws or raises, iter(loader) does.
            self._stream = _Opened(iter(self._dataset))
        self._yielded = 0 if resume is None else resume["_num_yielded"]
        self._outcomes = 0  # batches and errors handed out this epoch
        self._len_called = dl.__dict__.get("_IterableDataset_len_called")
        self._finished = False
        self._shut = False
        self._resume_from = resume
        self._fresh = first
        self._begun = False
        if dl.num_workers > 0:
            self._begin(dl)

    def _begin(self, dl):
        with self._lock:
            if not self._begun:
                self._begin_locked(dl)

    def _begin_locked(self, dl):
        resume = self._resume_from
        self._resume_from = None
        if resume is not None:
            self._order = resume["_snapshot"]["order"]
            if "count" in self._order:  # the epochs after it count on
                dl._epochs = max(dl._epochs, self._order["count"] + 1)
        else:
            self._order = self._draw_order(dl)
        self._begun = True
        o = self._order
        if (o["kind"] == "plan" and not o["plan"]) or (
                o["kind"] == "map" and len(dl.dataset) == 0) or (
                resume is not None and
                resume["_snapshot"]["forkload"] is None):
            self._finished = True  # an epoch of no batch: nothing to fork
            return
        self._make_loader(dl)
        self._loader.begin(self._fl_epoch(dl), self._base_seed % 2**64,
                           self._order.get("plan"),
                           None if resume is None else
                           resume["_snapshot"]["forkload"])
        # stats() and budget() ask it as long as it lives (its batches
        # keep it after the epoch): once its workers are started, so that
        # another thread never finds one starting.
        self._latest.ref = weakref.ref(self._loader)

    def _draw_order(self, dl):
        """What libforkload needs for this epoch's order: a recognised
        sampler is drawn in C, anything else iterated here, as torch
        does, into a plan of batches.  A forkload.datasets dataset's
        order also counts the loader's epochs (the samples' seeds are
        drawn from it, see _fl_epoch)."""
        order = self._draw_sampler(dl)
        if dl._native is not None:
            order["count"] = dl._epochs
            dl._epochs += 1
        return order

    def _fl_epoch(self, dl):
        """The epoch libforkload begins.  A forkload.datasets dataset's
        loader has the base seed B as its seed, and fl_sample_seed is a
        function of (B, epoch, index): a shuffled epoch is then S - B,
        for libforkload shuffles with torch.randperm(seed + epoch), S the
        sampler's seed; any other, the epochs counted, so that the
        samples' random crops are new each epoch (as a persistent
        worker's torch generator goes on) and follow torch.manual_seed."""
        o = self._order
        if dl._native is None:
            return o["epoch"]
        if o.get("shuffle"):
            return (o["epoch"] - self._base_seed) % 2**64
        return o.get("count", 0)

    def _draw_sampler(self, dl):
        if dl._iterable:
            # An IterDataPipe's epoch carries its shared seed to the
            # workers (epoch_start).
            return {"kind": "iterable", "epoch": self._pipe_seed or 0}
        sampler = dl.sampler if dl.batch_sampler is None else \
            getattr(dl.batch_sampler, "sampler", None)
        bs = dl.batch_sampler
        plain_batches = bs is None or (
            BatchSampler is not None and type(bs) is BatchSampler)
        if plain_batches and SequentialSampler is not None:
            t = type(sampler)
            if t is SequentialSampler and sampler.data_source is dl.dataset:
                return {"kind": "map", "epoch": 0, "shuffle": False}
            if (t is RandomSampler and sampler.data_source is dl.dataset and
                    not sampler.replacement and
                    sampler._num_samples is None and
                    sampler.generator is None):
                # RandomSampler.__iter__'s own draw, then torch.randperm
                # for that seed: drawn in C.
                seed = _draw_seed(None)
                return {"kind": "map", "epoch": seed, "shuffle": True}
            if (t is DistributedSampler and sampler.dataset is dl.dataset):
                return {"kind": "map", "shuffle": sampler.shuffle,
                        "epoch": (sampler.seed + sampler.epoch)
                        % 2**64 if sampler.shuffle else 0,
                        "rank": sampler.rank,
                        "world_size": sampler.num_replicas,
                        "shard_mode": "trim" if sampler.drop_last else "pad"}
        if self._fresh and dl.num_workers > 0:
            # torch's iterator with workers calls iter() on the sampler
            # twice when it is made (its base __init__, then _reset), and
            # iterates the second: a sampler that draws or counts in
            # __iter__ itself (not in a generator) sees both calls.
            iter(dl._index_sampler)
        g = _lazy_generator(dl._index_sampler)
        state = None if g is None else g.get_state()
        it, self._sampler_iter = self._sampler_iter, None
        plan = list(dl._index_sampler if it is None else it)
        if g is not None:
            self._rewind = (g, state, dl._index_sampler, len(plan),
                            dl.num_workers * (dl.prefetch_factor or 0))
        return {"kind": "plan", "epoch": 0, "plan": plan}

    def _rewind_sampler(self):
        """An epoch cut short: torch's iterator pulled from the sampler
        only the batches it sent (its prefetch window, then one for each
        batch or error handed out), and the plan took them all.  Where a
        sampler of torch's draws from a generator of its own as it is
        iterated, that generator is set back to where torch's pulls leave
        it: to its state before the plan, then the pulls made again."""
        rewind, self._rewind = self._rewind, None
        if rewind is None:
            return
        g, state, index_sampler, batches, window = rewind
        pulls = window + self._outcomes
        if pulls > batches:
            return  # torch's pulls reached the sampler's end too
        g.set_state(state)
        it = iter(index_sampler)
        for _ in range(pulls):
            next(it)

    def _make_loader(self, dl):
        o = self._order
        kind = o["kind"]
        plan = o.get("plan")
        if self._loader is not None and dl.persistent_workers:
            if kind != "plan" or len(plan) <= self._plan_cap:
                return
            self._close()
        drop_last = dl.drop_last
        if kind == "plan":
            length = len(plan)
            if dl.persistent_workers:
                length = max(length, 1) * 2
            self._plan_cap = length
            batch_size = max(len(b) for b in plan) if \
                dl._auto_collation else 0
            batches = length
        elif kind == "map":
            # The batch sampler's size and drop_last: a BatchSampler given
            # as batch_sampler has them, the loader's are None and False.
            bs = dl.batch_sampler
            length = len(dl.dataset)
            batch_size = 1 if bs is None else bs.batch_size
            drop_last = bs is not None and bs.drop_last
            batches = -(-length // batch_size)
        else:
            length = 0
            batch_size = dl.batch_size or 0
            batches = None
        # The window never holds more than the epoch's batches: a
        # prefetch_factor beyond them reserves nothing more (torch's queues
        # hold only what was sent).
        prefetch = dl.prefetch_factor or 2
        if batches is not None and dl.num_workers > 0:
            prefetch = min(prefetch,
                           max(1, -(-batches // dl.num_workers)))
        # torch's default_collate and default_convert are done in C (None
        # and False), each where torch would call it: default_collate on
        # a list of samples, default_convert on a sample alone.
        collate = dl.collate_fn
        if dl._auto_collation and (collate is None or
                                   collate is _default_collate):
            collate = None
        elif not dl._auto_collation and (collate is None or
                                         collate is _default_convert):
            collate = False
        setup = functools.partial(
            _worker.setup, dl.num_workers, dl.dataset, dl.worker_init_fn,
            _distributed() if _is_pipe(dl.dataset) else None)
        dataset = dl.dataset if self._stream is None else self._stream
        if dl._native is not None:
            # libforkload's own dataset: Python in a worker only for the
            # user's worker_init_fn.
            dataset = dl._native
            if dl.worker_init_fn is None:
                setup = None
        args = dict(batch_size=batch_size, length=length,
                    num_workers=dl.num_workers,
                    prefetch_factor=prefetch,
                    persistent_workers=dl.persistent_workers,
                    in_order=dl.in_order,
                    drop_last=drop_last,
                    shuffle=o.get("shuffle", False),
                    shuffle_algorithm=dl.shuffle_algorithm,
                    rank=o.get("rank", 0), world_size=o.get("world_size", 1),
                    shard_mode=o.get("shard_mode", "pad"),
                    sharing=dl.sharing, timeout=dl.timeout,
                    tensor_type=dl.tensor_type,
                    unbatched=not dl._auto_collation)
        if dl.faults is not None:
            args["faults"] = dl.faults
        if self._pipe_seed is not None:
            args["epoch_start"] = functools.partial(_seed_pipe, dl.dataset)
        number = self._latest.new_loader()
        args["on_end"] = functools.partial(self._latest.ended, number)
        if dl.max_worker_restarts:
            args["max_worker_restarts"] = max(
                0, dl.max_worker_restarts - self._latest.spent)
        if self._pin == "register":
            args["pinner"] = _Pinner(_cuda)
        if dl._native is not None:
            args["seed"] = self._base_seed % 2**64
        elif dl.sample_bytes is not None:
            args["sample_bytes"] = dl.sample_bytes
        self._loader = _forkload.Loader(dataset, kind, collate, setup,
                                        **args)
        with _live_lock:
            _live.add(self._loader)

    def _reset(self, loader, first_iter=False):
        """A persistent loader's next epoch: a new order, the same base
        seed and workers, whose random streams go on; an epoch left
        unfinished is dropped by the next begin.  (torch's signature: the
        loader given is the one that holds this iterator.)"""
        self._rewind_sampler()
        self._index_sampler = loader._index_sampler
        self._start(loader, first=False)

    def __iter__(self):
        return self

    def __len__(self):
        return len(self._index_sampler)  # torch's, a TypeError where
        # the sampler has no length (an IterableDataset's)

    def __next__(self):
        if self._shut:
            raise RuntimeError("forkload: this iterator's workers were shut "
                               "down (_shutdown_workers()) before its epoch "
                               "ended; iter(loader) starts a new one")
        if self._finished:
            raise StopIteration
        if not self._begun:
            self._begin(self._owner)
        if self._finished or self._loader is None:  # empty, or interrupted
            raise StopIteration
        try:
            batch = self._loader.next()
        except StopIteration:  # the end of the epoch, never a batch's value
            self._finished = True
            self._rewind = None  # the sampler was iterated to its end
            if not self._persistent:
                self._close()
            raise
        except KeyboardInterrupt:
            self._close()
            raise
        except Exception:  # a batch's error, which torch's pulls count
            self._outcomes += 1
            raise
        self._outcomes += 1
        self._yielded += 1
        if self._len_called is not None and self._yielded > \
                self._len_called and self._iterable:
            _warn_past_len(self, batch)
        if self._pin == "copy" or (self._pin == "register" and
                                   _cuda is torch.cuda):
            # torch's own pin_memory walk: for another device, its copy;
            # for CUDA, the segment's tensors are pinned already and come
            # back as they are (Tensor.pin_memory returns a pinned tensor
            # itself), the containers made as the installed torch makes
            # them (torch 1.13 makes tuples lists) and a custom batch's own
            # pin_memory() called, as torch calls it.  (Not with a
            # stand-in for torch.cuda, whose tensors are not pinned.)
            from torch.utils.data._utils.pin_memory import pin_memory
            batch = pin_memory(batch, self._pin_device)
        return batch

    def _state(self):
        # Without workers the order is drawn at the first batch: drawn now,
        # it is in the state, and the first batch comes from it as well.
        if not self._begun:
            self._begin(self._owner)
        # Every batch of the epoch handed out: what is left is nothing,
        # and libforkload's state would start the epoch again.
        done = self._finished or self._loader is None or (
            self._order["kind"] != "iterable" and
            self._yielded >= self._loader.batches())
        snap = {"forkload": None if done else self._loader.state_save(),
                "base_seed": self._base_seed, "order": self._order}
        return {"_iterator_finished": False, "_num_yielded": self._yielded,
                "_sampler_iter_yielded": self._yielded,
                "_snapshot": snap}

    def _close(self):
        self._rewind_sampler()
        if self._loader is not None:
            self._latest.closed(self._loader)
            self._loader.close()
            self._loader = None

    def _shutdown_workers(self):
        """torch's name, which frameworks call (Lightning's teardown of a
        persistent loader's iterator): the workers end now.  What is left
        of the epoch is then an error, never an early end (torch's
        iterator, shut down, raises too); iter(loader) starts anew."""
        self._shut = not self._finished
        self._close()

    def __del__(self):
        self._close()
