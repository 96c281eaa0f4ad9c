# Types of forkload's public API.  forkload.dataloader, forkload.datasets,
# forkload._worker and the C module forkload._forkload have stubs of their
# own beside them; py.typed marks the package as typed (PEP 561).

from forkload import _forkload as _forkload
from forkload import datasets as datasets
from forkload._worker import Error as Error
from forkload.dataloader import DataLoader as DataLoader
from forkload.dataloader import get_worker_info as get_worker_info

__version__: str
__all__ = ["DataLoader", "Error", "get_worker_info"]
