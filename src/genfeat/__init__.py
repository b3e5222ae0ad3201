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


def save_pretrained(model, path, vocab=None, hf=False):
    """Save a model as a genfeat checkpoint, or in Hugging Face format with ``hf=True``."""
    from .hub import save_pretrained as _save_pretrained

    return _save_pretrained(model, path, vocab, hf)
