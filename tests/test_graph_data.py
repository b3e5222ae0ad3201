"""Planetoid loader: published statistics, CiteSeer's featureless nodes, restricted unpickling, bad input."""

import os
import pickle
import pathlib
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from genfeat.data.graph import build_planetoid, load_planetoid, restricted_load
from genfeat.errors import DataError

DATA = pathlib.Path(os.environ.get("GENFEAT_DATA", "../shared/data"))
needs_data = pytest.mark.skipif(not (DATA / "planetoid" / "ind.cora.x").is_file(), reason="Planetoid data not found")


@pytest.fixture(autouse=True)
def _data_root(monkeypatch):
    monkeypatch.setenv("GENFEAT_DATA", str(DATA.resolve()))


# (nodes, undirected edges without self loops or duplicates, features, classes, nodes with features)
PUBLISHED = {"cora": (2708, 5278, 1433, 7, 2708), "citeseer": (3327, 4552, 3703, 6, 3312)}


@needs_data
@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_published_statistics(name):
    g = load_planetoid(name, download=False)
    nodes, edges, feats, classes, with_features = PUBLISHED[name]
    assert g.num_nodes == nodes
    assert g.num_undirected_edges == edges
    assert g.features.shape == (nodes, feats)
    assert g.num_classes == classes
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (20 * classes, 500, 1000)
    assert np.bincount(g.labels[g.train_idx], minlength=classes).tolist() == [20] * classes
    assert nodes - g.n_featureless == with_features
    assert not set(g.train_idx) & set(g.val_idx) and not set(g.val_idx) & set(g.test_idx)
    assert (g.labels[np.concatenate([g.train_idx, g.val_idx, g.test_idx])] >= 0).all()


@needs_data
@pytest.mark.parametrize("name, entries, duplicates, self_loops", [("cora", 10858, 302, 0), ("citeseer", 9464, 236, 248)])
def test_listed_edges_keep_the_adjacency_lists_as_the_file_has_them(name, entries, duplicates, self_loops):
    # the released random walk picks from these lists, duplicates and self loops included
    g = load_planetoid(name, download=False)
    listed = g.listed_edges
    assert len(listed) == entries
    assert len(listed) - len(np.unique(listed, axis=0)) == duplicates
    assert int((listed[:, 0] == listed[:, 1]).sum()) == self_loops
    nonself = np.unique(listed[listed[:, 0] != listed[:, 1]], axis=0)
    assert np.array_equal(nonself, g.edges)


@needs_data
def test_citeseer_featureless_nodes_are_unlabelled_zero_rows():
    g = load_planetoid("citeseer", download=False)
    empty = np.flatnonzero(np.asarray(g.features.sum(1)).ravel() == 0)
    missing = np.setdiff1d(np.arange(g.test_idx.min(), g.test_idx.max() + 1), g.test_idx)
    assert len(missing) == 15
    assert set(missing) <= set(empty)
    assert (g.labels[missing] == -1).all()


@needs_data
def test_pubmed_needs_allx():
    if not (DATA / "planetoid" / "ind.pubmed.allx").is_file():
        pytest.skip("ind.pubmed.allx is not in the shared data (only the other seven PubMed files are)")
    g = load_planetoid("pubmed", download=False)
    assert (g.num_nodes, g.num_classes, len(g.test_idx)) == (19717, 3, 1000)


def test_a_pubmed_allx_that_is_not_the_official_file_is_refused(tmp_path, monkeypatch):
    """shared/data lacks ind.pubmed.allx; a user's copy is checked against the official size and sha256 (a random
    matrix of the right shape used to train to a figure)."""
    if not (DATA / "planetoid" / "ind.pubmed.ally").is_file():
        pytest.skip("PubMed's files are not in GENFEAT_DATA")
    (tmp_path / "planetoid").mkdir()
    for f in (DATA / "planetoid").glob("ind.pubmed.*"):
        (tmp_path / "planetoid" / f.name).symlink_to(f.resolve())
    with open(tmp_path / "planetoid" / "ind.pubmed.allx", "wb") as f:
        pickle.dump(sp.random(18717, 500, density=0.01, format="csr", dtype=np.float32, random_state=0), f)
    monkeypatch.setenv("GENFEAT_DATA", str(tmp_path))
    with pytest.raises(DataError, match="ind.pubmed.allx"):
        load_planetoid("pubmed", download=False)


