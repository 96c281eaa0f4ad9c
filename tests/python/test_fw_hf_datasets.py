"""A Hugging Face `datasets.Dataset` in torch format (.with_format('torch'))
through forkload.DataLoader beside torch.utils.data.DataLoader.

The table is Arrow in memory; its rows come back as dicts of tensors and
`__getitems__` reads a whole batch of rows at once, which both loaders call
(forkload in its forked workers). The batches must be torch's, shuffled or
not, with or without workers, and with a transform that draws from the
worker's generator (set_transform) the same draws.
"""

import pytest
torch = pytest.importorskip("torch")

datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is "
                               "not installed: pip install datasets")

from loader_helpers import assert_runs_same, run_both  # noqa: E402

N = 30


def table():
    return datasets.Dataset.from_dict({
        "x": [[float(i), -float(i), i / 4.0] for i in range(N)],
        "label": [i % 3 for i in range(N)],
        "text_len": [len(str(i)) for i in range(N)],
    })


def jitter(rows):
    """A batched transform with a random draw (the worker's generator)."""
    x = torch.tensor(rows["x"])
    return {"x": x + torch.rand(x.shape), "label": torch.tensor(rows["label"])}


CASES = {
    "in_order_2_workers": dict(batch_size=4, num_workers=2),
    "shuffled_2_workers": dict(batch_size=4, shuffle=True, num_workers=2),
    "shuffled_drop_last": dict(batch_size=7, shuffle=True, drop_last=True,
                               num_workers=2),
    "shuffled_no_workers": dict(batch_size=5, shuffle=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hf_dataset_torch_format_gives_torchs_batches(case):
    ds = table().with_format("torch")
    assert isinstance(ds[0]["x"], torch.Tensor)
    fl, th = run_both(ds, epochs=2, **CASES[case])
    assert len(fl.epochs[0]) > 0
    assert set(fl.epochs[0][0]) == {"x", "label", "text_len"}
    assert_runs_same(fl, th)


def test_hf_dataset_transform_draws_as_in_torchs_workers():
    ds = table()
    ds.set_transform(jitter)
    fl, th = run_both(ds, epochs=2, batch_size=4, shuffle=True, num_workers=2)
    assert_runs_same(fl, th)


def test_hf_dataset_map_then_torch_format():
    ds = table().map(lambda row: {"y": row["label"] * 2.0}).with_format(
        "torch", columns=["x", "y"])
    fl, th = run_both(ds, batch_size=6, shuffle=True, num_workers=2)
    assert set(fl.epochs[0][0]) == {"x", "y"}
    assert_runs_same(fl, th)
