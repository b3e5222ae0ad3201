"""Every model's ``forward`` says in its own docstring what shapes it takes and returns (``help(model.forward)`` said
nothing: only the class docstrings gave them)."""

import importlib
import re

import pytest

from genfeat.hub import ARCHITECTURES
from genfeat.models.bert import BertModel
from genfeat.models.complement_gan import ConvDiscriminator, ConvGenerator, Encoder, MLPDiscriminator, MLPGenerator
from genfeat.models.elmo import ScalarMix
from genfeat.models.heads import TaskHead
from genfeat.models.node_classifier import GCN, HiddenLayerClassifier, SoftmaxRegression

MODELS = [getattr(importlib.import_module(module), cls) for module, _, cls in ARCHITECTURES.values()] + [
    BertModel, ScalarMix, TaskHead, SoftmaxRegression, HiddenLayerClassifier, GCN, MLPDiscriminator, ConvDiscriminator,
    MLPGenerator, ConvGenerator, Encoder]


@pytest.mark.parametrize("model", MODELS, ids=lambda cls: cls.__name__)
def test_forward_has_a_docstring_naming_shapes(model):
    doc = model.forward.__doc__   # the class's own forward (or its genfeat base's), never nn.Module's
    assert doc, f"{model.__name__}.forward has no docstring"
    assert re.search(r"[\[(][a-zA-Z][^\])]*[\])]", doc), f"{model.__name__}.forward names no shape: {doc!r}"
