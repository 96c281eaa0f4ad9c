"""PyTorch Lightning's Trainer, strategy='ddp' on 2 CPU processes, with the
loader made in train_dataloader(): forkload's beside torch's.

tests/python/lightning_ddp.py runs as a script (Lightning's ddp launcher
starts the second rank as `python <script> <args>`), once per loader, and
each rank writes what it trained on. Lightning recognises forkload's loader
(a subclass of torch's DataLoader), swaps its RandomSampler for a
DistributedSampler and adds its worker_init_fn (seed_everything(workers=
True)), re-creating the loader as type(loader)(...): the loader each rank
iterated must still be forkload's, every sample read in a forkload worker,
and its batches, losses and final weights those of torch's loader, bit for
bit, each rank on its own half of the data.
"""

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
L = pytest.importorskip("lightning", reason="PyTorch Lightning is not "
                        "installed: pip install 'lightning==2.6.*'")

from loader_helpers import read_ranks, subprocess_env  # noqa: E402

SCRIPT = pathlib.Path(__file__).resolve().parent / "lightning_ddp.py"
TIME_LIMIT = 150
SAMPLES, BATCH, EPOCHS = 40, 4, 2


def fit(loader, out):
    out.mkdir()
    r = subprocess.run([sys.executable, str(SCRIPT), loader, str(out)],
                       capture_output=True, text=True, timeout=TIME_LIMIT,
                       stdin=subprocess.DEVNULL, env=subprocess_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return read_ranks(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("lightning")
    return {loader: fit(loader, base / loader)
            for loader in ("forkload", "torch")}


def test_lightning_ddp_keeps_forkloads_loader_and_workers(runs):
    for rank in runs["forkload"]:
        assert rank["world"] == 2
        assert rank["loader"] == "forkload.dataloader.DataLoader"
        assert rank["sampler"] == "DistributedSampler"
        assert rank["worker_init_fn"]
        assert rank["sharing"] == "file_system"  # forkload's own keyword
        assert rank["from_forkload"] == [1] * (SAMPLES // 2 * EPOCHS)
    for rank in runs["torch"]:
        assert rank["loader"] == "torch.utils.data.dataloader.DataLoader"
        assert rank["from_forkload"] == [0] * (SAMPLES // 2 * EPOCHS)


def test_lightning_ddp_ranks_get_torchs_batches_and_weights(runs):
    for a, b in zip(runs["forkload"], runs["torch"]):
        assert a["rank"] == b["rank"]
        assert a["batches"] == b["batches"], "rank %d" % a["rank"]
        assert a["losses"] == b["losses"], "rank %d" % a["rank"]
        assert a["weights"] == b["weights"], "rank %d" % a["rank"]
    per_epoch = SAMPLES // 2 // BATCH
    ranks = runs["forkload"]
    for epoch in range(EPOCHS):
        seen = [sum(r["batches"][epoch * per_epoch:(epoch + 1) * per_epoch],
                    []) for r in ranks]
        assert sorted(seen[0] + seen[1]) == list(range(SAMPLES))
    assert ranks[0]["weights"] == ranks[1]["weights"]
