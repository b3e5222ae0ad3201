"""Every shipped recipe parses into its method's typed config (no data, no training)."""

from pathlib import Path

import pytest

from genfeat.config import dotted
from genfeat.runner import load_recipe

RECIPES_DIR = Path(__file__).resolve().parents[1] / "recipes"
RECIPES = sorted(RECIPES_DIR.rglob("*.yaml"))


def test_recipes_are_found():
    assert {p.parent.name for p in RECIPES} >= {"transformer_xl", "planetoid"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: str(p.relative_to(RECIPES_DIR)))
def test_recipe_parses_into_its_methods_config(path):
    method, cfg = load_recipe(path)
    assert isinstance(cfg, method.config_cls)
    if getattr(cfg, "pretrain", None) is not None:
        # a chained fine-tuning recipe: its pretraining recipe, with the overrides, parses too
        assert load_recipe(cfg.pretrain.recipe, dotted(cfg.pretrain.overrides), pretraining=True)[0].pretraining
    if method.name == "transformer_xl":
        from genfeat.methods.transformer_xl import build_model_config

        # The model section is checked once the vocabulary size is known; the smallest size its
        # adaptive-softmax cutoffs allow stands in for it.
        build_model_config(cfg.model, max(cfg.model.get("cutoffs", []), default=0) + 1)
