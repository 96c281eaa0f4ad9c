"""usage: python decode_digests.py make IMAGES DIR | digest DIR

tests/chroot_test.sh's comparison of forkload's decoders in two userlands,
the build machine's and Debian 11's: `make` writes under DIR an image
folder of the files in IMAGES (tests/images/decode and crop: JPEG, PNG,
WebP, TIFF, BMP, PPM, PGM of every kind forkload decodes), WebDataset
shards of them (.tar, .tar.gz, .tar.bz2, .tar.xz) and an LMDB of them
(with the lmdb module); `digest` prints a line per sample: the dataset,
the sample and the SHA-256 of what forkload's forked workers made of it
(every field of the batch), sorted.  The same lines on both sides: the
wheel's libraries decode the same there.
"""

import hashlib
import io
import os
import shutil
import sys
import tarfile

import numpy as np

EXTS = (".jpg", ".png", ".webp", ".tif", ".bmp", ".ppm", ".pgm")
SHARDS = ("imgs.tar", "imgs.tar.gz", "imgs.tar.bz2", "imgs.tar.xz")


def make(images, out):
    files = sorted(os.path.join(d, f) for d in images.split(os.pathsep)
                   for f in os.listdir(d) if f.endswith(EXTS))
    folder = os.path.join(out, "folder", "all")
    os.makedirs(folder)
    blobs = []
    for path in files:
        shutil.copy(path, folder)
        with open(path, "rb") as f:
            blobs.append(f.read())
    for name in SHARDS:
        mode = "w:" + name.rsplit(".", 1)[1] if name != "imgs.tar" else "w"
        with tarfile.open(os.path.join(out, name), mode) as tar:
            for i, blob in enumerate(blobs):
                info = tarfile.TarInfo("%04d.img" % i)
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    import lmdb
    env = lmdb.open(os.path.join(out, "lmdb"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, blob in enumerate(blobs):
            txn.put(b"%04d" % i, blob)
    env.close()
    with open(os.path.join(out, "max_bytes"), "w") as f:
        f.write("%d\n" % max(len(b) for b in blobs))


def samples(ds):
    """Each sample's fields, as the forked workers made them."""
    import forkload
    for batch in forkload.DataLoader(ds, batch_size=1, num_workers=2,
                                     tensor_type="numpy"):
        yield [np.ascontiguousarray(a[0]) for a in batch]


def digest(out):
    import forkload.datasets as fds
    with open(os.path.join(out, "max_bytes")) as f:
        max_bytes = int(f.read())
    folder = os.path.join(out, "folder")
    sets = {
        "ImageFolder(32)": fds.ImageFolder(folder, 32),
        "ImageFolder((24,40),resize=48,float)": fds.ImageFolder(
            folder, (24, 40), resize=48, float=True),
        "LMDB": fds.decode_images(
            fds.LMDB(os.path.join(out, "lmdb"), max_bytes), 0, 32),
    }
    for name in SHARDS:
        sets["WebDataset " + name] = fds.decode_images(
            fds.WebDataset(os.path.join(out, name),
                           [("__key__", 16), ("img", max_bytes)]),
            "img", 32)
    lines = []
    for what, ds in sets.items():
        for i, fields in enumerate(samples(ds)):
            h = hashlib.sha256()
            for a in fields:
                h.update(str((a.dtype.str, a.shape)).encode())
                h.update(a.tobytes())
            lines.append("%s %d %s" % (what, i, h.hexdigest()))
    print("\n".join(sorted(lines)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["make"] and len(sys.argv) == 4:
        make(sys.argv[2], sys.argv[3])
    elif sys.argv[1:2] == ["digest"] and len(sys.argv) == 3:
        digest(sys.argv[2])
    else:
        sys.exit(__doc__.splitlines()[0])
