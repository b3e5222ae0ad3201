"""ManiReg's and SemiEmb's objectives compute the losses their docstrings give, on a three-node path
graph worked out by hand, and their full-batch stream restores SemiEmb's negatives exactly."""

import math

import pytest
import torch
from torch import nn

from genfeat.errors import ConfigError
from genfeat.models.node_classifier import NodeOutput
from genfeat.objectives.graph_regularisation import EmbeddingMarginObjective, FullGraphStream, ManifoldRegularisationObjective

# the path 0 - 1 - 2, both directions of each edge (e = 4); labelled: node 0 (class 0), node 2 (class 1)
EDGES = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
NODES, LABELS = torch.tensor([0, 2]), torch.tensor([0, 1])
# logits = log p, so softmax gives back p exactly: p_0 = (1/2, 1/2), p_1 = (3/4, 1/4), p_2 = (1/4, 3/4)
P = torch.tensor([[0.5, 0.5], [0.75, 0.25], [0.25, 0.75]], dtype=torch.float64)
H = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]], dtype=torch.float64)


class Fixed(nn.Module):
    """A 'classifier' with fixed outputs: logits log P and hidden layer H, as parameters."""

    def __init__(self):
        super().__init__()
        self.logits, self.hidden = nn.Parameter(P.log()), nn.Parameter(H.clone())

    def forward(self, nodes=None):
        out = NodeOutput(self.logits, self.hidden)
        return out if nodes is None else out.rows(nodes)


# cross-entropy of the labelled nodes: −log p_0[0] − log p_2[1] = log 2 + log 4/3 = log 8/3, over m = 2
CE_SUM = math.log(8 / 3)


def test_manireg_is_cross_entropy_plus_lambda_times_the_edge_mean_of_squared_probability_gaps():
    # ||p_0 − p_1||² = 2·(1/4)² = 1/8, ||p_1 − p_2||² = 2·(1/2)² = 1/2; each edge twice: sum 5/4 over e = 4
    batch = {"nodes": NODES, "labels": LABELS, "edges": EDGES}
    out = ManifoldRegularisationObjective(reg_weight=2.0)(Fixed(), batch)
    assert out.count == 2
    assert out.mean.item() == pytest.approx(CE_SUM / 2 + 2.0 * (5 / 4) / 4, abs=1e-12)
    assert out.parts["cls"].loss_sum.item() == pytest.approx(CE_SUM, abs=1e-12) and out.parts["cls"].count == 2
    assert out.parts["manireg"].loss_sum.item() == pytest.approx(5 / 4, abs=1e-12) and out.parts["manireg"].count == 4
    assert ManifoldRegularisationObjective(0.0)(Fixed(), batch).mean.item() == pytest.approx(CE_SUM / 2, abs=1e-12)


def test_semiemb_is_cross_entropy_plus_lambda_times_the_edge_mean_of_the_margin_loss():
    # neighbours: ||h_0 − h_1||² = 1, ||h_1 − h_2||² = 1, each edge twice: 4.
    # negatives of the edges (0,1), (1,0), (1,2), (2,1): 2, 1, 0, 2 at squared distances 2, 0, 1, 0,
    # so with μ = 1.5 the hinges max(0, μ − d²) are 0, 1.5, 0.5, 1.5: 3.5. Graph loss 7.5 over e = 4.
    batch = {"nodes": NODES, "labels": LABELS, "edges": EDGES, "negatives": torch.tensor([2, 1, 0, 2])}
    model = Fixed()
    out = EmbeddingMarginObjective(reg_weight=0.5, margin=1.5)(model, batch)
    assert out.count == 2
    assert out.mean.item() == pytest.approx(CE_SUM / 2 + 0.5 * 7.5 / 4, abs=1e-12)
    assert out.parts["semiemb"].loss_sum.item() == pytest.approx(7.5, abs=1e-12) and out.parts["semiemb"].count == 4
    # h_0's gradient, the graph loss's alone (the cross-entropy reads the logits): λ/e times 2·2(h_0 − h_1) from
    # its two edges to node 1, plus −2(h_0 − h_1) from the active hinge of edge (1,2), whose negative is node 0
    # (edge (0,1)'s negative, node 2, is beyond the margin): 0.5/4 · 2·(−1, 0) = (−0.25, 0)
    out.mean.backward()
    assert torch.allclose(model.hidden.grad[0], torch.tensor([-0.25, 0.0], dtype=torch.float64))


def test_full_graph_stream_repeats_the_batch_and_restores_its_negatives():
    stream = FullGraphStream(NODES, LABELS, EDGES, num_nodes=3, negatives=True, seed=7)
    first = next(stream)
    assert torch.equal(first["nodes"], NODES) and torch.equal(first["edges"], EDGES)
    assert first["negatives"].shape == (4,) and first["negatives"].dtype == torch.int64
    state = stream.state_dict()
    following = [next(stream)["negatives"] for _ in range(3)]
    stream.load_state_dict(state)
    assert all(torch.equal(next(stream)["negatives"], n) for n in following)
    # uniform over the 3 nodes: 4,000 draws hit each about 1,333 times (std ~ 30)
    many = torch.cat([next(stream)["negatives"] for _ in range(1000)])
    assert ((torch.bincount(many, minlength=3) - 4000 / 3).abs() < 150).all()
    assert "negatives" not in next(FullGraphStream(NODES, LABELS, EDGES, 3))
    with pytest.raises(ConfigError, match="without torchrun"):
        stream.shard(0, 2)
