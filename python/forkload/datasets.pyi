# Types of forkload.datasets.  A sample or a batch is typed Any: torch
# tensors, or numpy arrays with tensor_type='numpy'.  The classes are typed
# as the sequences and iterables they are, not as subclasses of torch's
# Dataset and IterableDataset (which they are where torch imports), so
# that checking a program needs no torch.

import builtins
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, SupportsIndex, overload

import numpy as np
from _typeshed import StrPath
from numpy.typing import DTypeLike

from forkload._forkload import NativeDataset

__all__ = ["ImageFolder", "Tokens", "LMDB", "WebDataset", "NpyDir",
           "NpyArray", "NpyZip", "Raw", "decode_images"]

IMAGENET_MEAN: tuple[float, float, float]
IMAGENET_STD: tuple[float, float, float]
PIL_MAX_PIXELS: int
IMG_EXTENSIONS: tuple[str, ...]

class _Native:
    _native: NativeDataset | None

class _MapNative(_Native):
    def __len__(self) -> int: ...
    def __getitem__(self, index: SupportsIndex) -> Any: ...

class _StreamNative(_Native):
    def __iter__(self) -> Iterator[Any]: ...

class ImageFolder(_MapNative):
    root: str
    size: tuple[int, int]
    crop: Literal["center", "random"]
    float: bool
    classes: list[str]
    class_to_idx: dict[str, int]
    samples: list[tuple[str, int]]
    imgs: list[tuple[str, int]]
    targets: list[int]
    extensions: tuple[str, ...]
    def __init__(
        self,
        root: StrPath,
        size: int | tuple[int, int],
        crop: Literal["center", "random"] = "center",
        resize: int | None = None,
        hflip: builtins.float = 0.0,
        scale: tuple[builtins.float, builtins.float] = ...,
        ratio: tuple[builtins.float, builtins.float] = ...,
        float: bool = False,
        mean: tuple[builtins.float, builtins.float, builtins.float] = ...,
        std: tuple[builtins.float, builtins.float, builtins.float] = ...,
        max_pixels: int = ...,
    ) -> None: ...
    def __getitem__(self, index: SupportsIndex) -> tuple[Any, int]: ...

class Tokens(_MapNative):
    paths: list[str]
    seq_len: int
    def __init__(self, paths: StrPath | Iterable[StrPath],
                 seq_len: int) -> None: ...

class LMDB(_MapNative):
    path: str
    max_bytes: int
    def __init__(self, path: StrPath, max_bytes: int) -> None: ...
    def __getitem__(self, index: SupportsIndex) -> bytes: ...

class WebDataset(_StreamNative):
    shards: list[str]
    fields: list[str]
    max_bytes: list[int]
    def __init__(self, shards: StrPath | Iterable[StrPath],
                 fields: Mapping[str, int] | Iterable[tuple[str, int]]
                 ) -> None: ...

class NpyDir(_MapNative):
    root: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    def __init__(self, root: StrPath) -> None: ...

class NpyArray(_MapNative):
    path: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    def __init__(self, path: StrPath) -> None: ...

class NpyZip(_MapNative):
    paths: list[str]
    def __init__(self, paths: StrPath | Iterable[StrPath]) -> None: ...

class Raw(_MapNative):
    path: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    def __init__(self, path: StrPath, record_bytes: int,
                 header_bytes: int = 0, dtype: DTypeLike = "uint8",
                 shape: Sequence[int] | None = None) -> None: ...

class _DecodedMap(_MapNative):
    dataset: _Native
    field: int
    fields: list[str]

class _DecodedStream(_StreamNative):
    dataset: _Native
    field: int
    fields: list[str]

@overload
def decode_images(
    dataset: _MapNative, field: int | str, size: int | tuple[int, int],
    crop: Literal["center", "random"] = "center", resize: int | None = None,
    hflip: builtins.float = 0.0,
    scale: tuple[builtins.float, builtins.float] = ...,
    ratio: tuple[builtins.float, builtins.float] = ..., float: bool = False,
    mean: tuple[builtins.float, builtins.float, builtins.float] = ...,
    std: tuple[builtins.float, builtins.float, builtins.float] = ...,
    max_pixels: int = ...,
) -> _DecodedMap: ...
@overload
def decode_images(
    dataset: _StreamNative, field: int | str, size: int | tuple[int, int],
    crop: Literal["center", "random"] = "center", resize: int | None = None,
    hflip: builtins.float = 0.0,
    scale: tuple[builtins.float, builtins.float] = ...,
    ratio: tuple[builtins.float, builtins.float] = ..., float: bool = False,
    mean: tuple[builtins.float, builtins.float, builtins.float] = ...,
    std: tuple[builtins.float, builtins.float, builtins.float] = ...,
    max_pixels: int = ...,
) -> _DecodedStream: ...
