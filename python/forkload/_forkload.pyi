# Types of forkload._forkload, the C module (python/_forkload/*.c) under
# forkload.DataLoader and forkload.datasets.  It is internal: its calls
# may change with any release.  These stubs follow the method tables,
# getsets and argument formats of those files; `python -m mypy.stubtest
# forkload._forkload` checks that they name what the module has.

import sys
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, Protocol, final, type_check_only

from _typeshed import ReadableBuffer, StrOrBytesPath

# The element types a batch can hold, by the names the module knows.
_DType = Literal["bool", "uint8", "int8", "int16", "int32", "int64",
                 "float16", "bfloat16", "float32", "float64", "complex64",
                 "complex128"]
# One field of a built-in dataset's sample: its dtype and its shape
# (without the batch axis).
_Field = tuple[_DType, tuple[int, ...]]

version: Final[str]
"""libforkload's version string (fl_version_string)."""
has_torch: Final[int]
"""1 where torch imported when the module was loaded, else 0."""

@type_check_only
class _Event(Protocol):
    def query(self) -> bool: ...
    def synchronize(self) -> object: ...

@type_check_only
class _Pinner(Protocol):
    """What Loader(pinner=...) calls: forkload.dataloader._Pinner."""

    def register(self, ptr: int, size: int, /) -> object: ...
    def unregister(self, ptr: int, size: int, /) -> object: ...
    def record(self) -> _Event: ...

@final
class Loader:
    """One libforkload loader over a Python dataset (forkload.DataLoader's
    engine)."""

    def __init__(
        self,
        dataset: object,
        kind: Literal["map", "plan", "iterable"],
        collate_fn: Callable[[list[Any]], Any] | Literal[False] | None,
        worker_setup: Callable[[int, int], object] | None,
        *,
        batch_size: int = 1,
        length: int = 0,
        num_workers: int = 0,
        prefetch_factor: int = 2,
        persistent_workers: bool = False,
        in_order: bool = True,
        drop_last: bool = False,
        shuffle: bool = False,
        shuffle_algorithm: Literal["torch", "bijection"] = "torch",
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shard_mode: Literal["pad", "trim", "uneven"] = "pad",
        sharing: Literal["fd", "file_system"] = "fd",
        sample_bytes: int = 0,
        timeout: float = 0,
        tensor_type: Literal["torch", "numpy"] = "torch",
        pinner: _Pinner | None = None,
        max_worker_restarts: int = 0,
        faults: str | None = None,
        unbatched: bool = False,
        on_end: Callable[[dict[str, int | float],
                          tuple[list[dict[str, Any]], int]], object]
        | None = None,
        epoch_start: Callable[[int], object] | None = None,
    ) -> None: ...
    def begin(self, epoch: int, base_seed: int,
              plan: Sequence[Any] | None = None,
              state: ReadableBuffer | str | None = None) -> None:
        """Start an epoch, or resume the one state_save() saved."""
    def next(self) -> Any:
        """The next batch; StopIteration at the end of the epoch."""
    def close(self) -> None: ...
    def state_save(self) -> bytes: ...
    def batches(self) -> int: ...
    def stats(self) -> dict[str, int | float]: ...
    def budget(self) -> tuple[list[dict[str, Any]], int]: ...
    @property
    def room(self) -> int: ...
    @property
    def inflight(self) -> int: ...

@final
class Segment:
    """A batch's shared memory; the arrays of its batch keep it alive.
    Made by the module only."""

    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class View:
    """One array of a batch's segment, for the buffer protocol and DLPack.
    Made by the module only."""

    def __dlpack__(self, *, stream: None = None) -> object: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class NativeDataset:
    """One of libforkload's built-in datasets, as the functions below make
    it. Made by the module only."""

    @property
    def len(self) -> int | None: ...
    @property
    def iterable(self) -> bool: ...
    @property
    def field_bytes(self) -> tuple[int, ...]: ...
    @property
    def layout(self) -> list[_Field]: ...
    @property
    def has_sizes(self) -> bool: ...
    def samples(self) -> list[tuple[str, int]]: ...
    def classes(self) -> list[str]: ...

# The image stage's options (fl_image_options), keyword-only; crop is 0
# (center) or 1 (random resized).
def image_folder(
    root: StrOrBytesPath, fields: Sequence[_Field], /, *,
    height: int = ..., width: int = ..., crop: int = ..., resize: int = ...,
    hflip: float = ..., scale: tuple[float, float] = ...,
    ratio: tuple[float, float] = ..., chw_float: bool = ...,
    mean: tuple[float, float, float] = ...,
    std: tuple[float, float, float] = ..., max_pixels: int = ...,
) -> NativeDataset: ...
def decode_images(
    dataset: NativeDataset, field: int, fields: Sequence[_Field], /, *,
    height: int = ..., width: int = ..., crop: int = ..., resize: int = ...,
    hflip: float = ..., scale: tuple[float, float] = ...,
    ratio: tuple[float, float] = ..., chw_float: bool = ...,
    mean: tuple[float, float, float] = ...,
    std: tuple[float, float, float] = ..., max_pixels: int = ...,
) -> NativeDataset: ...
def tokens(paths: Sequence[StrOrBytesPath], seq_len: int,
           fields: Sequence[_Field], /) -> NativeDataset: ...
def lmdb(path: StrOrBytesPath, max_bytes: int, fields: Sequence[_Field],
         /) -> NativeDataset: ...
def webdataset(shards: Sequence[StrOrBytesPath],
               exts: Sequence[StrOrBytesPath], max_bytes: Sequence[int],
               fields: Sequence[_Field], /) -> NativeDataset: ...
def npy_dir(dir: StrOrBytesPath, fields: Sequence[_Field],
            /) -> NativeDataset: ...
def npy_array(path: StrOrBytesPath, fields: Sequence[_Field],
              /) -> NativeDataset: ...
def npy_zip(paths: Sequence[StrOrBytesPath], fields: Sequence[_Field],
            /) -> NativeDataset: ...
def raw(path: StrOrBytesPath, record_bytes: int, header_bytes: int,
        fields: Sequence[_Field], /) -> NativeDataset: ...
