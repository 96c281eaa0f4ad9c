"""examples/python/train_torchrun.py under torchrun, 2 CPU ranks (gloo), with
forkload's loader and with torch's.

torchrun runs as `python -m torch.distributed.run --standalone` (its own
rendezvous on a free port) from this interpreter, with the environment
inherited and the package under test first on PYTHONPATH. Each rank writes the
indices of its batches, its losses and its final weights: with forkload's
loader they must be torch's, rank for rank and bit for bit, the two ranks'
shards disjoint and together the whole dataset each epoch, and the loader
forkload's (a subclass of torch's DataLoader).
"""

import pathlib
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed.run", reason="this torch has no "
                    "torchrun (torch.distributed.run)")
if not torch.distributed.is_available() or \
        not torch.distributed.is_gloo_available():
    pytest.skip("this torch is built without torch.distributed's gloo "
                "backend", allow_module_level=True)

from loader_helpers import (read_ranks, subprocess_env,  # noqa: E402
                            torchrun_command)

SCRIPT = (pathlib.Path(__file__).resolve().parents[2] / "examples" /
          "python" / "train_torchrun.py")
# Some 10 s each on 2 busy CPUs (two interpreters importing torch).
TIME_LIMIT = 120
SAMPLES, BATCH, EPOCHS = 40, 4, 2


def torchrun(loader, out):
    out.mkdir()
    r = subprocess.run(
        torchrun_command(2, out / "logs") +
        [str(SCRIPT), "--loader", loader,
         "--out", str(out), "--samples", str(SAMPLES),
         "--batch-size", str(BATCH), "--epochs", str(EPOCHS),
         "--workers", "2"],
        capture_output=True, text=True, timeout=TIME_LIMIT,
        stdin=subprocess.DEVNULL, env=subprocess_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return read_ranks(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("torchrun")
    return {loader: torchrun(loader, base / loader)
            for loader in ("forkload", "torch")}


def test_torchrun_ranks_get_torchs_batches_and_weights(runs):
    fl, th = runs["forkload"], runs["torch"]
    for a, b in zip(fl, th):
        assert a["rank"] == b["rank"] and a["world"] == 2
        assert a["loader"] == "forkload.dataloader.DataLoader"
        assert a["is_torch_dataloader"]
        assert a["batches"] == b["batches"], "rank %d" % a["rank"]
        assert a["losses"] == b["losses"], "rank %d" % a["rank"]
        assert a["weights"] == b["weights"], "rank %d" % a["rank"]
    # DDP keeps the replicas equal.
    assert fl[0]["weights"] == fl[1]["weights"]


def test_torchrun_ranks_split_each_epoch(runs):
    per_epoch = SAMPLES // 2 // BATCH
    for loader, ranks in runs.items():
        for epoch in range(EPOCHS):
            seen = [sum(r["batches"][epoch * per_epoch:
                                     (epoch + 1) * per_epoch], [])
                    for r in ranks]
            assert len(seen[0]) == len(seen[1]) == SAMPLES // 2, loader
            assert sorted(seen[0] + seen[1]) == list(range(SAMPLES)), loader
        # A new order each epoch (set_epoch).
        assert ranks[0]["batches"][:per_epoch] != \
            ranks[0]["batches"][per_epoch:]
