r"""PyTorch's DataLoader, with workers that fill batches in shared memory.

:class:`forkload.DataLoader` takes the arguments of
:class:`torch.utils.data.DataLoader`, with the same defaults and errors, and
hands out the same batches under the same ``torch.manual_seed``. Its workers
are forked processes that collate each batch straight into a shared memory
segment, and the tensors handed out are views of it: a batch is neither
pickled nor copied on its way. A training loop changes one import::

    # was: from torch.utils.data import DataLoader
    from forkload import DataLoader

:mod:`forkload.datasets` has the C library's built-in datasets (a folder
of images, token shards, LMDB, WebDataset tars, .npy arrays) as datasets
whose workers run no Python at all.

Also here: :func:`forkload.get_worker_info`, as
``torch.utils.data.get_worker_info``, and ``forkload.__version__``, the
version of the forkload library underneath.

The package is typed (PEP 561): ``py.typed`` and a stub beside each module,
the C one included, for mypy and other type checkers.

See ``man forkload.DataLoader``, and ``man 3 forkload`` for the C library.
"""

from forkload import _forkload
from forkload._worker import Error
from forkload.dataloader import DataLoader, get_worker_info
from forkload import datasets  # noqa: E402  (forkload.datasets.ImageFolder...)

__version__ = _forkload.version
__all__ = ["DataLoader", "Error", "get_worker_info"]

