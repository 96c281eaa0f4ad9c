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
  tests/images/decode/    small JPEGs and PNGs of every kind PIL reads, and
                          WebP, TIFF, BMP, PPM and PGM of the kinds forkload
                          decodes
  tests/images/crop/      larger JPEGs and a PNG to crop and resize, and
                          a JPEG of colour noise
  tests/images/formats/   tiny images in formats forkload refuses, variants
                          of the others it refuses, and bombs: headers of
                          60000 x 60000 pixels (16383 x 16383 for WebP)
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
  tests/fuzz_FORMAT_corpus/          seeds for tests/fuzz_FORMAT.c (webp,
                                     tiff, bmp, pnm): that format's decode
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
    bombs(root)
    put(os.path.join(root, "wide.png"),
        b"\x89PNG\r\n\x1a\n" +
        png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, 1, 8, 2, 0, 0, 0)) +
        png_chunk(b"IDAT", zlib.compress(b"\0" + bytes(w * 3), 9)) +
        png_chunk(b"IEND", b""))


def bombs(root):
    """Headers that claim 60000 x 60000 pixels (WebP: 16383 x 16383, its
    largest), data of a few bytes: refused from the header."""
    img = natural(8, 6, 98, 0)
    b = bytearray(encoded(img, "BMP"))
    b[18:26] = struct.pack("<ii", 60000, 60000)
    put(os.path.join(root, "bomb.bmp"), bytes(b))
    put(os.path.join(root, "bomb.ppm"), b"P6\n60000 60000\n255\n" +
        bytes(64))
    b = bytearray(encoded(img, "WEBP", lossless=True))
    assert b[12:16] == b"VP8L"
    # VP8L: a signature byte, then 14 bits of width - 1 and of height - 1.
    bits = (16383 - 1) | (16383 - 1) << 14 | (b[24] >> 4) << 28
    b[21:25] = struct.pack("<I", bits | (b[24] & 0xe0) << 24)
    put(os.path.join(root, "bomb.webp"), bytes(b))
    b = encoded(img, "TIFF")
    im = Image.open(io.BytesIO(b))
    assert im.size == (8, 6)
    put(os.path.join(root, "bomb.tif"), tiff_resized(b, 60000, 60000))
    # Variants refused, each with its reason.
    put(os.path.join(root, "p3_ascii.ppm"), b"P3\n2 1\n255\n1 2 3 4 5 6\n")
    put(os.path.join(root, "p5_16bit.pgm"), b"P5\n2 1\n65535\n" + bytes(4))
    put(os.path.join(root, "rle8.bmp"), encoded(img.quantize(8), "BMP")[:30] +
        struct.pack("<I", 1) + encoded(img.quantize(8), "BMP")[34:])


def tiff_resized(b, w, h):
    """A little-endian TIFF whose ImageWidth and ImageLength tags say w, h."""
    assert b[:4] == b"II*\0"
    b = bytearray(b)
    ifd = struct.unpack("<I", b[4:8])[0]
    n = struct.unpack("<H", b[ifd:ifd + 2])[0]
    for k in range(n):
        e = ifd + 2 + 12 * k
        tag, kind = struct.unpack("<HH", b[e:e + 4])
        if tag in (256, 257):
            v = w if tag == 256 else h
            if kind == 3:
                b[e + 2:e + 4] = struct.pack("<H", 4)  # SHORT becomes LONG
            b[e + 8:e + 12] = struct.pack("<I", v)
    return bytes(b)


# --- decoding: every kind of JPEG and PNG (and the others above), read whole ----------------------

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
    return out + other_fixtures(pb, rgba)


# --- WebP, TIFF, BMP, PPM and PGM ------------------------------------------

def bmp_bytes(w, h, bits, rows, palette=b"", topdown=False, colors=0):
    """A BITMAPINFOHEADER BMP: rows top first, each already packed."""
    stride = ((w * bits + 31) >> 3) & ~3
    data = b"".join(r.ljust(stride, b"\0") for r in
                    (rows if topdown else rows[::-1]))
    off = 14 + 40 + len(palette)
    hdr = struct.pack("<IiiHHIIiiII", 40, w, -h if topdown else h, 1, bits,
                      0, len(data), 2835, 2835, colors, 0)
    return (b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off) + hdr +
            palette + data)


