# Types of forkload._worker (internal: what forkload's workers run in
# Python, and forkload.Error).

from collections.abc import Callable
from typing import Any, NoReturn

class Leaf(tuple[Any, ...]): ...

class WorkerInfo:
    """get_worker_info() in a worker."""

    id: int
    num_workers: int
    seed: int
    dataset: Any
    def __init__(self, **kwargs: Any) -> None: ...

def get_worker_info() -> WorkerInfo | None: ...
def numpy_seed(base_seed: int, worker_id: int) -> list[int]: ...
def one_thread() -> None: ...
def setup(num_workers: int, dataset: object,
          worker_init_fn: Callable[[int], object] | None, worker_id: int,
          base_seed: int) -> None: ...
def wrap(exc: BaseException, worker_id: int,
         max_bytes: int = 65536) -> bytes: ...

class KeyErrorMessage(str): ...

def reraise(rec: tuple[Any, ...]) -> NoReturn: ...

class Error(RuntimeError):
    """An error of libforkload."""

    code: int
    """libforkload's (negative) error code."""
    name: str
    """Its FL_E* name."""
    def __init__(self, message: str, code: int = 0,
                 name: str = "") -> None: ...

def error(code: int, why: str, name: str) -> Error: ...
