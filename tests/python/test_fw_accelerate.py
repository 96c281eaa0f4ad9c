"""Hugging Face Accelerate on 2 CPU ranks (torchrun, gloo): what prepare()
does with forkload's loader, and the way that keeps forkload's workers.

tests/python/accelerate_ddp.py runs under `python -m torch.distributed.run
--standalone --nproc_per_node 2`, training the same small model four ways,
and each rank writes what it trained on:

- accelerator.prepare(model, optimizer, loader): Accelerate recognises
  forkload's loader (a subclass of torch's DataLoader) and shards it, but
  into a torch.utils.data.DataLoader of its own made from the loader's
  arguments: each rank gets its half, the batches and weights of torch's
  loader prepared the same way, read by torch's workers, not forkload's.
- a DistributedSampler in forkload's loader, only the model and optimiser
  prepared (doc/python.md, "Inside frameworks"): forkload's workers read every
  sample, and each rank gets the batches and weights of torch's loader
  used the same way.
"""

import pathlib
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate", reason="Hugging Face Accelerate is not "
                    "installed: pip install accelerate")
if not torch.distributed.is_available() or \
        not torch.distributed.is_gloo_available():
    pytest.skip("this torch is built without torch.distributed's gloo "
                "backend", allow_module_level=True)

from loader_helpers import (read_ranks, subprocess_env,  # noqa: E402
                            torchrun_command)

SCRIPT = pathlib.Path(__file__).resolve().parent / "accelerate_ddp.py"
TIME_LIMIT = 150
SAMPLES, BATCH, EPOCHS = 40, 4, 2
TORCHS = "torch.utils.data.dataloader.DataLoader"
FORKLOADS = "forkload.dataloader.DataLoader"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("accelerate")
    r = subprocess.run(
        torchrun_command(2, out / "logs") + [str(SCRIPT), str(out)],
        capture_output=True, text=True, timeout=TIME_LIMIT,
        stdin=subprocess.DEVNULL, env=subprocess_env())
    assert r.returncode == 0, r.stdout + r.stderr
    ranks = read_ranks(out)
    for rank in ranks:
        assert rank["world"] == 2
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU"
    return ranks


def assert_split(ranks, key):
    """Each epoch, the two ranks' samples are disjoint halves of the data."""
    per_epoch = SAMPLES // 2 // BATCH
    for epoch in range(EPOCHS):
        seen = [sum(r[key]["batches"][epoch * per_epoch:
                                      (epoch + 1) * per_epoch], [])
                for r in ranks]
        assert len(seen[0]) == len(seen[1]) == SAMPLES // 2, key
        assert sorted(seen[0] + seen[1]) == list(range(SAMPLES)), key


def test_accelerate_prepare_shards_forkloads_loader_with_torchs_workers(
        ranks):
    for rank in ranks:
        fl, th = rank["prepared-forkload"], rank["prepared-torch"]
        assert fl["loader"] == th["loader"] == TORCHS
        assert fl["from_forkload"] == [0] * (SAMPLES // 2 * EPOCHS)
        assert fl["batches"] == th["batches"], "rank %d" % rank["rank"]
        assert fl["weights"] == th["weights"], "rank %d" % rank["rank"]
    assert_split(ranks, "prepared-forkload")


def test_accelerate_with_a_distributed_sampler_keeps_forkloads_workers(
        ranks):
    for rank in ranks:
        fl, th = rank["sampler-forkload"], rank["sampler-torch"]
        assert fl["loader"] == FORKLOADS and th["loader"] == TORCHS
        assert fl["from_forkload"] == [1] * (SAMPLES // 2 * EPOCHS)
        assert fl["batches"] == th["batches"], "rank %d" % rank["rank"]
        assert fl["weights"] == th["weights"], "rank %d" % rank["rank"]
    assert_split(ranks, "sampler-forkload")
    assert ranks[0]["sampler-forkload"]["weights"] == \
        ranks[1]["sampler-forkload"]["weights"]
