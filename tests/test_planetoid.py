"""Planetoid model variants, the generic classification objective, and a short end-to-end run on Cora."""

import os
import pathlib
from dataclasses import dataclass

import pytest
import torch

from genfeat.models.planetoid import PlanetoidModel
from genfeat.objectives.classification import ClassificationObjective

DATA = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))


@dataclass
class _Out:
    logits: torch.Tensor


class _Fixed(torch.nn.Module):
    def forward(self, x):
        return _Out(x)


def test_classification_objective_sums_and_counts():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    labels = torch.tensor([0, 0, -1])
    out = ClassificationObjective()(_Fixed(), {"x": logits, "labels": labels})
    want = torch.nn.functional.cross_entropy(logits[:2], labels[:2], reduction="sum")
    assert out.count == 2 and out.logs["correct"] == 1.0
    assert torch.allclose(out.loss_sum, want)


@pytest.mark.parametrize("mode", ["t", "i", "g"])
def test_variants_shapes_and_feature_use(mode):
    torch.manual_seed(0)
    x = torch.rand(6, 4)
    m = PlanetoidModel(x, 3, mode, embedding_size=5)
    out = m(torch.tensor([0, 2]))
    assert out.logits.shape == (2, 3) and out.embedding.shape == (2, 5)
    assert m.context_score(torch.tensor([0, 1]), torch.tensor([2, 3])).shape == (2,)
    before = m(torch.tensor([0])).logits.clone()
    m.features[0] += 1.0
    changed = not torch.allclose(before, m(torch.tensor([0])).logits)
    assert changed == (mode != "g")
    if mode == "i":
        # Eq. 3.14: the embedding is a function of the features
        e0 = m.embed(torch.tensor([0]))
        m.features[0] -= 1.0
        assert not torch.allclose(e0, m.embed(torch.tensor([0])))


@pytest.mark.skipif(not (DATA / "planetoid" / "ind.cora.x").is_file(), reason="Planetoid data not found")
def test_short_run_learns(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))
    from genfeat.methods.planetoid import PlanetoidRecipe, run

    torch.set_num_threads(1)
    cfg = PlanetoidRecipe(dataset="cora", pretrain_steps=100, steps=200, context_batch=50, eval_every=50)
    res = run(cfg, seed=0, out_dir=None, progress=False)
    # 7 classes: chance is ~0.14-0.30; a short run already beats the majority class clearly
    assert res["val_accuracy"] > 0.45 and res["test_accuracy"] > 0.45
