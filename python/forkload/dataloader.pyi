# Types of forkload.dataloader.  Batches are typed Any: what they hold
# (torch tensors, numpy arrays, the structure of the samples or of a
# collate_fn's result) depends on the dataset and the arguments, as with
# torch.utils.data.DataLoader; nothing here needs torch to be installed.

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from multiprocessing.context import BaseContext
from typing import Any, Generic, Literal, Protocol, TypeVar, type_check_only

from forkload._worker import get_worker_info as get_worker_info

__all__ = ["DataLoader", "get_worker_info"]

@type_check_only
class _MapStyle(Protocol):
    """A map-style dataset: samples by index (torch's Dataset; __len__ too,
    unless a sampler is given)."""

    def __getitem__(self, index: int, /) -> Any: ...

_T_co = TypeVar("_T_co", covariant=True)

class DataLoader(Generic[_T_co]):
    dataset: Any
    batch_size: int | None
    drop_last: bool
    sampler: Iterable[Any]
    batch_sampler: Iterable[Sequence[Any]] | None
    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    pin_memory_device: str
    timeout: float
    worker_init_fn: Callable[[int], object] | None
    multiprocessing_context: str | BaseContext | None
    generator: Any
    collate_fn: Callable[[list[Any]], Any] | None
    persistent_workers: bool
    in_order: bool
    sharing: Literal["fd", "file_system"]
    shuffle_algorithm: Literal["torch", "bijection"]
    sample_bytes: int | None
    tensor_type: Literal["torch", "numpy"]
    faults: str | None
    max_worker_restarts: int
    # The batches are Any: a loader made without a type argument is a
    # DataLoader[Any], which mypy --strict infers with no annotation.
    def __init__(
        self: DataLoader[Any],
        dataset: _MapStyle | Iterable[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Iterable[Any] | None = None,
        batch_sampler: Iterable[Sequence[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], object] | None = None,
        multiprocessing_context: str | BaseContext | None = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        sharing: Literal["fd", "file_system"] = "fd",
        shuffle_algorithm: Literal["torch", "bijection"] = "torch",
        sample_bytes: int | None = None,
        tensor_type: Literal["torch", "numpy"] | None = None,
        faults: str | None = None,
        max_worker_restarts: int = 0,
    ) -> None: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None: ...
    def stats(self) -> dict[str, int | float]: ...
    def budget(self) -> dict[str, Any]: ...
