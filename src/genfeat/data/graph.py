"""Planetoid citation graphs (Cora, CiteSeer, PubMed) in the original ``ind.<name>.*`` pickle format.

Yang, Cohen & Salakhutdinov 2016 (thesis §3.3) released the public split as Python-2 pickles:
``x``/``y`` are the labelled training instances, ``allx``/``ally`` all instances that are not
test instances (training first), ``tx``/``ty`` the test instances, ``graph`` a ``defaultdict(list)``
of adjacency lists over node ids and ``test.index`` the node ids of the test rows. The pickles come
from the internet, so they are read with :class:`RestrictedUnpickler`, which admits only the numpy,
scipy.sparse and collections globals these files contain.

Node numbering: rows of ``allx`` are nodes ``0..len(allx)-1``; the test rows go to the ids in
``test.index``. CiteSeer's graph has 3,327 nodes but only 3,312 have features: 15 ids inside the
test-id range are isolated nodes with no row in ``tx``. They are kept as nodes with an all-zero
feature row and no label (``label == -1``), belong to no split, and are counted in
:attr:`PlanetoidGraph.n_featureless`.

The registry's files are checked against their sha256; files read from a folder (``root=``) are
not, so :func:`build_planetoid` checks that the eight parts agree with one another (shapes, class
and feature columns, the test ids and the graph's node ids) and names the file that does not.
"""

from __future__ import annotations

import codecs
import collections
import io
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import DataError, with_article
from .registry import DatasetSpec, FileSpec, register, resolve

PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
_URL = "https://github.com/kimiyoung/planetoid/raw/master/data/ind.{name}.{part}"
_SHA = {
    "citeseer": {
        "allx": (595021, "2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668"),
        "ally": (55623, "f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95"),
        "graph": (61987, "d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7"),
        "test.index": (5000, "2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4"),
        "tx": (260321, "539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21"),
        "ty": (24135, "55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce"),
        "x": (31087, "d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6"),
        "y": (3014, "8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924"),
    },
    "cora": {
        "allx": (257305, "9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543"),
        "ally": (47959, "2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71"),
        "graph": (59847, "58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d"),
        "test.index": (5000, "297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875"),
        "tx": (148025, "b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a"),
        "ty": (28135, "41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad"),
        "x": (22119, "23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab"),
        "y": (4054, "94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1"),
    },
    "pubmed": {
        # absent from shared/data; its official size and sha256 as shared/data/planetoid/PROVENANCE.md records them
        "allx": (7578385, "508e538e2abdccdd54c4d3e9f49d638b4af7107d85845f66ddea5a5152658b7e"),
        "ally": (224739, "0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e"),
        "graph": (471808, "5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9"),
        "test.index": (6000, "b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5"),
        "tx": (405505, "4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d"),
        "ty": (12135, "ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd"),
        "x": (23172, "fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33"),
        "y": (854, "e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3"),
    },
}

for _name, _parts in _SHA.items():
    register(DatasetSpec(
        name=f"planetoid_{_name}",
        files={part: FileSpec(relpath=f"planetoid/ind.{_name}.{part}", url=_URL.format(name=_name, part=part),
                              sha256=sha, size=size)
               for part, (size, sha) in _parts.items()},
        citation="Yang, Cohen & Salakhutdinov, Revisiting Semi-Supervised Learning with Graph Embeddings, ICML 2016",
        note="public Planetoid split; pubmed allx is absent from shared/data (its size and sha256 are checked)",
    ))

