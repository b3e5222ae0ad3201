"""Planetoid model variants, the generic classification objective (with per-branch losses), the recipe's
checks, and a short end-to-end run on Cora."""

import os
import pathlib
from dataclasses import dataclass

import pytest
import torch

from genfeat.config import from_dict
from genfeat.errors import ConfigError
from genfeat.models.planetoid import PlanetoidModel
from genfeat.objectives.classification import ClassificationObjective

DATA = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))


@dataclass
class _Out:
    logits: torch.Tensor
    aux_logits: tuple = ()


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


class _Branches(torch.nn.Module):
    def forward(self, x):
        return _Out(x, (2 * x, -x))


def test_classification_objective_adds_weighted_branch_losses():
    # the released Planetoid code's layer_loss: a cross-entropy on each branch classifier as well
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    labels = torch.tensor([0, 0, -1])
    ce = lambda z: torch.nn.functional.cross_entropy(z[:2], labels[:2], reduction="sum")  # noqa: E731
    out = ClassificationObjective(aux_weight=0.5)(_Branches(), {"x": logits, "labels": labels})
    assert torch.allclose(out.loss_sum, ce(logits) + 0.5 * (ce(2 * logits) + ce(-logits)))
    # accuracy is the final classifier's only
    assert out.count == 2 and out.logs["correct"] == 1.0
    plain = ClassificationObjective()(_Branches(), {"x": logits, "labels": labels})
    assert torch.allclose(plain.loss_sum, ce(logits))


def test_final_layer_reads_branch_probabilities():
    torch.manual_seed(0)
    m = PlanetoidModel(torch.rand(6, 4), 3, "t", embedding_size=5)
    nodes = torch.tensor([1, 4])
    out = m(nodes)
    lx, le = out.aux_logits
    assert torch.allclose(lx, m.out_x(m.features[nodes])) and torch.allclose(le, m.out_e(m.embedding(nodes)))
    assert torch.allclose(out.logits, m.out(torch.cat([lx.softmax(-1), le.softmax(-1)], -1)))
    assert m(nodes).aux_logits and PlanetoidModel(torch.rand(6, 4), 3, "g", 5)(nodes).aux_logits == ()


def test_context_logits_agree_with_scores():
    torch.manual_seed(0)
    for mode in "tig":
        m = PlanetoidModel(torch.rand(6, 4), 3, mode, embedding_size=5)
        i, c = torch.tensor([0, 3, 5]), torch.tensor([2, 2, 1])
        full = m.context_logits(i)
        assert full.shape == (3, 6)
        assert torch.allclose(full[torch.arange(3), c] - m.context.bias[c], m.context_score(i, c), atol=1e-6)


@pytest.mark.parametrize("mode", ["t", "i", "g"])
def test_context_parameters_are_what_the_context_loss_trains(mode):
    from genfeat.objectives.graph_context import GraphContextObjective

    torch.manual_seed(0)
    m = PlanetoidModel(torch.rand(6, 4), 3, mode, embedding_size=5)
    batch = {"i": torch.tensor([0, 1, 2, 5]), "c": torch.tensor([1, 2, 3, 4]), "gamma": torch.ones(4)}
    GraphContextObjective("softmax")(m, batch).loss_sum.backward()
    reached = {id(p) for p in m.parameters() if p.grad is not None}
    assert reached and {id(p) for p in m.context_parameters()} == reached


def test_context_only_model_has_no_classifier():
    # GraphEmb's skip-gram stage: num_classes 0 builds the embeddings and the context layer alone
    m = PlanetoidModel(torch.rand(6, 0), 0, "g", embedding_size=5)
    assert {id(p) for p in m.parameters()} == {id(p) for p in m.context_parameters()}
    assert m.context_logits(torch.tensor([0, 3])).shape == (2, 6)


@pytest.mark.parametrize("field, value", [("mode", "x"), ("embedding_size", 0), ("r1", 0.0), ("r2", 1.5),
                                          ("dropout", 1.0), ("steps", -1), ("window", 0), ("context_loss", "nce"),
                                          ("walk_starts", "sorted"), ("walk_neighbours", "all"),
                                          ("self_pairs", True)])
def test_recipe_rejects_bad_values(field, value):
    from genfeat.methods.planetoid import PlanetoidRecipe

    with pytest.raises(ConfigError, match=field):
        from_dict(PlanetoidRecipe, {field: value})


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
    cfg = PlanetoidRecipe(dataset="cora", init_label_steps=200, init_graph_steps=20, steps=200, eval_every=50)
    res = run(cfg, seed=0, out_dir=None, progress=False)
    # 7 classes: chance is ~0.14-0.30; a short run already beats the majority class clearly
    assert res["val_accuracy"] > 0.45 and res["test_accuracy"] > 0.45


@pytest.mark.skipif(not (DATA / "planetoid" / "ind.cora.x").is_file(), reason="Planetoid data not found")
@pytest.mark.parametrize("through", [False, True])
def test_inductive_context_never_pairs_test_nodes(monkeypatch, through):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))
    from genfeat.methods.planetoid import PlanetoidRecipe, build

    cfg = PlanetoidRecipe(dataset="cora", mode="i", walk_through_test=through, t2=1, r2=0.5)
    g, _, _, init, train = build(cfg, 0)
    test = set(g.test_idx.tolist())
    streams = [t.stream for p in [*init, train] for s in p.stages for t in s.terms if "gamma" in next(t.stream)]
    assert len(streams) == 3
    for stream in streams:
        batch = next(stream)
        assert not test & (set(batch["i"].tolist()) | set(batch["c"].tolist()))


@pytest.mark.skipif(not (DATA / "planetoid" / "ind.cora.x").is_file(), reason="Planetoid data not found")
def test_all_pairs_batches_and_context_lr(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))
    from genfeat.methods.planetoid import PlanetoidRecipe, build

    _, _, _, (label_init, graph_init), _ = build(PlanetoidRecipe(dataset="cora", walk_length=11, all_pairs=True), 0)
    # label context keeps its 100 pairs; graph context: 200 walks x the 54 window pairs of 11 nodes
    assert len(next(label_init.stages[0].terms[0].stream)["i"]) == 100
    assert len(next(graph_init.stages[0].terms[0].stream)["i"]) == 200 * 54
    # the released lr applies to the loss summed over a batch's pairs
    assert graph_init.optimizers["ctx"].config.lr == pytest.approx(0.01 * 200 * 54)
    assert label_init.optimizers["ctx"].config.lr == pytest.approx(0.01 * 100)
