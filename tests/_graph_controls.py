"""Controls for the graph methods' "learns" tests: the same Cora run on a graph whose edges carry no
class information, so a threshold can demand what only a method that uses the edges reaches."""

import numpy as np

import genfeat.data.graph as graph


def break_edges(monkeypatch, how: str) -> None:
    """Make ``load_planetoid`` return the graph with ``how`` = ``shuffled`` edges (every endpoint renamed
    by one random permutation of the nodes: the degrees stay, neighbours' classes become unrelated) or
    ``none`` (no edges; features, labels and splits unchanged)."""
    load = graph.load_planetoid

    def broken(*args, **kwargs):
        g = load(*args, **kwargs)
        if how == "none":
            g.edges, g.listed_edges = g.edges[:0], None
        else:
            perm = np.random.default_rng(0).permutation(g.num_nodes)
            g.edges = perm[g.edges]
            g.listed_edges = None if g.listed_edges is None else perm[g.listed_edges]
        return g

    monkeypatch.setattr(graph, "load_planetoid", broken)
