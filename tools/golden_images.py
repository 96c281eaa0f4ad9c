"""Fixtures and golden values for forkload's image pipeline.

Writes small images under tests/images/ and what torchvision makes of them
under tests/golden/image_*, so that tests/image_test.c checks
fl_dataset_image_folder and the image stage against torchvision without
needing Python:

    /usr/bin/python3 tools/golden_images.py

(Debian's python3-torchvision 0.14, PIL 9.4 and numpy; run from anywhere,
it writes into the source tree it sits in, replacing what it wrote
before.)  The output is deterministic.

  tests/images/tree/      an ImageFolder tree that exercises torchvision's
                          order: hidden, mixed-case and dotted classes, a
                          symlinked class and subfolder, nested folders
                          whose sorted order is not depth-first, every
                          extension, files that are skipped
  tests/images/decode/    small JPEGs and PNGs of every kind PIL reads
  tests/images/crop/      larger JPEGs and a PNG to crop and resize
  tests/images/formats/   tiny images in formats forkload refuses
  tests/golden/image_folder.txt      ImageFolder(tree).classes and .samples
  tests/golden/image_decode.txt      decode fixtures, their sizes, and
                                     tests/golden/image_pixels/NAME.rgb:
                                     Image.open(p).convert('RGB') bytes
  tests/golden/image_transforms.txt  crops (F.resized_crop, F.hflip) and
                                     evaluation transforms (Resize +
                                     CenterCrop), optionally ToTensor +
                                     Normalize, and their outputs in
                                     tests/golden/image_transforms.bin
  tests/fuzz_image_corpus/           seeds for tests/fuzz_image.c: decode
                                     fixtures after a mode byte
"""

import io
import os
import shutil
import struct
import zlib

