r"""forkload's built-in datasets as PyTorch datasets.

Each class here wraps one of the C library's datasets (``man
fl_dataset_image_folder``, ``fl_dataset_tokens``, ``fl_dataset_lmdb``,
``fl_dataset_webdataset``, ``fl_dataset_npy_dir``) and is meant as the
``dataset`` of :class:`forkload.DataLoader`: its workers then run no Python
at all (but a ``worker_init_fn``, which is yours). They read, decode, crop
and convert each sample in C straight into the batch's shared segment, and
each field of a batch reaches you as a tensor that is a view of that
segment (torch, through DLPack; numpy arrays with ``tensor_type='numpy'``).

A batch is what ``default_collate`` makes of the samples: a list of one
array per field, each with the batch first (``[images, labels]`` for an
image folder), or the array alone for a dataset of one field. Where the C
dataset records how many bytes each value took (:class:`LMDB`,
:class:`WebDataset`), the list ends with those sizes, ``int64``.

Shuffling, samplers (a custom one's batches must all have ``batch_size``
samples but the last), ``DistributedSampler``, ``persistent_workers``,
``state_dict()`` and ``load_state_dict()`` apply as for any dataset. The
random crops and flips are drawn from ``fl_sample_seed``, keyed by the
loader's base seed (drawn from torch's generator, as PyTorch draws it) and
the epoch: the same under the same ``torch.manual_seed`` whatever the
number of workers, and new each epoch. ``collate_fn`` must be ``None``.

A sample that fails (a truncated JPEG, a value over its ``max_bytes``)
raises :class:`forkload.Error` at its batch, naming the file and what is
wrong, and the next ``next()`` goes on with the next batch.

See ``man forkload.datasets``.
"""

import os

import numpy as np

from forkload import _forkload

try:
    import torch
    from torch.utils.data import Dataset as _Dataset
    from torch.utils.data import IterableDataset as _IterableDataset
except ImportError:  # numpy arrays, without torch
    torch = None
    _Dataset = _IterableDataset = object

__all__ = ["ImageFolder", "Tokens", "LMDB", "WebDataset", "NpyDir",
           "NpyArray", "NpyZip", "Raw", "decode_images"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PIL_MAX_PIXELS = 89478485  # PIL's Image.MAX_IMAGE_PIXELS
# torchvision's, which ImageFolder accepts (fl_dataset_image_folder decodes
# every one of them: JPEG, PNG, PPM/PGM, BMP, TIFF, WebP).
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif",
                  ".tiff", ".webp")

# numpy's dtypes that a batch can hold, by the names _forkload knows.
_DTYPES = {"b1": "bool", "u1": "uint8", "i1": "int8", "i2": "int16",
           "i4": "int32", "i8": "int64", "f2": "float16", "f4": "float32",
           "f8": "float64", "c8": "complex64", "c16": "complex128"}


def _dtype_name(dtype, what):
    dtype = np.dtype(dtype)
    name = _DTYPES.get(dtype.kind + str(dtype.itemsize))
    if name is None or dtype.byteorder == ">" or (
            dtype.byteorder == "=" and np.little_endian is False):
        raise TypeError(f"forkload.datasets: {what} has dtype {dtype.str}, "
                        "which a batch cannot hold (torch has no unsigned "
                        "type but uint8, nor big-endian ones)")
    return name


