"""The training loop of README.md's "From Python", run as it is written.

The first ```python block under the "## From Python" heading is written to a
file in a temporary directory and run by this interpreter in a subprocess,
with the environment inherited (PYTHONPATH names the package under test).
It asserts by itself that its loss went down, so exit status 0 is the check.
It runs again with torch's DataLoader in place of forkload's, the only change
the README says a training loop needs, and both must print the same lines:
the same seed gives the same batches.

The block of "## Built-in datasets from Python" runs too, over a folder of
images that the build tree's `examples/forkload gen images` writes in place
of its /tmp/imgs.
"""

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
HEADING = "## From Python"
DATASETS_HEADING = "## Built-in datasets from Python"
FORKLOAD_IMPORT = "from forkload import DataLoader"
TORCH_IMPORT = "from torch.utils.data import DataLoader"
# A few seconds on 2 CPUs; the rest is room for a loaded CI machine.
TIME_LIMIT = 120


def readme_block(heading=HEADING):
    """The first ```python block of the README's section `heading`."""
    lines = README.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index(heading) + 1
    except ValueError:
        pytest.fail(f"{README} has no line {heading!r}")
    block = None
    for line in lines[start:]:
        if block is None:
            if line.startswith("## "):
                break
            if line.strip() == "```python":
                block = []
        elif line.strip() == "```":
            return "\n".join(block) + "\n"
        else:
            block.append(line)
    pytest.fail(f"no ```python block under {heading!r} in {README}")


def run(source, tmp_path, name):
    script = tmp_path / name
    script.write_text(source, encoding="utf-8")
    try:
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=os.environ.copy(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIME_LIMIT,
        )
    except subprocess.TimeoutExpired as e:
        # Its output comes as bytes here, whatever text= said.
        out = [b.decode(errors="replace") if isinstance(b, bytes) else b or ""
               for b in (e.stdout, e.stderr)]
        pytest.fail(f"{name} ran past {TIME_LIMIT} s\n--- stdout\n{out[0]}--- stderr\n{out[1]}")
    status = proc.returncode
    if status != 0:
        pytest.fail(
            f"{name} exited with {status}\n"
            f"--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
        )
    return proc.stdout


def with_torch_import(source):
    lines = source.splitlines(keepends=True)
    imports = [i for i, line in enumerate(lines) if line.startswith(FORKLOAD_IMPORT)]
    assert len(imports) == 1, (
        f"the block should import forkload's DataLoader once, as {FORKLOAD_IMPORT!r}")
    lines[imports[0]] = TORCH_IMPORT + "\n"
    return "".join(lines)


def test_readme_training_loop_runs(tmp_path):
    out = run(readme_block(), tmp_path, "readme_loop.py")
    assert "epoch 1: loss" in out, out


def test_readme_training_loop_prints_what_torch_dataloader_prints(tmp_path):
    source = readme_block()
    ours = run(source, tmp_path, "readme_loop.py")
    torchs = run(with_torch_import(source), tmp_path, "readme_loop_torch.py")
    assert ours == torchs


def test_readme_datasets_example_runs(tmp_path):
    import forkload
    # The build tree: <builddir>/python/forkload/__init__.py (a link, in a
    # VPATH build, that abspath keeps), or, where the package tested is
    # pip's (make check-installed), the build tree make check names.
    builddir = os.environ.get("top_builddir") if \
        os.environ.get("FL_PYTHON_INSTALLED") else None
    cli = (pathlib.Path(os.path.abspath(builddir)) if builddir else
           pathlib.Path(os.path.abspath(forkload.__file__)).parents[2]) / \
        "examples" / "forkload"
    if not os.access(cli, os.X_OK):
        pytest.skip(f"no {cli} (make builds it)")
    images = tmp_path / "imgs"
    subprocess.run([str(cli), "gen", "images", str(images), "--samples",
                    "256", "--classes", "4"], check=True,
                   stdout=subprocess.DEVNULL, timeout=TIME_LIMIT)
    source = readme_block(DATASETS_HEADING)
    assert '"/tmp/imgs"' in source
    out = run(source.replace('"/tmp/imgs"', repr(str(images))), tmp_path,
              "readme_datasets.py")
    lines = out.splitlines()
    assert lines[0] == ("256 images, 4 classes: ['class000', 'class001', "
                        "'class002', 'class003']"), out
    assert [line.split(" images/s")[0].rsplit(",", 1)[0] for line in
            lines[1:]] == [
        "epoch %d: 256 images, torch.Size([3, 160, 160])" % e
        for e in (1, 2)], out