import numpy as np
import torch
import torchvision
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image
from torchvision.datasets import ImageFolder

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGES = os.path.join(TOP, "tests", "images")
GOLDEN = os.path.join(TOP, "tests", "golden")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def natural(w, h, seed, noise):
    """Smooth gradients and waves, two hard-edged shapes, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    ph = seed * 0.7
    r = 128 + 90 * np.sin(x / 37.0 + ph) * np.cos(y / 53.0) + 0.2 * (x - w / 2)
    g = 100 + 0.4 * y + 40 * np.sin((x + y) / 23.0 + ph)
    b = 160 - 0.3 * x + 50 * np.cos(np.hypot(x - w * 0.6, y - h * 0.4) / 15.0)
    img = np.stack([r, g, b], -1)
    disc = (x - w * 0.3) ** 2 + (y - h * 0.6) ** 2 < (min(w, h) * 0.15) ** 2
    img[disc] = [230, 40, 60]
    img[int(h * 0.1):int(h * 0.25), int(w * 0.55):int(w * 0.9)] = [20, 200, 90]
    if noise:
        img += rng.normal(0, noise, img.shape)
    return Image.fromarray(np.clip(np.rint(img), 0, 255).astype(np.uint8))


def fresh(path):
    if os.path.lexists(path):
        shutil.rmtree(path)
    os.makedirs(path)


def put(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def encoded(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


# --- PNGs PIL cannot write: 16-bit RGB, Adam7 interlaced -------------------

def png_chunk(kind, data):
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png_bytes(pixels, depth, colour, interlace):
    """A PNG of pixels (h x w x channels, of depth bits)."""
    h, w = pixels.shape[:2]
    raw = pixels.astype(">u2" if depth == 16 else "u1")
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
              (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    if not interlace:
        passes = [(0, 0, 1, 1)]
    data = b""
    for x0, y0, dx, dy in passes:
        sub = raw[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for line in sub:
            # filter 1 (Sub): each byte less the one a pixel before
            b = np.frombuffer(line.tobytes(), "u1").astype(np.int32)
            bpp = (pixels.shape[2] if pixels.ndim == 3 else 1) * depth // 8
            b[bpp:] -= b[:-bpp].copy()
            data += b"\1" + (b & 0xFF).astype("u1").tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, depth, colour, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(data, 9)) +
            png_chunk(b"IEND", b""))


# --- the ImageFolder tree ---------------------------------------------------

def tiny(kind, seed):
    """An 8 x 6 image as the bytes of one format."""
    img = natural(8, 6, seed, 0)
    if kind in ("jpg", "jpeg"):
        return encoded(img, "JPEG", quality=90)
    if kind == "png":
        return encoded(img, "PNG")
    if kind == "pgm":
        return encoded(img.convert("L"), "PPM")
    if kind == "tif":
        return encoded(img, "TIFF")
    if kind == "gif":
        return encoded(img.convert("P"), "GIF")
    return encoded(img, {"ppm": "PPM", "bmp": "BMP", "webp": "WEBP"}[kind],
                   **({"lossless": True} if kind == "webp" else {}))


def tree():
    root = os.path.join(IMAGES, "tree")
    fresh(root)
    # (path, format of its content); None: not an image at all
    files = [
        ("README.txt", None),        # a file at the root: not a class
        ("stray.jpg", "jpg"),        # nor is an image there
        (".hidden/x.png", "png"),    # a hidden folder is a class
        (".hidden/.y.jpg", "jpg"),   # and a hidden file a sample
        ("Dog/b.JPG", "jpg"),
        ("Dog/a.Png", "png"),
        ("Dog/Z.jpg", "jpg"),        # upper case sorts first
        ("Dog/with space.jpeg", "jpg"),
        ("Dog/notes.txt", None),
        ("Dog/meta.json", None),
        ("Dog/noext", None),
        ("Dog/jpg", None),           # the extension needs its dot
        ("Dog/x.jpg.txt", None),
        ("Dog/a/z.jpg", "jpg"),
        ("Dog/a/b/y.jpeg", "jpg"),   # after a-b and a.b, not before
        ("Dog/a.b/w.ppm", "ppm"),
        ("Dog/a-b/v.bmp", "bmp"),
        ("Dog/folder.png/inner.jpg", "jpg"),  # a folder named as an image
        ("a.b/.jpg", "jpg"),         # a name that is only the extension
        ("a.b/img.tif", "tif"),
        ("a.b/img.tiff", "tif"),
        ("a.b/img.webp", "webp"),
        ("a.b/img.pgm", "pgm"),
        ("a.b/UPPER.JPEG", "jpg"),
        ("a.b/lower.PNG", "png"),
        ("cat/m.jpg", "jpg"),
        ("cat/deep/q.jpg", "jpg"),
        ("cat/deep/r.png", "png"),
        ("cat/deep/skip.md", None),
    ]
    for i, (path, kind) in enumerate(files):
        put(os.path.join(root, path),
            tiny(kind, i) if kind else b"not an image\n")
    # A subfolder and a class that are relative symlinks: ImageFolder
    # follows both (os.walk(followlinks=True), scandir's is_dir()).
    os.symlink("../cat/deep", os.path.join(root, "Dog", "link"))
    os.symlink("cat", os.path.join(root, "zebra"))
    ds = ImageFolder(root)
    lines = ["# tools/golden_images.py, torchvision %s" %
             torchvision.__version__,
             "# ImageFolder('tests/images/tree'): class LABEL NAME for",
             "# .classes, sample PATH LABEL for .samples (PATH relative to",
             "# the root; it may hold spaces, the label is the last field)"]
    for label, name in enumerate(ds.classes):
        lines.append("class %d %s" % (label, name))
    for path, label in ds.samples:
        lines.append("sample %s %d" % (os.path.relpath(path, root), label))
    put(os.path.join(GOLDEN, "image_folder.txt"),
        ("\n".join(lines) + "\n").encode())


def formats():
    root = os.path.join(IMAGES, "formats")
    fresh(root)
    for kind, name in (("bmp", "tiny.bmp"), ("gif", "tiny.gif"),
                       ("webp", "tiny.webp"), ("tif", "tiny.tif"),
                       ("ppm", "tiny.ppm")):
        put(os.path.join(root, name), tiny(kind, 99))
    # 262144 x 1: Resize(16384) would make its longer side 2^32 pixels.
    w = 262144
    put(os.path.join(root, "wide.png"),
        b"\x89PNG\r\n\x1a\n" +
        png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, 1, 8, 2, 0, 0, 0)) +
        png_chunk(b"IDAT", zlib.compress(b"\0" + bytes(w * 3), 9)) +
        png_chunk(b"IEND", b""))


# --- decoding: every kind of JPEG and PNG, read whole ----------------------

def decode_fixtures():
    """(name, bytes, golden source): 'pil', or 'highbyte' where forkload
    keeps the high byte of 16-bit grey, which PIL clips (documented)."""
    out = []
    a = natural(64, 48, 2, 3)
    b = natural(37, 29, 3, 3)
    c = natural(50, 70, 4, 3)
    out.append(("jpeg_420.jpg", encoded(a, "JPEG", quality=90,
                                        subsampling=2), "pil"))
    out.append(("jpeg_420_odd.jpg", encoded(b, "JPEG", quality=90,
                                            subsampling=2), "pil"))
    out.append(("jpeg_444.jpg", encoded(b, "JPEG", quality=90,
                                        subsampling=0), "pil"))
    out.append(("jpeg_422.jpg", encoded(c, "JPEG", quality=90,
                                        subsampling=1), "pil"))
    out.append(("jpeg_progressive.jpg", encoded(a, "JPEG", quality=90,
                                                progressive=True), "pil"))
    out.append(("jpeg_gray.jpg", encoded(b.convert("L"), "JPEG",
                                         quality=90), "pil"))
    out.append(("jpeg_cmyk.jpg", encoded(c.convert("CMYK"), "JPEG",
                                         quality=90), "pil"))
    # EXIF orientation 6: PIL (so torchvision) does not rotate, nor may we.
    exif = Image.Exif()
    exif[0x0112] = 6
    out.append(("jpeg_exif_rotated.jpg", encoded(b, "JPEG", quality=90,
                                                 exif=exif.tobytes()), "pil"))
    pb = natural(37, 29, 5, 1)
    pc = natural(50, 70, 6, 1)
    out.append(("png_rgb.png", encoded(pb, "PNG"), "pil"))
    rgba = pb.copy()
    rgba.putalpha(Image.linear_gradient("L").resize(pb.size))
    out.append(("png_rgba.png", encoded(rgba, "PNG"), "pil"))
    pal = pc.quantize(64)
    out.append(("png_palette.png", encoded(pal, "PNG"), "pil"))
    out.append(("png_palette_trns.png", encoded(pal, "PNG", transparency=3),
                "pil"))
    out.append(("png_palette4.png", encoded(pb.quantize(12), "PNG"), "pil"))
    out.append(("png_gray.png", encoded(pb.convert("L"), "PNG"), "pil"))
    out.append(("png_gray_alpha.png", encoded(rgba.convert("LA"), "PNG"),
                "pil"))
    out.append(("png_1bit.png", encoded(pb.convert("1"), "PNG"), "pil"))
    out.append(("png_rgb_trns.png", encoded(pb, "PNG",
                                            transparency=(10, 20, 30)), "pil"))
    arr = np.asarray(pb).astype(np.uint32)
    deep = arr * 256 + 0xC0  # rounding, not the high byte, would differ
    out.append(("png_rgb16.png", png_bytes(deep, 16, 2, 0), "pil"))
    smooth = np.asarray(natural(50, 70, 6, 0))
    out.append(("png_interlaced.png", png_bytes(smooth, 8, 2, 1),
                "pil"))
    grey = np.asarray(pb.convert("L")).astype(np.uint32) * 257
    out.append(("png_gray16.png", png_bytes(grey, 16, 0, 0), "highbyte"))
    return out


def decode():
    root = os.path.join(IMAGES, "decode")
    fresh(root)
    fresh(os.path.join(GOLDEN, "image_pixels"))
    lines = ["# tools/golden_images.py, PIL %s" % Image.__version__,
             "# NAME WIDTH HEIGHT SOURCE: tests/images/decode/NAME and its",
             "# pixels (HEIGHT x WIDTH x 3 bytes) in image_pixels/NAME.rgb:",
             "# SOURCE pil: PIL's Image.open(NAME).convert('RGB');",
             "# highbyte: the high byte of each 16-bit sample, forkload's",
             "# documented difference (PIL clips 16-bit grey to 255)"]
    for name, data, source in decode_fixtures():
        assert len(data) < 6144, (name, len(data))
        put(os.path.join(root, name), data)
        img = Image.open(os.path.join(root, name))
        rgb = np.asarray(img.convert("RGB"))
        if name == "png_rgb16.png":
            # In the exact tests only because PIL keeps the high byte.
            assert (np.asarray(Image.open(io.BytesIO(data)).convert("RGB")) ==
                    np.asarray(natural(37, 29, 5, 1))).all()
        if source == "highbyte":
            assert not (np.asarray(img) >> 8 == rgb[:, :, 0]).all()
            rgb = np.repeat((np.asarray(img) >> 8)[:, :, None], 3, 2)
            rgb = rgb.astype(np.uint8)
        put(os.path.join(GOLDEN, "image_pixels", name + ".rgb"),
            rgb.astype(np.uint8).tobytes())
        lines.append("%s %d %d %s" % (name, img.size[0], img.size[1], source))
    put(os.path.join(GOLDEN, "image_decode.txt"),
        ("\n".join(lines) + "\n").encode())


# --- transforms: crops and evaluation transforms ---------------------------

def as_bytes(img, chw_float):
    if not chw_float:
        return np.asarray(img.convert("RGB")).tobytes()
    t = T.Normalize(MEAN, STD)(T.ToTensor()(img))
    assert t.dtype == torch.float32
    return t.numpy().astype("<f4").tobytes()


def transforms():
    root = os.path.join(IMAGES, "crop")
    fresh(root)
    sources = {
        "a.jpg": encoded(natural(400, 350, 7, 4), "JPEG", quality=90),
        "b.jpg": encoded(natural(500, 333, 8, 4), "JPEG", quality=90,
                         progressive=True),
        "c.png": encoded(natural(240, 160, 9, 0), "PNG", optimize=True),
    }
    for name, data in sources.items():
        put(os.path.join(root, name), data)
    # Per source: the output (H, W) and the boxes (top, left, h, w): one
    # the output's size, smaller ones (upscaled), under 2x (downscaled from
    # full resolution), at 2.25x (still full resolution), several times
    # larger (a JPEG is decoded at a reduced DCT scale), at the corners, the
    # whole image.
    crops = {
        "a.jpg": ((20, 24), [(10, 17, 20, 24), (100, 201, 11, 9),
                             (3, 5, 13, 30), (150, 61, 37, 45),
                             (77, 130, 45, 55), (40, 90, 100, 130),
                             (0, 0, 350, 400), (290, 330, 60, 70),
                             (20, 11, 300, 380), (333, 371, 17, 29)]),
        "b.jpg": ((32, 32), [(0, 0, 32, 32), (301, 468, 32, 32),
                             (17, 250, 20, 12), (100, 100, 60, 50),
                             (9, 33, 150, 150), (0, 0, 333, 500),
                             (120, 7, 200, 90), (50, 300, 283, 200)]),
        "c.png": ((16, 28), [(5, 6, 16, 28), (0, 200, 10, 40),
                             (30, 40, 120, 200), (0, 0, 160, 240),
                             (144, 0, 16, 240), (7, 3, 9, 5)]),
    }
    # (file, Resize, (H, W)): exact at full resolution, a reduced decode,
    # Python's round half to even in the crop's corner, portrait images,
    # and crops larger than the resized image (zero padding).
    centers = [
        ("crop/a.jpg", 200, (24, 32)),
        ("crop/a.jpg", 64, (56, 56)),
        ("crop/b.jpg", 333, (40, 47)),
        ("crop/b.jpg", 120, (60, 72)),
        ("crop/c.png", 20, (24, 30)),
        ("crop/c.png", 100, (104, 40)),
        ("crop/c.png", 77, (61, 61)),
        ("decode/png_rgb.png", 29, (31, 41)),
        ("decode/jpeg_422.jpg", 40, (32, 32)),
        ("decode/png_interlaced.png", 44, (60, 20)),
    ]
    floats = [("crop", "crop/c.png", (30, 40, 120, 200), (16, 28), 1),
              ("crop", "crop/a.jpg", (150, 61, 37, 45), (20, 24), 0),
              ("center", "crop/a.jpg", 200, (24, 32), 0)]
    lines = ["# tools/golden_images.py, torchvision %s, PIL %s" %
             (torchvision.__version__, Image.__version__),
             "# Outputs in image_transforms.bin from OFFSET: uint8 H x W x 3",
             "# (FLOAT 0), or float32 little-endian 3 x H x W after",
             "# ToTensor and Normalize(ImageNet's mean and std) (FLOAT 1).",
             "# crop FILE TOP LEFT BOXH BOXW H W FLIP FLOAT OFFSET:",
             "#   F.resized_crop(img, TOP, LEFT, BOXH, BOXW, (H, W)), then",
             "#   F.hflip if FLIP",
             "# center FILE RESIZE H W FLOAT OFFSET:",
             "#   Resize(RESIZE) then CenterCrop((H, W))",
             "# FILE is relative to tests/images."]
    blob = bytearray()

    def add(line, img, chw_float):
        lines.append("%s %d %d" % (line, chw_float, len(blob)))
        blob.extend(as_bytes(img, chw_float))

    for name in sources:
        img = Image.open(os.path.join(root, name)).convert("RGB")
        size, boxes = crops[name]
        for box in boxes:
            for flip in (0, 1):
                out = F.resized_crop(img, *box, size)
                if flip:
                    out = F.hflip(out)
                add("crop crop/%s %d %d %d %d %d %d %d" %
                    ((name,) + box + size + (flip,)), out, 0)
    for path, resize, size in centers:
        img = Image.open(os.path.join(IMAGES, path)).convert("RGB")
        out = T.CenterCrop(size)(T.Resize(resize)(img))
        add("center %s %d %d %d" % ((path, resize) + size), out, 0)
    for kind, path, arg, size, flip in floats:
        img = Image.open(os.path.join(IMAGES, path)).convert("RGB")
        if kind == "crop":
            out = F.resized_crop(img, *arg, size)
            out = F.hflip(out) if flip else out
            add("crop %s %d %d %d %d %d %d %d" %
                ((path,) + arg + size + (flip,)), out, 1)
        else:
            out = T.CenterCrop(size)(T.Resize(arg)(img))
            add("center %s %d %d %d" % ((path, arg) + size), out, 1)
    put(os.path.join(GOLDEN, "image_transforms.txt"),
        ("\n".join(lines) + "\n").encode())
    put(os.path.join(GOLDEN, "image_transforms.bin"), bytes(blob))


def fuzz_corpus():
    """Seeds for tests/fuzz_image.c: a mode byte (its stage; mode 2 takes a
    box of 4 bytes next), then a decode fixture."""
    root = os.path.join(TOP, "tests", "fuzz_image_corpus")
    fresh(root)
    seeds = [("jpeg_420.jpg", b"\0"), ("jpeg_progressive.jpg", b"\1"),
             ("jpeg_cmyk.jpg", b"\2\5\7\40\30"), ("jpeg_gray.jpg", b"\3"),
             ("jpeg_422.jpg", b"\x81"), ("png_interlaced.png", b"\0"),
             ("png_palette_trns.png", b"\1"),
             ("png_rgb16.png", b"\x82\3\1\20\30"),
             ("png_gray_alpha.png", b"\3"), ("png_1bit.png", b"\x41")]
    for name, mode in seeds:
        with open(os.path.join(IMAGES, "decode", name), "rb") as f:
            put(os.path.join(root, name.replace(".", "_")), mode + f.read())


def main():
    tree()
    formats()
    decode()
    transforms()
    fuzz_corpus()


if __name__ == "__main__":
    main()
