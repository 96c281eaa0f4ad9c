"""examples/python/train_images.py, a few steps with each loader.

The example trains torchvision's ResNet-18 on an image folder and prints
one summary line (``train_images: key=value ...``); here it runs three
steps at 32 x 32 over a folder of small JPEGs written with PIL, with
forkload's loader and with torch's, each in a subprocess of this
interpreter with the environment inherited (PYTHONPATH names the package
under test). The summary must parse, count the steps and images after the
warm-up step, and give a finite loss and shares between 0 and 1. Its
timings are not checked: `make bench` measures them.
"""

import math
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
# A torchvision built for another torch fails with more than ImportError.
try:
    import torchvision  # noqa: F401
except Exception as e:  # noqa: BLE001
    pytest.skip("the example trains torchvision's ResNet-18, and torchvision "
                "cannot be imported here (%s: %s): with Debian's python3, "
                "apt-get install python3-torchvision; elsewhere the "
                "torchvision built for the installed torch" % (
                    type(e).__name__, str(e).splitlines()[-1] if str(e) else ""),
                allow_module_level=True)
from PIL import Image  # noqa: E402  (torchvision's dependency)
import numpy as np  # noqa: E402

SCRIPT = (pathlib.Path(__file__).resolve().parents[2] / "examples" /
          "python" / "train_images.py")
# A few seconds each on 2 CPUs; the rest is room for a loaded machine.
TIME_LIMIT = 90
SUMMARY = re.compile(r"^train_images: ((?:\w+=\S+ ?)+)$", re.M)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """24 JPEGs of 40 to 63 x 36 to 59 pixels in 3 class folders."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i in range(24):
        d = root / f"class{i % 3}"
        d.mkdir(exist_ok=True)
        h, w = 36 + int(rng.integers(24)), 40 + int(rng.integers(24))
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(d / f"{i:04d}.jpg", quality=90)
    return root


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, timeout=TIME_LIMIT)


@pytest.mark.parametrize("loader", ["forkload", "torch"])
def test_train_images_summary_parses_and_the_loss_is_finite(folder, loader):
    r = run(folder, "--loader", loader, "--steps", 3, "--warmup", 1,
            "--size", 32, "--batch-size", 8, "--workers", 2)
    assert r.returncode == 0, r.stderr
    m = SUMMARY.findall(r.stdout)
    assert len(m) == 1, r.stdout
    fields = dict(kv.split("=", 1) for kv in m[0].split())
    assert fields["loader"] == loader
    assert fields["arch"] == "resnet18" and fields["device"] == "cpu"
    assert int(fields["steps"]) == 2 and int(fields["images"]) == 16
    assert float(fields["images_per_s"]) > 0
    assert 0 <= float(fields["data_wait_share"]) <= 1
    assert math.isfinite(float(fields["loss"]))
    assert "epoch 1: 3 steps, 24 images" in r.stdout, r.stdout


def test_train_images_refuses_cuda_where_there_is_none(folder, capsys):
    import importlib.util

    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    spec = importlib.util.spec_from_file_location("train_images", SCRIPT)
    train_images = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_images)
    with pytest.raises(SystemExit) as e:
        train_images.parse_args([str(folder), "--device", "cuda"])
    assert e.value.code == 2
    assert "torch.cuda.is_available() is False" in capsys.readouterr().err