def other_fixtures(pb, rgba):
    """37 x 29 images of every variant the other decoders take.  rgba's
    alpha is 0 on its first row, where lossless WebP (exact) keeps the
    colours under it: PIL's convert('RGB') drops alpha, and so must we."""
    out = []
    a = np.asarray(rgba).copy()
    a[0, :, 3] = 0
    rgba = Image.fromarray(a)
    q = pb.quantize(40)
    grey = pb.convert("L")
    out.append(("webp_lossy.webp", encoded(pb, "WEBP", quality=90), "pil"))
    out.append(("webp_lossless.webp", encoded(pb, "WEBP", lossless=True),
                "pil"))
    out.append(("webp_lossy_alpha.webp", encoded(rgba, "WEBP", quality=90),
                "pil"))
    out.append(("webp_lossless_alpha.webp",
                encoded(rgba, "WEBP", lossless=True, exact=True), "pil"))
    out.append(("tiff_raw.tif", encoded(pb, "TIFF"), "pil"))
    out.append(("tiff_lzw.tif", encoded(pb, "TIFF", compression="tiff_lzw"),
                "pil"))
    out.append(("tiff_deflate.tif",
                encoded(pb, "TIFF", compression="tiff_adobe_deflate"), "pil"))
    out.append(("tiff_gray.tif", encoded(grey, "TIFF"), "pil"))
    out.append(("tiff_gray_lzw.tif",
                encoded(grey, "TIFF", compression="tiff_lzw"), "pil"))
    out.append(("tiff_palette.tif", encoded(q, "TIFF"), "pil"))
    out.append(("tiff_rgba_deflate.tif",
                encoded(rgba, "TIFF", compression="tiff_adobe_deflate"),
                "pil"))
    out.append(("bmp_24.bmp", encoded(pb, "BMP"), "pil"))
    out.append(("bmp_palette.bmp", encoded(q, "BMP"), "pil"))
    out.append(("bmp_gray.bmp", encoded(grey, "BMP"), "pil"))
    out.append(("bmp_1bit.bmp", encoded(pb.convert("1"), "BMP"), "pil"))
    # By hand: 32-bit BGRX rows top-down (negative height), and a 4-bit
    # palette of 16 colours whose last index is past a 12-colour palette
    # (PIL: grey).
    px = np.asarray(pb)
    rows = [bytes(np.concatenate([px[y, :, ::-1],
                                  np.full((37, 1), 77, np.uint8)], 1))
            for y in range(29)]
    out.append(("bmp_32_topdown.bmp", bmp_bytes(37, 29, 32, rows,
                                                topdown=True), "pil"))
    idx = np.asarray(pb.quantize(16))
    q16 = np.asarray(pb.quantize(16).getpalette()[:36], np.uint8)
    pal = b"".join(bytes(c[::-1]) + b"\0" for c in q16.reshape(12, 3))
    rows4 = []
    for y in range(29):
        r = list(idx[y]) + [0]
        rows4.append(bytes((r[i] << 4) | r[i + 1] for i in range(0, 37, 2)))
    out.append(("bmp_4bit.bmp", bmp_bytes(37, 29, 4, rows4, pal, colors=12),
                "pil"))
    out.append(("ppm_p6.ppm", encoded(pb, "PPM"), "pil"))
    out.append(("pgm_p5.pgm", encoded(grey, "PPM"), "pil"))
    # By hand: maxval 100 (PIL scales each sample), comments in the header.
    small = (np.asarray(pb).astype(np.uint32) * 100 // 255).astype(np.uint8)
    small[0, 0] = [100, 0, 99]
    out.append(("ppm_maxval100.ppm", b"P6\n37 29\n100\n" + small.tobytes(),
                "pil"))
    out.append(("pgm_comments.pgm",
                b"P5 # a comment\n3#split by a comment\n7 29\t255\n" +
                np.asarray(grey).tobytes(), "pil"))
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
    # Colour noise, 4:2:0, of odd size: every chroma sample differs from
    # its neighbours, so a crop whose decoded columns upsample their edge
    # otherwise than a whole decode shows it (image_test's own check).
    put(os.path.join(root, "d.jpg"), encoded(Image.fromarray(
        np.random.default_rng(10).integers(0, 256, (157, 203, 3),
                                           dtype=np.uint8)),
        "JPEG", quality=95, subsampling=2))
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
        ("decode/webp_lossy.webp", 20, (16, 16)),
        ("decode/webp_lossless_alpha.webp", 40, (36, 36)),
        ("decode/tiff_lzw.tif", 24, (20, 28)),
        ("decode/tiff_palette.tif", 17, (15, 19)),
        ("decode/bmp_4bit.bmp", 33, (30, 40)),
        ("decode/bmp_32_topdown.bmp", 21, (18, 22)),
        ("decode/ppm_maxval100.ppm", 16, (16, 16)),
        ("decode/pgm_comments.pgm", 12, (12, 12)),
    ]
    # Crops of the other formats' fixtures (37 x 29): shrunk, enlarged,
    # flipped.
    other_crops = [
        ("decode/webp_lossy_alpha.webp", (3, 4, 20, 25), (12, 14), 1),
        ("decode/webp_lossless.webp", (10, 2, 9, 8), (16, 16), 0),
        ("decode/tiff_deflate.tif", (0, 0, 29, 37), (10, 13), 1),
        ("decode/tiff_gray_lzw.tif", (5, 20, 20, 15), (24, 18), 0),
        ("decode/bmp_palette.bmp", (1, 1, 27, 30), (14, 14), 0),
        ("decode/bmp_1bit.bmp", (8, 9, 12, 12), (7, 9), 1),
        ("decode/ppm_p6.ppm", (2, 3, 25, 31), (20, 20), 1),
        ("decode/pgm_p5.pgm", (0, 10, 29, 27), (9, 9), 0),
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
    for path, box, size, flip in other_crops:
        img = Image.open(os.path.join(IMAGES, path)).convert("RGB")
        out = F.resized_crop(img, *box, size)
        out = F.hflip(out) if flip else out
        add("crop %s %d %d %d %d %d %d %d" % ((path,) + box + size + (flip,)),
            out, 0)
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
    # The other decoders' (tests/fuzz_format.h): a mode byte, 0 to 2.
    for fmt, prefixes in (("webp", ("webp_",)), ("tiff", ("tiff_",)),
                          ("bmp", ("bmp_",)), ("pnm", ("ppm_", "pgm_"))):
        root = os.path.join(TOP, "tests", "fuzz_%s_corpus" % fmt)
        fresh(root)
        names = sorted(n for n in os.listdir(os.path.join(IMAGES, "decode"))
                       if n.startswith(prefixes))
        for k, name in enumerate(names):
            with open(os.path.join(IMAGES, "decode", name), "rb") as f:
                put(os.path.join(root, name.replace(".", "_")),
                    bytes([k % 3]) + f.read())


def main():
    tree()
    formats()
    decode()
    transforms()
    fuzz_corpus()


if __name__ == "__main__":
    main()
