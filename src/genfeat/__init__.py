"""genfeat: generative feature learning on current PyTorch.

Methods are organised as backbone + generative loss + target loss + schedule (see DESIGN.md).
Implemented on the one spine: Transformer-XL, XLNet, BERT, GPT-1 (pretraining and task-aware fine-tuning),
ELMo, word2vec, the complement ("bad") GAN, GDAN and Planetoid (with the Table 3.6 baselines).
"""

__version__ = "0.1.0"


def from_pretrained(path, architecture=None):
    """Load a genfeat checkpoint or a Hugging Face model directory (see genfeat.hub.from_pretrained)."""
    from .hub import from_pretrained as _from_pretrained

    return _from_pretrained(path, architecture)


def load_checkpoint(path, architecture=None):
    """``(model, vocabulary)`` of a genfeat checkpoint or a Hugging Face model directory: :func:`from_pretrained` plus
    the vocabulary saved beside the weights (None when there is none; see genfeat.hub.load_checkpoint)."""
    from .hub import load_checkpoint as _load_checkpoint

    return _load_checkpoint(path, architecture)


def save_pretrained(model, path, vocab=None, hf=False):
    """Save a model as a genfeat checkpoint, or in Hugging Face format with ``hf=True``; pass its ``vocab`` (from
    :func:`load_checkpoint`) for a directory the command line can score or sample from."""
    from .hub import save_pretrained as _save_pretrained

    return _save_pretrained(model, path, vocab, hf)


def run_recipe(path, overrides=None, seeds=None, out_dir=None, **kwargs):
    """Run a recipe as ``genfeat run`` does and return its figures (see genfeat.runner.run_recipe)."""
    from .runner import run_recipe as _run_recipe

    return _run_recipe(path, overrides, seeds, out_dir=out_dir, **kwargs)