@needs_data
@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_legacy_pickle_names_load_without_warnings(name):
    # the files name scipy.sparse.csr and numpy.core.multiarray, both deprecated aliases today
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = load_planetoid(name, download=False)
    assert sp.issparse(g.features) and g.features.dtype == np.float32


def test_pickle_with_foreign_global_is_refused():
    payload = pickle.dumps(os.system, protocol=2)
    with pytest.raises(DataError, match="os.system|posix.system"):
        restricted_load(payload, "evil.pkl")


def test_adjacency_dict_round_trip():
    # numpy/scipy objects are covered by loading the real files above
    from collections import defaultdict

    graph = defaultdict(list, {0: [1], 1: [0]})
    back = restricted_load(pickle.dumps(graph, protocol=2))
    assert back == graph and isinstance(back, defaultdict)


def test_files_re_saved_by_python3_at_protocol_2_load():
    # Python 3 pickles bytes at protocol 2 through _codecs.encode, which the allow-list admits
    matrix = sp.csr_matrix(np.eye(3, dtype=np.float32))
    back = restricted_load(pickle.dumps(matrix, protocol=2))
    assert (back != matrix).nnz == 0 and back.dtype == np.float32


def _toy_parts(graph):
    y = np.eye(2)[[0, 1]]
    return {"x": sp.csr_matrix(np.ones((2, 3))), "y": y, "allx": sp.csr_matrix(np.ones((3, 3))),
            "ally": np.eye(2)[[0, 1, 0]], "tx": sp.csr_matrix(np.ones((1, 3))), "ty": np.eye(2)[[1]],
            "graph": graph, "test.index": np.array([3])}


def test_toy_graph_builds():
    g = build_planetoid("toy", _toy_parts({0: [1], 1: [2], 2: [3], 3: [2]}))
    assert g.num_nodes == 4 and g.num_undirected_edges == 3


def test_a_test_node_without_edges_is_a_node_of_the_graph():
    """The last test node may have an empty adjacency list (an isolated node): it is a node of the graph all the
    same, not a test id beyond the graph's nodes."""
    g = build_planetoid("toy", _toy_parts({0: [1], 1: [2], 2: [0], 3: []}))
    assert g.num_nodes == 4 and g.num_undirected_edges == 3 and list(g.test_idx) == [3]


@pytest.mark.parametrize("graph", [{0: [1], 1: [9]}, {0: [1], 9: [0]}], ids=["neighbour", "key"])
def test_graph_referencing_missing_node(graph):
    # a node beyond the feature rows is refused whether it is listed as a neighbour or as a key
    with pytest.raises(DataError, match="node 9, outside the 4 nodes"):
        build_planetoid("toy", _toy_parts(graph))


@pytest.mark.parametrize("part, value, match", [
    ("test.index", np.array([], dtype=np.int64), "holds no test ids"),
    ("test.index", np.array([3, 3]), "negative or repeated"),
    ("graph", [[0, 1]], "not a dict of adjacency lists"),
    ("y", np.array([0, 1]), "not a 2-D matrix"),
    ("ally", np.eye(2)[[0, 1]], "has 2 rows but allx has 3"),
])
def test_malformed_parts_are_named(part, value, match):
    parts = _toy_parts({0: [1], 1: [0]})
    parts[part] = value
    with pytest.raises(DataError, match=match):
        build_planetoid("toy", parts)


def test_empty_graph():
    with pytest.raises(DataError, match="no edges"):
        build_planetoid("toy", _toy_parts({}))


