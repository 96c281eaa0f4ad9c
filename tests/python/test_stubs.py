"""The type stubs of the package (python/forkload/*.pyi, py.typed).

mypy --strict checks a small program typed as a user would type one,
written against forkload's API (it is checked, never run), and must find
it clean; a second program, with calls the stubs must refuse, must fail
on each of them: the stubs are used, and are not Any.  Then mypy's
stubtest imports forkload._forkload (the C module: its types, functions
and constants) and the pure-Python modules and compares each with its
stub: every name of the module is in the stub and every name of the
stub in the module, with the same signatures where Python can read them.

mypy runs in this interpreter (python -m mypy): without it, every test
here skips saying so.  The package is the one under test: the build
tree's python/ (where forkload imports from) is mypy's MYPYPATH.
"""

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip(
    "mypy", reason=f"no mypy for {sys.executable} to check forkload's stubs "
    "(Debian's python3-mypy, or pip install mypy in a venv)")

import forkload  # noqa: E402

# mypy reads numpy's own types and typeshed: some seconds on a slow
# machine, each run.
TIME_LIMIT = 300
# The build tree's python/, which holds the package (links to the source
# tree's files in a VPATH build: abspath keeps them).
PACKAGE_ROOT = pathlib.Path(os.path.abspath(forkload.__file__)).parents[1]
INSTALLED = bool(os.environ.get("FL_PYTHON_INSTALLED"))
ALLOWLIST = pathlib.Path(__file__).resolve().parent / "stubtest_allowlist.txt"
STUBS = ("__init__.pyi", "__main__.pyi", "_forkload.pyi", "_worker.pyi",
         "dataloader.pyi", "datasets.pyi", "py.typed")

GOOD = '''
from typing import Any

import numpy as np

import forkload
from forkload import DataLoader, Error, datasets, get_worker_info


class Squares:
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, index * index


def init(worker_id: int) -> None:
    info = get_worker_info()
    if info is not None:
        assert info.id == worker_id and info.num_workers > 0
        seed: int = info.seed
        print(seed, info.dataset)


def collate(samples: list[Any]) -> list[Any]:
    return samples


def main() -> int:
    loader = DataLoader(Squares(), batch_size=4, shuffle=True,
                        num_workers=2, worker_init_fn=init,
                        collate_fn=collate, persistent_workers=True,
                        prefetch_factor=4, timeout=30.0,
                        multiprocessing_context="fork",
                        sharing="file_system", shuffle_algorithm="bijection",
                        sample_bytes=64, tensor_type="numpy")
    n: int = len(loader)
    for batch in loader:
        n += len(batch)
    loader.load_state_dict(loader.state_dict())
    workers: int = loader.num_workers
    size: int | None = loader.batch_size

    images = datasets.ImageFolder("/data/train", 224, crop="random",
                                  hflip=0.5, float=True)
    image, label = images[0]
    classes: list[str] = images.classes
    samples: list[tuple[str, int]] = images.samples
    tokens = datasets.Tokens(["a.bin", "b.bin"], seq_len=1024)
    value: bytes = datasets.LMDB("/data/lmdb", max_bytes=4096)[0]
    raw = datasets.Raw("x.u8", 16, dtype=np.uint8, shape=(4, 4))
    npy = datasets.NpyZip(["x.npy", "y.npy"])
    shards = datasets.WebDataset(["a.tar", "pipe:cat b.tar"],
                                 {"jpg": 1 << 20, "cls": 16})
    decoded = datasets.decode_images(shards, "jpg", (224, 224))
    for sample in decoded:
        print(sample)
    for ds in (tokens, raw, npy, datasets.NpyDir("d"),
               datasets.NpyArray("a.npy")):
        n += len(ds)
    DataLoader(decoded, batch_size=8, num_workers=4)
    DataLoader(images, batch_size=32, drop_last=True)
    try:
        pass
    except Error as e:
        code: int = e.code
        name: str = e.name
        print(code, name)
    version: str = forkload.__version__
    print(image, label, classes, samples, value, workers, size, version)
    return n
'''

# Each line marked "# error" must draw an error from mypy, and no other.
BAD = '''
from forkload import DataLoader, datasets


class Squares:
    def __len__(self) -> int:
        return 10

    def __getitem__(self, index: int) -> int:
        return index * index


DataLoader(Squares(), sharing="pipe")  # error
DataLoader(Squares(), worker_init_fn=lambda: None)  # error
args = (4, True, None, None, 2, None, False, False, 0, None, None, None)
DataLoader(Squares(), *args, 2)  # error: prefetch_factor is keyword-only
DataLoader(Squares(), nonsense=1)  # error
DataLoader(42)  # error
datasets.Tokens("x.bin")  # error
datasets.ImageFolder("/data", 224, crop="middle")  # error
x: str = DataLoader(Squares()).state_dict()  # error
y: str = len(DataLoader(Squares()))  # error
'''


def mypy(args, tmp_path):
    """python -m mypy (or mypy.stubtest) ARGS in tmp_path, the package
    under test on MYPYPATH."""
    env = os.environ.copy()
    # An installed package (make check-installed) is found as a user's is;
    # mypy refuses site-packages on MYPYPATH.
    if not INSTALLED:
        env["MYPYPATH"] = str(PACKAGE_ROOT)
    env.pop("MYPY_FORCE_COLOR", None)
    try:
        return subprocess.run(
            [sys.executable, "-m", *args], cwd=tmp_path, env=env,
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mypy {' '.join(args)} ran past {TIME_LIMIT} s")


def check(source, tmp_path, name):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return mypy(["mypy", "--strict", "--no-error-summary",
                 "--cache-dir", str(tmp_path / "cache"),
                 "--hide-error-context", "--no-pretty", name], tmp_path)


def test_stub_files_are_beside_the_package():
    where = PACKAGE_ROOT / "forkload"
    missing = [f for f in STUBS if not (where / f).exists()]
    assert not missing, f"{where} has no {missing}"


def test_typed_program_is_clean_under_mypy_strict(tmp_path):
    proc = check(GOOD, tmp_path, "good.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stubs_refuse_wrong_calls(tmp_path):
    proc = check(BAD, tmp_path, "bad.py")
    lines = textwrap.dedent(BAD).splitlines()
    want = {i + 1 for i, line in enumerate(lines) if "# error" in line}
    got = {int(m.group(1)) for m in
           re.finditer(r"^bad\.py:(\d+): error:", proc.stdout, re.M)}
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert got == want, (
        f"mypy flagged lines {sorted(got)}, expected {sorted(want)}:\n"
        + proc.stdout + proc.stderr)


@pytest.mark.parametrize("module", ["forkload._forkload", "forkload"])
def test_stubtest(module, tmp_path):
    # "forkload" is the package and each of its modules, the C one too.
    proc = mypy(["mypy.stubtest", "--allowlist", str(ALLOWLIST),
                 "--ignore-unused-allowlist", module],
                tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
