"""The training loop of README.md's "From Python", run as it is written.

The first ```python block under the "## From Python" heading is written to a
file in a temporary directory and run by this interpreter in a subprocess,
with the environment inherited (PYTHONPATH names the package under test).
It asserts by itself that its loss went down, so exit status 0 is the check.
It runs again with torch's DataLoader in place of forkload's, the only change
the README says a training loop needs, and both must print the same lines:
the same seed gives the same batches.
"""

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
HEADING = "## From Python"
FORKLOAD_IMPORT = "from forkload import DataLoader"
TORCH_IMPORT = "from torch.utils.data import DataLoader"
# A few seconds on 2 CPUs; the rest is room for a loaded CI machine.
TIME_LIMIT = 120


def readme_block():
    """The first ```python block of the README's "From Python" section."""
    lines = README.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index(HEADING) + 1
    except ValueError:
        pytest.fail(f"{README} has no line {HEADING!r}")
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
    pytest.fail(f"no ```python block under {HEADING!r} in {README}")


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