def _paths(paths):
    if isinstance(paths, (str, bytes, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def _npy_header(path):
    """(dtype, shape, fortran_order) of a .npy file, its header only."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    return dtype, shape, fortran


def _image_options(size, crop, resize, hflip, scale, ratio, chw_float, mean,
                   std, max_pixels):
    """fl_image_options as keywords, and the image field's layout."""
    if isinstance(size, int):
        height = width = size
    else:
        height, width = size
    if crop not in ("center", "random"):
        raise ValueError("crop should be 'center' (Resize, then CenterCrop: "
                         "torchvision's evaluation transform) or 'random' "
                         f"(RandomResizedCrop), not {crop!r}")
    opts = dict(height=int(height), width=int(width),
                crop=1 if crop == "random" else 0,
                resize=0 if resize is None else int(resize),
                hflip=hflip, scale=tuple(scale), ratio=tuple(ratio),
                chw_float=bool(chw_float), mean=tuple(mean), std=tuple(std),
                max_pixels=int(max_pixels))
    field = (("float32", (3, opts["height"], opts["width"])) if chw_float
             else ("uint8", (opts["height"], opts["width"], 3)))
    return opts, field


def _copy(x):
    return x.clone() if torch is not None and isinstance(x, torch.Tensor) \
        else np.array(x)


class _Native:
    """What every dataset here shares: its _forkload.NativeDataset, and
    one sample read in this process by a loader without workers."""

    _native = None

    def _one(self, sampler, batch_size=None):
        from forkload.dataloader import DataLoader
        loader = DataLoader(self, sampler=sampler, batch_size=batch_size)
        for batch in loader:
            if isinstance(batch, list):
                return tuple(_copy(x) for x in batch)
            return _copy(batch)
        raise IndexError("forkload.datasets: no sample")


class _MapNative(_Native, _Dataset):
    """A map-style dataset of the C library's."""

    def __len__(self):
        return self._native.len

    def _index(self, index):
        n = len(self)
        if not isinstance(index, int) and hasattr(index, "__index__"):
            index = index.__index__()
        if not isinstance(index, int):
            raise TypeError(f"{type(self).__name__} indices must be "
                            f"integers, not {type(index).__name__}")
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"{type(self).__name__} index out of range "
                             f"({n} samples)")
        return index

    def __getitem__(self, index):
        """Sample ``index``, read and made in this process as a worker
        would make it (a tuple of its fields, or its one field), copied
        out of the loader's memory. A random crop draws its seed from
        torch's generator, as torchvision's transforms draw from it."""
        return self._one([self._index(index)])


class _StreamNative(_Native, _IterableDataset):
    """An iterable-style dataset of the C library's."""

    def __iter__(self):
        """Its samples, read in this process (each a tuple of its fields
        and sizes), as one worker reads all the shards."""
        from forkload.dataloader import DataLoader
        for sample in DataLoader(self, batch_size=None):
            yield tuple(_copy(x) for x in sample) if isinstance(
                sample, list) else _copy(sample)


class ImageFolder(_MapNative):
    r"""torchvision's ``ImageFolder`` with its transforms, in C
    (``fl_dataset_image_folder``).

    Classes are the sorted subfolders of ``root`` and sample ``i`` is
    torchvision's ``samples[i]``: the same walk, sort and extensions. In a
    worker each image is decoded (JPEG, PNG, WebP, TIFF, BMP, PPM, PGM) and
    made as torchvision's evaluation transform (``crop='center'``:
    ``Resize(resize)`` then ``CenterCrop(size)``) or training transform
    (``crop='random'``: ``RandomResizedCrop(size, scale, ratio)``) would,
    then flipped with probability ``hflip``.

    A batch is ``[images, labels]``: images ``uint8`` ``N x H x W x 3``
    (RGB), or with ``float=True`` ``float32`` ``N x 3 x H x W`` normalised
    as ``ToTensor()`` and ``Normalize(mean, std)`` make them; labels
    ``int64`` ``N``. ``ds[i]`` is ``(image, label)``, one image without the
    batch axis and an int, made in this process.

    Args:
        root (str or os.PathLike): the folder of class folders.
        size (int or (int, int)): the output's height and width.
        crop (str): ``'center'`` or ``'random'``. (default: ``'center'``)
        resize (int, optional): with ``crop='center'``, the shorter side's
            size before the crop, as ``Resize(resize)``; ``None`` is the
            output's height. (default: ``None``)
        hflip (float): the probability of a horizontal flip. (default: 0)
        scale, ratio ((float, float)): ``RandomResizedCrop``'s.
        float (bool): ``float32`` CHW, normalised, instead of ``uint8`` HWC.
        mean, std ((float, float, float)): ``Normalize``'s; ImageNet's.
        max_pixels (int): larger images fail their batch; PIL's limit.

    Attributes (torchvision's): ``root``, ``classes``, ``class_to_idx``,
    ``samples`` (``[(path, label), ...]``), ``imgs`` (the same),
    ``targets`` and ``extensions``.
    """

    def __init__(self, root, size, crop="center", resize=None, hflip=0.0,
                 scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 float=False, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                 max_pixels=PIL_MAX_PIXELS):
        self.root = os.path.expanduser(os.fspath(root))
        opts, field = _image_options(size, crop, resize, hflip, scale, ratio,
                                     float, mean, std, max_pixels)
        self.size = (opts["height"], opts["width"])
        self.crop = crop
        self.float = bool(float)
        self._native = _forkload.image_folder(
            self.root, [field, ("int64", ())], **opts)
        self.classes = self._native.classes()
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = self._native.samples()
        self.imgs = self.samples
        self.targets = [s[1] for s in self.samples]
        self.extensions = IMG_EXTENSIONS

    def __getitem__(self, index):
        """``(image, label)``: sample ``index`` made in this process, the
        image as a worker makes it (without the batch axis)."""
        image, label = self._one([self._index(index)])
        return image, int(label)

    def __repr__(self):
        return "\n".join([
            f"Dataset {type(self).__name__}",
            f"    Number of datapoints: {len(self)}",
            f"    Root location: {self.root}",
            f"    Transform (in C): {self.crop} crop to "
            f"{self.size[0]}x{self.size[1]}"
            + (", float CHW normalised" if self.float else ", uint8 HWC")])


class Tokens(_MapNative):
    r"""llm.c's token shards (``fl_dataset_tokens``): sample ``i`` is the
    ``i``-th window of ``seq_len + 1`` tokens, each shard's windows starting
    every ``seq_len`` tokens, the shards in the order given.

    A batch is ``[inputs, targets]``, both ``int32`` ``N x seq_len``, the
    targets one token on. ``ds[i]`` is ``(inputs, targets)``.

    Args:
        paths (str or list of str): the shards (llm.c's ``.bin`` files).
        seq_len (int): tokens per window, ``T``.
    """

    def __init__(self, paths, seq_len):
        self.paths = _paths(paths)
        self.seq_len = int(seq_len)
        field = ("int32", (self.seq_len,))
        self._native = _forkload.tokens(self.paths, self.seq_len,
                                        [field, field])


class LMDB(_MapNative):
    r"""An LMDB environment, read-only (``fl_dataset_lmdb``): sample ``i`` is
    the value of the ``i``-th key in key order.

    A batch is ``[values, sizes]``: values ``uint8`` ``N x max_bytes``,
    each value's bytes first and the rest of its row zeroed, and sizes
    ``int64`` ``N``, each value's length. A value longer than
    ``max_bytes`` fails its batch naming its key. ``ds[i]`` is the value,
    as ``bytes``. A build of forkload without liblmdb raises
    :class:`forkload.Error` naming the package (``liblmdb-dev``).

    Args:
        path (str): the environment's directory (holding ``data.mdb``), or
            the file itself.
        max_bytes (int): the room of one value in a batch.
    """

    def __init__(self, path, max_bytes):
        self.path = os.fspath(path)
        self.max_bytes = int(max_bytes)
        self._native = _forkload.lmdb(self.path, self.max_bytes,
                                      [("uint8", (self.max_bytes,))])

    def __getitem__(self, index):
        """The value of the ``index``-th key, as bytes."""
        values, sizes = self._one([self._index(index)])
        return bytes(np.asarray(values)[:int(sizes)])


class WebDataset(_StreamNative):
    r"""WebDataset's tar shards, an iterable dataset
    (``fl_dataset_webdataset``): a sample is a run of members sharing a
    key, and each extension of ``fields`` a field, up to its max bytes
    (``'__key__'``: the key itself). Shards go to ranks as webdataset's
    ``split_by_node`` and to a rank's workers as ``split_by_worker``.
    A shard may be compressed (``.tar.gz``, ``.tar.bz2``, ``.tar.xz``,
    ``.tar.zst``), or be ``'pipe:COMMAND'``, the output of a command run
    by ``/bin/sh`` in the worker, as webdataset's ``pipe:`` URLs
    (``'pipe:curl -sf https://host/train-0000.tar'``); a command that
    fails fails its batch naming it and its status.

    A batch is ``[field_0, ..., field_k, sizes]``: each field ``uint8``
    ``N x max_bytes``, and sizes ``int64`` ``N x (k + 1)``, each member's
    length. A sample without a member asked for, a member over its max, a
    corrupt tar fail their batch naming the shard and the key, and the
    stream goes on. A build without libarchive raises
    :class:`forkload.Error` naming the package (``libarchive-dev``).

    Args:
        shards (str or list of str): the tar files, or ``pipe:``
            commands.
        fields (dict or list of (str, int)): each extension and its max
            bytes, in the order of the batch's fields.
    """

    def __init__(self, shards, fields):
        self.shards = _paths(shards)
        items = list(fields.items()) if hasattr(fields, "items") \
            else [tuple(f) for f in fields]
        self.fields = [str(e) for e, _ in items]
        self.max_bytes = [int(m) for _, m in items]
        self._native = _forkload.webdataset(
            self.shards, self.fields, self.max_bytes,
            [("uint8", (m,)) for m in self.max_bytes])


class NpyDir(_MapNative):
    r"""A directory of same-shaped ``.npy`` files, one sample each, in the
    order of their sorted names (``fl_dataset_npy_dir``). A batch is one
    array, ``N x *shape``, of the files' dtype.

    Args:
        root (str): the directory.
    """

    def __init__(self, root):
        self.root = os.fspath(root)
        names = sorted(n for n in os.listdir(self.root)
                       if n.endswith(".npy"))
        if not names:
            raise ValueError(f"forkload: {self.root}: no .npy file")
        dtype, shape, _ = _npy_header(os.path.join(self.root, names[0]))
        self.dtype, self.shape = dtype, tuple(shape)
        self._native = _forkload.npy_dir(
            self.root, [(_dtype_name(dtype, names[0]), self.shape)])


class NpyArray(_MapNative):
    r"""The rows of one ``.npy`` array (``fl_dataset_npy_array``): sample
    ``i`` is ``array[i]``. A batch is one array, ``N x *shape[1:]``.

    Args:
        path (str): the ``.npy`` file.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        dtype, shape, _ = _npy_header(self.path)
        self.dtype, self.shape = dtype, tuple(shape)
        self._native = _forkload.npy_array(
            self.path, [(_dtype_name(dtype, self.path), self.shape[1:])])


class NpyZip(_MapNative):
    r"""``.npy`` arrays side by side with the same first dimension, as
    ``TensorDataset(X, y)`` (``fl_dataset_npy_zip``): sample ``i`` is row
    ``i`` of each. A batch is a list of one array per file.

    Args:
        paths (list of str): the ``.npy`` files, one field each.
    """

    def __init__(self, paths):
        self.paths = _paths(paths)
        fields = []
        for p in self.paths:
            dtype, shape, _ = _npy_header(p)
            fields.append((_dtype_name(dtype, p), tuple(shape)[1:]))
        self._native = _forkload.npy_zip(self.paths, fields)


class Raw(_MapNative):
    r"""Fixed-size records after an optional header (``fl_dataset_raw``).
    A batch is one array ``N x *shape`` of ``dtype``.

    Args:
        path (str): the file.
        record_bytes (int): the bytes of one record.
        header_bytes (int): bytes to skip first. (default: 0)
        dtype: numpy's name of the records' element type. (default:
            ``'uint8'``)
        shape (tuple of int, optional): one record's shape; ``None`` is
            ``(record_bytes // itemsize,)``.
    """

    def __init__(self, path, record_bytes, header_bytes=0, dtype="uint8",
                 shape=None):
        self.path = os.fspath(path)
        self.dtype = np.dtype(dtype)
        if shape is None:
            shape = (int(record_bytes) // self.dtype.itemsize,)
        self.shape = tuple(int(d) for d in shape)
        self._native = _forkload.raw(
            self.path, int(record_bytes), int(header_bytes),
            [(_dtype_name(self.dtype, "Raw"), self.shape)])


class _DecodedMap(_MapNative):
    """decode_images over a map-style dataset."""


class _DecodedStream(_StreamNative):
    """decode_images over a stream."""


def decode_images(dataset, field, size, crop="center", resize=None,
                  hflip=0.0, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                  float=False, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                  max_pixels=PIL_MAX_PIXELS):
    r"""The image stage of :class:`ImageFolder` over a field of encoded
    images (``fl_dataset_decode_images``, ``fl_iterable_decode_images``).

    Returns a dataset of the same kind as ``dataset`` (an :class:`LMDB`, a
    :class:`WebDataset`, or another of this module's): its fields are
    ``dataset``'s, with field ``field`` decoded and transformed as
    :class:`ImageFolder`'s arguments of the same names say (``uint8``
    ``H x W x 3``, or ``float32`` ``3 x H x W``), and the other fields, the
    sizes too, passed through. Over a stream, the ``k``-th sample a
    stream gives in an epoch draws its crop from ``fl_sample_seed(k)``.
    ``dataset`` stays open as long as the result does.

    Args:
        dataset: a forkload.datasets dataset.
        field (int or str): the field's index, or a WebDataset's extension.
        size, crop, resize, hflip, scale, ratio, float, mean, std,
            max_pixels: as :class:`ImageFolder`'s.
    """
    native = getattr(dataset, "_native", None)
    if not isinstance(native, _forkload.NativeDataset):
        raise TypeError("decode_images takes a forkload.datasets dataset, "
                        f"not {type(dataset).__name__}")
    if isinstance(field, str):
        names = getattr(dataset, "fields", None)
        if not isinstance(names, list) or field not in names:
            raise ValueError(f"decode_images: no field {field!r} in "
                             f"{type(dataset).__name__}")
        field = names.index(field)
    opts, image = _image_options(size, crop, resize, hflip, scale, ratio,
                                 float, mean, std, max_pixels)
    layout = native.layout
    if not 0 <= field < len(layout):
        raise ValueError(f"decode_images: field {field} of a dataset of "
                         f"{len(layout)} fields")
    layout[field] = image
    out = (_DecodedStream if native.iterable else _DecodedMap)()
    out._native = _forkload.decode_images(native, field, layout, **opts)
    out.dataset = dataset
    out.field = field
    if isinstance(getattr(dataset, "fields", None), list):
        out.fields = dataset.fields
    return out
