"""Hugging Face BERT <-> genfeat BERT.

Reads a ``BertForMaskedLM`` or ``BertForPreTraining`` directory (config.json + model.safetensors or
pytorch_model.bin; ``model_type: bert``) into :class:`~genfeat.models.bert.BertForMaskedLM` (the
NSP head comes with ``BertForPreTraining``); writes the reverse, which
``transformers.BertForMaskedLM.from_pretrained`` (or ``BertForPreTraining`` with the NSP head) loads.

genfeat fuses each layer's query, key and value projections into one [3d, d] product (``attn.qkv``);
the conversion concatenates and splits them. The decoder of the MLM head is the word embedding
(tied); an HF model with an untied decoder is refused rather than silently re-tied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..models.bert import BertConfig, BertForMaskedLM
from . import gather_converted, hf_config, load_converted, read_hf_weights, split_converted

# (HF config key, genfeat field); the other fields of HF's BertConfig are fixed by the architecture.
_CONFIG_FIELDS = [("vocab_size", "n_token"), ("hidden_size", "d_model"), ("num_hidden_layers", "n_layer"),
                  ("num_attention_heads", "n_head"), ("intermediate_size", "d_inner"),
                  ("hidden_dropout_prob", "dropout"), ("attention_probs_dropout_prob", "dropatt"),
                  ("max_position_embeddings", "max_position"), ("type_vocab_size", "n_type"),
                  ("pad_token_id", "pad_id"), ("initializer_range", "init_std"), ("layer_norm_eps", "layer_norm_epsilon")]
_QKV = ("query", "key", "value")
# weights HF keeps besides the ones it ties to others, which carry no information of their own
_TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
         "cls.predictions.decoder.bias": "cls.predictions.bias"}
_IGNORED = {"bert.embeddings.position_ids"}


def _name_map(cfg: BertConfig) -> dict[str, str | tuple[str, ...]]:
    """genfeat parameter name -> HF weight name (a tuple of three: the fused q, k, v of a layer)."""
    names: dict[str, str | tuple[str, ...]] = {
        "bert.word_emb.weight": "bert.embeddings.word_embeddings.weight",
        "bert.pos_emb.weight": "bert.embeddings.position_embeddings.weight",
        "bert.type_emb.weight": "bert.embeddings.token_type_embeddings.weight",
        "mlm_bias": "cls.predictions.bias",
    }
    parts = {"bert.emb_norm": "bert.embeddings.LayerNorm", "mlm_dense": "cls.predictions.transform.dense",
             "mlm_norm": "cls.predictions.transform.LayerNorm"}
    if cfg.nsp:
        parts.update({"pooler": "bert.pooler.dense", "nsp_head": "cls.seq_relationship"})
    for n in range(cfg.n_layer):
        hf = f"bert.encoder.layer.{n}"
        parts.update({f"bert.layers.{n}.attn.out": f"{hf}.attention.output.dense",
                      f"bert.layers.{n}.attn_norm": f"{hf}.attention.output.LayerNorm",
                      f"bert.layers.{n}.ff.fc1": f"{hf}.intermediate.dense",
                      f"bert.layers.{n}.ff.fc2": f"{hf}.output.dense",
                      f"bert.layers.{n}.ff_norm": f"{hf}.output.LayerNorm"})
        for p in ("weight", "bias"):
            names[f"bert.layers.{n}.attn.qkv.{p}"] = tuple(f"{hf}.attention.self.{x}.{p}" for x in _QKV)
    for ours, theirs in parts.items():
        for p in ("weight", "bias"):
            names[f"{ours}.{p}"] = f"{theirs}.{p}"
    return names


def hf_config_to_ours(hf: dict[str, Any], nsp: bool) -> BertConfig:
    """BertConfig from an HF BertConfig dict; settings genfeat's BERT does not have raise CheckpointError."""
    unsupported = [(k, hf[k]) for k, ok in (("hidden_act", "gelu"), ("position_embedding_type", "absolute"),
                                            ("tie_word_embeddings", True), ("is_decoder", False))
                   if k in hf and hf[k] != ok]
    if unsupported:
        raise CheckpointError(f"Hugging Face BERT with {', '.join(f'{k}={v!r}' for k, v in unsupported)} is not "
                              "supported", "convert a BERT with GELU, absolute positions and a tied decoder")
    fields = {ours: hf[theirs] for theirs, ours in _CONFIG_FIELDS if theirs in hf}
    return hf_config(BertConfig, {**fields, "nsp": nsp}, "BERT")


def ours_to_hf_config(cfg: BertConfig) -> dict[str, Any]:
    """The config.json of an equivalent HF BertForMaskedLM (BertForPreTraining with the NSP head)."""
    out = {theirs: getattr(cfg, ours) for theirs, ours in _CONFIG_FIELDS}
    out.update({"model_type": "bert", "architectures": ["BertForPreTraining" if cfg.nsp else "BertForMaskedLM"],
                "hidden_act": "gelu", "position_embedding_type": "absolute", "tie_word_embeddings": True})
    return out


def load_hf_bert(path: str | Path) -> BertForMaskedLM:
    """Build a genfeat BERT from a Hugging Face BertForMaskedLM / BertForPreTraining directory."""
    path = Path(path)
    hf_cfg = json.loads((path / "config.json").read_text())
    weights = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
               for k, v in read_hf_weights(path).items()}
    if "cls.predictions.bias" not in weights:
        raise CheckpointError(f"'{path}' holds a BERT without the masked-LM head (architectures "
                              f"{hf_cfg.get('architectures')})", "pass a BertForMaskedLM or BertForPreTraining "
                              "directory")
    model = BertForMaskedLM(hf_config_to_ours(hf_cfg, nsp="cls.seq_relationship.weight" in weights))
    for tied, source in _TIED.items():
        if tied in weights and source in weights and not torch.equal(weights.pop(tied), weights[source]):
            raise CheckpointError(f"Hugging Face weight '{tied}' differs from '{source}' (an untied decoder)",
                                  "genfeat's BERT ties the decoder to the word embeddings; convert a tied model")
    state, used = gather_converted(_name_map(model.config), weights)
    load_converted(model, state, sorted(set(weights) - used - _IGNORED), "BERT")
    return model.eval()


def save_hf_bert(model: BertForMaskedLM, path: str | Path) -> None:
    """Write config.json + model.safetensors in the BertForMaskedLM (or BertForPreTraining) format into ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = split_converted(_name_map(model.config), model.state_dict())
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(ours_to_hf_config(model.config), indent=2, sort_keys=True) + "\n")
