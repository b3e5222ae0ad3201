"""Loading and saving models: genfeat checkpoints and Hugging Face directories.

A genfeat checkpoint's config.json names the architecture and its config; the registry below maps
architecture names to their config and model classes. A Hugging Face directory is recognised by
the ``model_type`` in its config.json and converted by genfeat.interop.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from pathlib import Path
from typing import Any

from torch import nn

from . import __version__
from .config import from_dict, to_dict
from .errors import CheckpointError, ConfigError, with_article
from .framework.checkpoint import CONFIG_FILE, load_weights, read_config, save_checkpoint

# architecture -> (module, config class, model class)
ARCHITECTURES: dict[str, tuple[str, str, str]] = {
    "transformer_xl": ("genfeat.models.transformer_xl", "TransformerXLConfig", "TransformerXLLMHeadModel"),
    "bert": ("genfeat.models.bert", "BertConfig", "BertForMaskedLM"),
    "xlnet": ("genfeat.models.xlnet", "XLNetConfig", "XLNetLMHeadModel"),
    "gpt": ("genfeat.models.gpt", "GPTConfig", "GPTLMHeadModel"),
    "elmo": ("genfeat.models.elmo", "ElmoConfig", "ElmoBiLM"),
    "lstm_lm": ("genfeat.models.lstm_lm", "LSTMLMConfig", "LSTMLMHeadModel"),
    "word2vec": ("genfeat.models.word2vec", "Word2VecConfig", "Word2Vec"),
    # a backbone of the above with a task head (genfeat.models.heads; method: finetune)
    "finetune": ("genfeat.models.heads", "FineTuneConfig", "FineTuneModel"),
    # GDAN's question generator G (method: question_gen; genfeat generate-questions)
    "question_gen": ("genfeat.models.question_gen", "QuestionGenConfig", "QuestionGenerator"),
    # GDAN's discriminator D, the gated-attention reader (method: gdan; OUT/final/d)
    "ga_reader": ("genfeat.models.ga_reader", "GAReaderConfig", "GAReader"),
    # GDAN's D initialised from a pretrained bert / xlnet encoder with a span head (method: gdan, d_init)
    "span_reader": ("genfeat.models.span_reader", "SpanReaderConfig", "SpanReader"),
    # the complement GAN's D, G and encoder (method: complement_gan; OUT/last)
    "complement_gan": ("genfeat.models.complement_gan", "ComplementGANConfig", "ComplementGAN"),
    # the PixelCNN++ density model of the complement GAN's LD term (method: pixelcnn; OUT/final)
    "pixelcnn": ("genfeat.models.pixelcnn", "PixelCNNConfig", "PixelCNN"),
    # Planetoid's classifier and context model, reading its dataset's node features (method: planetoid; OUT/last)
    "planetoid": ("genfeat.models.planetoid", "PlanetoidConfig", "PlanetoidModel"),
}
# training checkpoints holding several models at once, which only their method reads (it resumes from them)
# -> where the run saves its models one by one
COMPOSITE_CHECKPOINTS: dict[str, str] = {
    "gdan": "load the models a gdan run saves one by one: OUT/final/d (D) or OUT/final/g (G)",
}
# Hugging Face model_type -> (interop module, loader function)
HF_LOADERS: dict[str, tuple[str, str]] = {
    "transfo-xl": ("genfeat.interop.hf_transfo_xl", "load_hf_transfo_xl"),
    "bert": ("genfeat.interop.hf_bert", "load_hf_bert"),
    "xlnet": ("genfeat.interop.hf_xlnet", "load_hf_xlnet"),
    "openai-gpt": ("genfeat.interop.hf_gpt", "load_hf_gpt"),
}
# Hugging Face task models (config.json "architectures"), tried before HF_LOADERS -> (interop module, loader)
HF_TASK_LOADERS: dict[str, tuple[str, str]] = {
    name: ("genfeat.interop.hf_finetune", "load_hf_task")
    for name in ("BertForSequenceClassification", "BertForMultipleChoice", "BertForQuestionAnswering",
                 "XLNetForSequenceClassification", "XLNetForQuestionAnsweringSimple", "XLNetForQuestionAnswering")
}
# genfeat architecture -> (interop module, function writing a Hugging Face directory)
HF_SAVERS: dict[str, tuple[str, str]] = {
    "transformer_xl": ("genfeat.interop.hf_transfo_xl", "save_hf_transfo_xl"),
    "bert": ("genfeat.interop.hf_bert", "save_hf_bert"),
    "xlnet": ("genfeat.interop.hf_xlnet", "save_hf_xlnet"),
    "gpt": ("genfeat.interop.hf_gpt", "save_hf_gpt"),
    "finetune": ("genfeat.interop.hf_finetune", "save_hf_task"),
}
VOCAB_FILE = "vocab.json"
HF_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "spiece.model")  # in the order genfeat.data.tokenizers reads them
VOCAB_FINGERPRINT = "vocab_sha256"
"""config.json key of :func:`vocab_fingerprint` in genfeat checkpoints saved with a vocabulary."""


def architecture_of(model: nn.Module) -> str:
    for name, (module, _, cls) in ARCHITECTURES.items():
        if type(model).__name__ == cls and type(model).__module__ == module:
            return name
    raise ValueError(f"{type(model).__name__} is not a registered genfeat architecture")


def vocab_fingerprint(vocab: Any) -> str:
    """sha256 of the ordered vocabulary as vocab.json saves it (what :func:`load_checkpoint` reads back, so
    a model's own reading vocabulary, e.g. ELMo's, fingerprints as the file it writes): every id's token in
    id order (content, so another tokenizer of the same size differs). Byte and id vocabularies hold no
    tokens: their kind and size are hashed."""
    import tempfile

    from .data.vocab import BPEVocab, SentencePieceVocab, SymbolVocab, load_vocab

    with tempfile.TemporaryDirectory() as tmp:
        vocab.save(Path(tmp) / VOCAB_FILE)
        vocab = load_vocab(Path(tmp) / VOCAB_FILE)
    if isinstance(vocab, SymbolVocab):
        tokens = list(vocab.symbols)
    elif isinstance(vocab, SentencePieceVocab):
        tokens = [vocab.sp.id_to_piece(i) for i in range(len(vocab))]
    elif isinstance(vocab, BPEVocab):
        tokens = [vocab.tokenizer.id_to_token(i) for i in range(len(vocab))]
    else:
        tokens = [vocab.kind, str(len(vocab))]
    return hashlib.sha256(json.dumps(tokens, ensure_ascii=False).encode("utf-8")).hexdigest()


def checkpoint_config(model: nn.Module, **extra: Any) -> dict[str, Any]:
    """The config.json content describing ``model``."""
    return {"genfeat_version": __version__, "architecture": architecture_of(model), "model": to_dict(model.config),
            **extra}


def build_model(architecture: str, model_cfg: dict[str, Any]) -> nn.Module:
    if architecture in COMPOSITE_CHECKPOINTS:
        raise CheckpointError(f"{with_article(architecture)} checkpoint holds several models trained together, not one model",
                              COMPOSITE_CHECKPOINTS[architecture])
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"unknown architecture '{architecture}'",
                              f"genfeat knows {sorted(ARCHITECTURES)}; was the checkpoint written by a newer genfeat?")
    module, _, model_cls = ARCHITECTURES[architecture]
    try:
        return getattr(importlib.import_module(module), model_cls)(model_config(architecture, model_cfg))
    except ConfigError as e:
        raise CheckpointError(f"checkpoint config is not a valid {architecture} config: {e.cause}", e.fix) from None


def model_config(architecture: str, model_cfg: dict[str, Any]) -> Any:
    """The typed config of a registered ``architecture`` from its fields (the ``model`` section), checked.

    Raises:
        ConfigError: an unknown field, a wrong type or a value the config's checks refuse (named as ``model.*``).
    """
    module, cfg_cls, _ = ARCHITECTURES[architecture]
    return from_dict(getattr(importlib.import_module(module), cfg_cls), model_cfg, "model")


def check_model_fields(architecture: str, fields: dict[str, Any], path: str = "model") -> None:
    """Refuse a name in a recipe's ``model`` section that ``architecture``'s config has not, or a value of the
    wrong type, when the recipe is read: the config itself is built (and its checks across fields run) only
    once the tokenizer has set n_token, after work and writes.

    Raises:
        ConfigError: an unknown field (named by its dotted path, with the closest known name) or a wrong type.
    """
    import dataclasses
    import typing

    from .config import _coerce

    module, cfg_cls, _ = ARCHITECTURES[architecture]
    cls = getattr(importlib.import_module(module), cfg_cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = {k: v for k, v in fields.items() if k not in names}
    if unknown:
        from_dict(cls, unknown, path)            # raises from_dict's own unknown-field error
    hints = typing.get_type_hints(cls)
    for key, value in fields.items():
        _coerce(value, hints[key], f"{path}.{key}")


def from_pretrained(path: str | Path, architecture: str | None = None) -> nn.Module:
    """Load a genfeat checkpoint directory or a Hugging Face model directory.

    Args:
        path: directory with config.json and weights.
        architecture: when given, the checkpoint must hold this architecture (else CheckpointError).
    Returns:
        The model in eval mode, on CPU, fp32.
    """
    path = Path(path)
    if architecture is not None and architecture not in ARCHITECTURES:
        raise CheckpointError(f"unknown architecture '{architecture}'", f"use one of: {', '.join(sorted(ARCHITECTURES))}"
                              " (or none: whatever the checkpoint holds)")
    fix = "pass a genfeat checkpoint (e.g. runs/NAME/final) or a Hugging Face model directory"
    if not path.exists():
        raise CheckpointError(f"checkpoint '{path}' does not exist", fix)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint '{path}' is a file, not a model directory", fix)
    if not (path / CONFIG_FILE).is_file():
        raise CheckpointError(f"'{path}' is not a model directory (no {CONFIG_FILE})", fix)
    cfg = read_config(path)
    listed = cfg.get("architectures")
    first = listed[0] if isinstance(listed, list) and listed else None
    kind = cfg.get("model_type")
    hf_loader = (HF_TASK_LOADERS.get(first if isinstance(first, str) else None)
                 or HF_LOADERS.get(kind if isinstance(kind, str) else None))
    if "architecture" in cfg:
        arch = cfg["architecture"]
        if not isinstance(arch, str):
            raise CheckpointError(f"'{path}/config.json' gives architecture {arch!r}, not a name",
                                  "the checkpoint is corrupt; use another one")
        if architecture is not None and arch != architecture:
            raise CheckpointError(f"checkpoint '{path}' holds {with_article(arch)} model, not {architecture}",
                                  f"pass {with_article(architecture)} checkpoint")
        model_cfg = cfg.get("model", {})
        if arch == "planetoid" and "row_normalise" not in model_cfg:  # written before the field: the recipe has it
            model_cfg = {**model_cfg, "row_normalise": bool(cfg.get("recipe", {}).get("row_normalise", False))}
        model = build_model(arch, model_cfg)
        load_weights(path, model)
    elif hf_loader is not None:
        module, fn = hf_loader
        model = getattr(importlib.import_module(module), fn)(path)
        if architecture is not None and architecture_of(model) != architecture:
            raise CheckpointError(f"'{path}' holds {with_article(architecture_of(model))} model, not {architecture}",
                                  f"pass {with_article(architecture)} checkpoint")
    else:
        raise CheckpointError(f"'{path}/config.json' names neither a genfeat architecture nor a supported "
                              f"Hugging Face model_type (got {cfg.get('model_type')!r})",
                              f"supported Hugging Face types: {sorted(HF_LOADERS)}")
    return model.eval()


def save_pretrained(model: nn.Module, path: str | Path, vocab: Any = None, hf: bool = False,
                    record: dict[str, Any] | None = None) -> Path:
    """Save ``model`` (and its vocabulary) as a genfeat checkpoint, or in Hugging Face format with ``hf``.
    ``record``: more entries of a genfeat checkpoint's config.json (a run's ``runner.recipe_record``)."""
    path = Path(path)
    if hf:
        arch = architecture_of(model)
        if arch not in HF_SAVERS:
            raise CheckpointError(f"saving {arch} in Hugging Face format is not supported", "save a genfeat checkpoint")
        from .io import atomic_dir

        module, fn = HF_SAVERS[arch]
        with atomic_dir(path) as tmp:
            getattr(importlib.import_module(module), fn)(model, tmp)
            if vocab is not None:
                from .data.tokenizers import save_hf_tokenizer

                vocab.save(tmp / VOCAB_FILE)
                save_hf_tokenizer(vocab, tmp)
        return path
    fingerprint = {VOCAB_FINGERPRINT: vocab_fingerprint(vocab)} if vocab is not None else {}
    return save_checkpoint(path, model, None, checkpoint_config(model, **(record or {}), **fingerprint),
                           (lambda d: vocab.save(d / VOCAB_FILE)) if vocab is not None else None)


def load_checkpoint(path: str | Path, architecture: str | None = None,
                    require_vocab: bool = False) -> tuple[nn.Module, Any]:
    """``from_pretrained`` plus the vocabulary saved beside the weights (None when there is none): genfeat's
    vocab.json, else a Hugging Face tokenizer (tokenizer.json, vocab.txt or spiece.model). In a Hugging
    Face directory with a tokenizer file, vocab.json is that tokenizer's (GPT's BPE vocabulary), not genfeat's.

    A genfeat checkpoint whose config.json holds ``vocab_sha256`` (:func:`vocab_fingerprint`, written by
    :func:`save_pretrained`) must come with that very vocabulary; Hugging Face directories and genfeat
    checkpoints written before the fingerprint are checked by size only.

    A model with fine-tuning special tokens (GPT-1's n_special) may come with the pretrained vocabulary
    or with one that includes them. A model (or fine-tuned model's backbone) with a ``text_vocabulary(vocab)``
    method gets the vocabulary it returns (ELMo's spells words outside the saved one).

    Args:
        require_vocab: refuse a checkpoint without a vocabulary (every use that encodes text: a vocabulary
            rebuilt from the text to score would give other ids than the model was trained on, and silently
            wrong figures).
    Raises:
        CheckpointError: another architecture, a vocabulary that is not the model's, none with ``require_vocab``.
    """
    model = from_pretrained(path, architecture)
    vocab, source = None, VOCAB_FILE
    hf_tokenizer = next((name for name in HF_TOKENIZER_FILES if (Path(path) / name).is_file()), None)
    if (Path(path) / VOCAB_FILE).is_file() and (hf_tokenizer is None or "architecture" in read_config(path)):
        from .data.vocab import load_vocab

        vocab = load_vocab(Path(path) / VOCAB_FILE)
    elif hf_tokenizer is not None:
        from .data.tokenizers import load_tokenizer

        vocab, source = load_tokenizer(path, hf_model=True), hf_tokenizer
    if require_vocab:
        require_vocabulary(vocab, path)
    cfg = getattr(getattr(model, "backbone", model), "config", None)   # a fine-tuned model: its backbone's
    n_token = getattr(cfg, "n_token", None)
    if vocab is not None and n_token is not None and len(vocab) not in (n_token, n_token + getattr(cfg, "n_special", 0)):
        raise CheckpointError(f"checkpoint '{path}' has a vocabulary of {len(vocab)} types but the model "
                              f"predicts {n_token}", f"the {source} belongs to another model; restore the right one")
    expected = read_config(path).get(VOCAB_FINGERPRINT) if vocab is not None else None
    if expected is not None and vocab_fingerprint(vocab) != expected:
        raise CheckpointError(f"the {source} in checkpoint '{path}' is not the tokenizer the model was trained with "
                              f"(other tokens: its sha256 differs from config.json's {VOCAB_FINGERPRINT})",
                              f"restore the {source} saved with this checkpoint, or fine-tune from a checkpoint "
                              "whose tokenizer you have")
    # a model may read text beyond the vocabulary it predicts (ELMo spells every word): it says how, also as
    # the backbone of a fine-tuned model
    text_vocabulary = getattr(getattr(model, "backbone", model), "text_vocabulary", None)
    if vocab is not None and text_vocabulary is not None:
        vocab = text_vocabulary(vocab)
    return model, vocab


def require_vocabulary(vocab: Any, path: str | Path) -> None:
    """Refuse checkpoint ``path`` loaded without a vocabulary (``vocab`` None) for a use that encodes text.

    Raises:
        CheckpointError: naming the files looked for and the fix.
    """
    if vocab is None:
        raise CheckpointError(f"checkpoint '{path}' has no {VOCAB_FILE} (nor a Hugging Face tokenizer file: "
                              f"{', '.join(HF_TOKENIZER_FILES)}), so text cannot be encoded with the ids the model "
                              "was trained on", f"copy the run's {VOCAB_FILE} next to the weights (genfeat writes it "
                              "into OUT/final and OUT/last); for a Hugging Face Transformer-XL directory, whose "
                              "tokenizer is a pickle (vocab.pkl) genfeat does not unpickle, save its symbols in id "
                              f"order as genfeat.data.vocab.SymbolVocab(symbols, 'word').save('DIR/{VOCAB_FILE}')")


def check_resume_vocabulary(vocab, resume_from: Path | None) -> None:
    """A resumed run must tokenise as the run it continues: its vocabulary must be the vocab.json
    saved in the checkpoint (same size is not enough: other pieces under the same ids would train
    on silently wrong inputs).

    Raises:
        CheckpointError: the vocabularies differ.
    """
    from .data.vocab import load_vocab

    if resume_from is None or not (resume_from / VOCAB_FILE).is_file():
        return
    if load_vocab(resume_from / VOCAB_FILE).payload() != vocab.payload():
        raise CheckpointError(f"the tokenizer of this run differs from the one checkpoint '{resume_from}' was "
                              "trained with", "resume with the run's own tokenizer: drop data.tokenizer (OUT/tokenizer "
                              "is read back) or pass the tokenizer folder the run was started with")