def test_class_without_labelled_node():
    parts = _toy_parts({0: [1], 1: [0]})
    parts["y"] = np.eye(2)[[0, 0]]
    with pytest.raises(DataError, match=r"class\(es\) \[1\]"):
        build_planetoid("toy", parts)


def _write_toy(root: pathlib.Path, parts: dict) -> None:
    """The toy parts as the Planetoid files ind.cora.* under ``root`` (pickles; test.index one id a line)."""
    for part, value in parts.items():
        if part == "test.index":
            (root / "ind.cora.test.index").write_text("".join(f"{i}\n" for i in value))
        else:
            (root / f"ind.cora.{part}").write_bytes(pickle.dumps(value, protocol=2))


@pytest.mark.parametrize("changes, match", [
    ({"tx": sp.csr_matrix(np.ones((1, 4)))}, r"ind\.cora\.tx has 4 columns \(features\) but allx has 3"),
    ({"x": sp.csr_matrix(np.ones((2, 5)))}, r"ind\.cora\.x has 5 columns \(features\) but allx has 3"),
    ({"ty": np.eye(3)[[2]]}, r"ind\.cora\.ty has 3 columns \(classes\) but ally has 2"),
    ({"x": sp.csr_matrix(np.ones((4, 3))), "y": np.eye(2)[[0, 1, 0, 1]]},
     r"ind\.cora\.x has 4 rows, more than allx's 3 \(the training instances are the first rows of allx\)"),
    ({"test.index": [1]}, r"ind\.cora\.test\.index holds node 1, but the test nodes follow the 3 rows of allx and end "
                          r"at the graph's last node, 3"),
    ({"test.index": [10 ** 12]}, r"ind\.cora\.test\.index holds node 1000000000000, but"),
    ({"graph": {0: [1], "1": [2], 2: [3], 3: [2]}}, r"'ind\.cora\.graph': the graph lists the node '1', a str, "
                                                     "not an integer id"),
    ({"graph": {0: [1.0], 1: [2], 2: [3], 3: [2]}}, r"the graph lists the node 1\.0, a float"),
    ({"graph": {0: 1, 1: [2], 2: [3], 3: [2]}}, r"'ind\.cora\.graph': the adjacency list of node 0 is int 1, not a list"),
    ({"graph": {0: [1], 1: [2 ** 70], 2: [3], 3: [2]}}, r"references node 1180591620717411303424, outside the 4 nodes"),
], ids=["tx-features", "x-features", "ty-classes", "x-rows", "test-id-in-allx", "test-id-beyond-graph", "str-node",
        "float-node", "list-not-a-list", "huge-node"])
def test_files_under_root_that_disagree_are_refused_naming_the_file(tmp_path, changes, match):
    """load_planetoid(root=DIR) reads files that no checksum vouches for: well-formed pickles that disagree with one
    another went on to scipy/numpy (a shape mismatch, an int() or overflow error, a 7 TiB allocation) or were
    read silently wrong (test rows over training rows, labels beyond y's classes)."""
    _write_toy(tmp_path, _toy_parts({0: [1], 1: [2], 2: [3], 3: [2]}))
    assert load_planetoid("cora", root=tmp_path).num_nodes == 4
    _write_toy(tmp_path, changes)
    with pytest.raises(DataError, match=match):
        load_planetoid("cora", root=tmp_path)


def test_a_pickle_calling_an_allowed_global_with_bad_arguments_is_a_data_error():
    # _codecs.encode is allowed (numpy's Python-2 buffers); an unknown codec raised LookupError past the checks
    payload = b"c_codecs\nencode\n(X\x01\x00\x00\x00xX\x03\x00\x00\x00zzztR."
    with pytest.raises(DataError, match=r"'evil.pkl' is not a readable pickle \(unknown encoding: zzz\)"):
        restricted_load(payload, "evil.pkl")