# numpy keeps these two in numpy._core since 2.0 (numpy.core before, now a deprecated alias); an array's
# and a scalar's reduce value name the current objects on any numpy version
_RECONSTRUCT = np.ndarray(0).__reduce__()[0]
_SCALAR = np.float64(0).__reduce__()[0]
# The Python-2 files name scipy.sparse.csr and numpy.core.multiarray, newer pickles the current modules.
# Each allowed name maps to its object, so no (deprecated) module is imported by name while unpickling.
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT, ("numpy.core.multiarray", "scalar"): _SCALAR,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT, ("numpy._core.multiarray", "scalar"): _SCALAR,
    ("scipy.sparse.csr", "csr_matrix"): sp.csr_matrix, ("scipy.sparse._csr", "csr_matrix"): sp.csr_matrix,
    ("collections", "defaultdict"): collections.defaultdict, ("builtins", "list"): list, ("__builtin__", "list"): list,
    # Python 3 writes bytes at protocol <= 2 as _codecs.encode(str, "latin1"): files re-saved that way
    # load too; the function only turns a string into bytes
    ("_codecs", "encode"): codecs.encode,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the globals of the Planetoid files; anything else is a DataError.

    A plain ``pickle.load`` on a downloaded file runs whatever callable the file names
    (``os.system``...); this one refuses every global outside ``_ALLOWED_GLOBALS`` and returns the
    current object for the legacy names the files use (``scipy.sparse.csr``, ``numpy.core``), so
    loading them raises no deprecation warning.
    """

    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise DataError(f"pickle refers to the global '{module}.{name}', which a Planetoid file never contains",
                            "the file is not a genuine Planetoid pickle; fetch the original from kimiyoung/planetoid")
        return _ALLOWED_GLOBALS[(module, name)]


def restricted_load(data: bytes, where: str = "<bytes>"):
    """Unpickle Python-2 Planetoid bytes with :class:`RestrictedUnpickler` (latin1 for numpy buffers)."""
    try:
        return RestrictedUnpickler(io.BytesIO(data), encoding="latin1").load()
    except DataError as e:
        raise DataError(f"'{where}': {e.cause}", e.fix) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, LookupError) as e:
        raise DataError(f"'{where}' is not a readable pickle ({e})", "replace it with the original file") from None


@dataclass
class PlanetoidGraph:
    """One Planetoid dataset on the public split.

    Attributes:
        name: cora, citeseer or pubmed.
        features: (n, f) float32 CSR matrix; all-zero rows for featureless nodes.
        labels: (n,) int64 class ids, -1 where unknown (CiteSeer's isolated test-range nodes).
        edges: (e, 2) int64 directed edges (both directions of every undirected edge, no self loops).
        train_idx, val_idx, test_idx: node ids of the public split (20 per class / 500 / 1000).
        n_featureless: nodes that appear in the graph but have no feature row (15 for CiteSeer).
        listed_edges: (e', 2) int64 (node, neighbour) for every entry of the file's adjacency lists,
            duplicates and self loops kept (Cora lists 302 duplicate entries; CiteSeer 236, and 124
            nodes as their own neighbour, twice each): the neighbours the released code's random walk
            chooses from; None when unknown.
    """

    name: str
    features: sp.csr_matrix
    labels: np.ndarray
    edges: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    test_idx: np.ndarray
    n_featureless: int = 0
    listed_edges: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return self.features.shape[0]

    @property
    def num_classes(self) -> int:
        return int(self.labels.max()) + 1

    @property
    def num_undirected_edges(self) -> int:
        return len(self.edges) // 2

    def adjacency(self) -> sp.csr_matrix:
        """Symmetric 0/1 adjacency (n, n), no self loops."""
        n = self.num_nodes
        a = sp.csr_matrix((np.ones(len(self.edges), np.float32), (self.edges[:, 0], self.edges[:, 1])), shape=(n, n))
        a.data[:] = 1.0
        return a


def _adjacency_entries(graph: dict, where: str) -> list[tuple[int, int]]:
    """(node, neighbour) for every entry of the adjacency lists, as listed; a key or neighbour that is not an
    integer id, or an adjacency list that is not a list, is a DataError."""
    entries = []
    for node, neighbours in graph.items():
        if not isinstance(neighbours, (list, tuple)):
            raise DataError(f"'{where}': the adjacency list of node {node!r} is {type(neighbours).__name__} "
                            f"{neighbours!r:.40}, not a list", "use the original graph file")
        for nb in (node, *neighbours):
            if not isinstance(nb, (int, np.integer)):
                raise DataError(f"'{where}': the graph lists the node {nb!r}, {with_article(type(nb).__name__)}, not an integer id",
                                "use the original graph file")
        entries += [(int(node), int(nb)) for nb in neighbours]
    if not entries:
        raise DataError(f"'{where}': the graph has no edges", "use a graph file with at least one edge")
    return entries


def _edges_from_adjacency_lists(entries: list[tuple[int, int]], n_nodes: int, where: str
                                ) -> tuple[np.ndarray, np.ndarray]:
    """(listed, edges): the adjacency-list entries as an (e', 2) array, and the symmetric, de-duplicated edges
    without self loops; a node outside ``0..n_nodes-1`` is a DataError."""
    bad = next((v for pair in entries for v in pair if not 0 <= v < n_nodes), None)
    if bad is not None:
        raise DataError(f"'{where}': the graph references node {bad}, outside the {n_nodes} nodes of the features",
                        "use the graph file that belongs to these feature files")
    listed = np.asarray(entries, dtype=np.int64)
    e = listed[listed[:, 0] != listed[:, 1]]
    e = np.unique(np.concatenate([e, e[:, ::-1]]), axis=0)
    return listed, e


def _check_parts(name: str, parts: dict) -> None:
    """Refuse parts of the wrong kind or shape, or whose shapes disagree (rows of features and labels, feature
    and class columns), with a DataError naming the part (before any indexing)."""
    def fail(part: str, what: str):
        raise DataError(f"{name}: ind.{name}.{part} {what}", f"use the original ind.{name}.{part} file")

    for part in ("x", "tx", "allx", "y", "ty", "ally"):
        if getattr(parts[part], "ndim", None) != 2:
            fail(part, f"is not a 2-D matrix (got {type(parts[part]).__name__})")
    if not isinstance(parts["graph"], dict):
        fail("graph", f"is not a dict of adjacency lists (got {type(parts['graph']).__name__})")
    test_ids = np.asarray(parts["test.index"])
    if test_ids.ndim != 1 or not len(test_ids):
        fail("test.index", "holds no test ids")
    if (test_ids < 0).any() or len(np.unique(test_ids)) != len(test_ids):
        fail("test.index", "holds negative or repeated ids")
    for feats, labels in (("x", "y"), ("tx", "ty"), ("allx", "ally")):
        if parts[feats].shape[0] != parts[labels].shape[0]:
            fail(labels, f"has {parts[labels].shape[0]} rows but {feats} has {parts[feats].shape[0]}")
    for part, of in (("x", "allx"), ("tx", "allx"), ("y", "ally"), ("ty", "ally")):
        what = "features" if of == "allx" else "classes"
        if parts[part].shape[1] != parts[of].shape[1]:
            fail(part, f"has {parts[part].shape[1]} columns ({what}) but {of} has {parts[of].shape[1]}")
    if parts["x"].shape[0] > parts["allx"].shape[0]:
        fail("x", f"has {parts['x'].shape[0]} rows, more than allx's {parts['allx'].shape[0]} "
                  "(the training instances are the first rows of allx)")
    y = np.asarray(parts["y"])
    missing = sorted(set(range(y.shape[1])) - set(np.argmax(y, 1)[y.sum(1) > 0].tolist()))
    if missing:
        raise DataError(f"{name}: class(es) {missing} have no labelled training node",
                        "every class needs at least one labelled node; check the y file")


def build_planetoid(name: str, parts: dict) -> PlanetoidGraph:
    """Assemble a :class:`PlanetoidGraph` from the eight decoded parts (see module docstring).

    The parts must agree: the rows of each feature matrix and its labels, the feature columns of
    ``x``, ``tx`` and ``allx``, the class columns of ``y``, ``ty`` and ``ally``; ``x`` no longer than
    ``allx``; the test ids after the rows of ``allx`` and among the graph's node ids; the graph's
    node ids integers within the nodes. Any disagreement is a DataError naming the file.

    Args:
        name: dataset name, used in messages.
        parts: ``x, y, tx, ty, allx, ally`` (arrays or sparse), ``graph`` (dict of lists) and
            ``test.index`` (1-D int array).
    """
    _check_parts(name, parts)
    y, tx, ty = parts["y"], parts["tx"], parts["ty"]
    allx, ally = parts["allx"], parts["ally"]
    test_ids = np.asarray(parts["test.index"], dtype=np.int64)
    n_train, n_all = y.shape[0], allx.shape[0]
    if len(test_ids) != tx.shape[0]:
        raise DataError(f"{name}: test.index has {len(test_ids)} ids but tx has {tx.shape[0]} rows",
                        "use matching test.index and tx files")
    entries = _adjacency_entries(parts["graph"], f"ind.{name}.graph")
    last = max(max(int(node) for node in parts["graph"]), max(v for pair in entries for v in pair))  # keys: isolated too
    if test_ids.min() < n_all or test_ids.max() > last:
        bad = int(test_ids.min() if test_ids.min() < n_all else test_ids.max())
        raise DataError(f"{name}: ind.{name}.test.index holds node {bad}, but the test nodes follow the {n_all} "
                        f"rows of allx and end at the graph's last node, {last}",
                        "use the test.index that belongs to these allx and graph files")
    # the nodes are the feature rows: allx, then the test ids (a graph node beyond them is refused below)
    n_nodes = max(n_all, int(test_ids.max()) + 1)
    n_feat = allx.shape[1]
    features = sp.lil_matrix((n_nodes, n_feat), dtype=np.float32)
    features[:n_all] = sp.csr_matrix(allx, dtype=np.float32)
    features[test_ids] = sp.csr_matrix(tx, dtype=np.float32)
    labels = np.full(n_nodes, -1, dtype=np.int64)
    labels[:n_all] = np.argmax(ally, 1)
    labels[test_ids] = np.argmax(ty, 1)
    # nodes between allx and the test ids, or in the test range without a tx row (CiteSeer), have no features
    has_row = np.zeros(n_nodes, bool)
    has_row[:n_all] = True
    has_row[test_ids] = True
    # rows of ally/ty that are all zero (CiteSeer) carry no label
    labels[:n_all][np.asarray(ally).sum(1) == 0] = -1
    labels[test_ids[np.asarray(ty).sum(1) == 0]] = -1
    listed, edges = _edges_from_adjacency_lists(entries, n_nodes, f"ind.{name}.graph")
    train_idx = np.arange(n_train)
    val_idx = np.arange(n_train, min(n_train + 500, n_all))
    return PlanetoidGraph(name, features.tocsr(), labels, edges, train_idx, val_idx, np.sort(test_ids),
                          n_featureless=int((~has_row).sum()), listed_edges=listed)


def load_planetoid(name: str, root: str | Path | None = None, download: bool = True) -> PlanetoidGraph:
    """Load ``ind.<name>.*`` with the restricted unpickler on the public split.

    Args:
        name: ``cora``, ``citeseer`` or ``pubmed``.
        root: directory holding the ``ind.*`` files; None: the registry (``$GENFEAT_DATA/planetoid``,
            checksums verified, downloaded when absent and ``download``).
        download: fetch missing files from the canonical URLs (registry only).
    """
    if name not in _SHA:
        raise DataError(f"unknown Planetoid dataset '{name}'", f"use one of: {', '.join(_SHA)}")
    parts = {}
    for part in PLANETOID_PARTS:
        if root is None:
            path = resolve(f"planetoid_{name}", part, download=download)
        else:
            path = Path(root) / f"ind.{name}.{part}"
            if not path.is_file():
                raise DataError(f"'{path}' is missing", f"put the Planetoid file ind.{name}.{part} in '{root}'")
        if part == "test.index":
            try:
                parts[part] = np.loadtxt(path, dtype=np.int64, ndmin=1)
            except ValueError as e:
                raise DataError(f"'{path}' is not one integer per line ({e})", "use the original test.index") from None
        else:
            parts[part] = restricted_load(path.read_bytes(), str(path))
    for part in ("x", "tx", "allx"):
        if not sp.issparse(parts[part]):
            parts[part] = sp.csr_matrix(parts[part])
    return build_planetoid(name, parts)
