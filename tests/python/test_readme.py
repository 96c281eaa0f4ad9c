"""The Python programs of README.md and the guides, run as they are written.

A block that the text says runs is marked in its fence, ```python run=NAME
(GitHub shows only the language), in README.md or doc/*.md, and is looked
up here by NAME; tests/docs_test.sh holds every marked block to being named
here, and a fenced block without the mark is a fragment.  A block is
written to a file in a temporary directory and run by this interpreter in a
subprocess, with the environment inherited (PYTHONPATH names the package
under test).

"first-python", the README's training loop, asserts by itself that its loss
went down, so exit status 0 is the check.  It runs again with torch's
DataLoader in place of forkload's, the only change the README says a
training loop needs, and both must print the same lines: the same seed
gives the same batches.

"datasets-python", of doc/datasets.md's "From Python", runs over a folder of
images that the build tree's `examples/forkload gen images` writes in place
of its /tmp/imgs.
"""

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

TOP = pathlib.Path(__file__).resolve().parents[2]
DOCUMENTS = [TOP / "README.md", *sorted((TOP / "doc").glob("*.md"))]
FORKLOAD_IMPORT = "from forkload import DataLoader"
TORCH_IMPORT = "from torch.utils.data import DataLoader"
# A few seconds on 2 CPUs; the rest is room for a loaded CI machine.
TIME_LIMIT = 120


def doc_block(name):
    """The block marked ```python run=`name` in README.md or doc/*.md."""
    fence = "```python run=" + name
    for document in DOCUMENTS:
        lines = document.read_text(encoding="utf-8").splitlines()
        if fence in lines:
            start = lines.index(fence) + 1
            end = lines.index("```", start)
            return "\n".join(lines[start:end]) + "\n"
    pytest.fail(f"no {fence} block in README.md or doc/*.md")


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
    out = run(doc_block("first-python"), tmp_path, "readme_loop.py")
    assert "epoch 1: loss" in out, out


def test_readme_training_loop_prints_what_torch_dataloader_prints(tmp_path):
    source = doc_block("first-python")
    ours = run(source, tmp_path, "readme_loop.py")
    torchs = run(with_torch_import(source), tmp_path, "readme_loop_torch.py")
    assert ours == torchs


def test_datasets_guide_example_runs(tmp_path):
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
    source = doc_block("datasets-python")
    assert '"/tmp/imgs"' in source
    out = run(source.replace('"/tmp/imgs"', repr(str(images))), tmp_path,
              "datasets_guide.py")
    lines = out.splitlines()
    assert lines[0] == ("256 images, 4 classes: ['class000', 'class001', "
                        "'class002', 'class003']"), out
    assert [line.split(" images/s")[0].rsplit(",", 1)[0] for line in
            lines[1:]] == [
        "epoch %d: 256 images, torch.Size([3, 160, 160])" % e
        for e in (1, 2)], out
