"""Hugging Face OpenAI GPT <-> genfeat GPT-1.

Reads an ``OpenAIGPTLMHeadModel``, ``OpenAIGPTDoubleHeadsModel`` or ``OpenAIGPTModel`` directory
(config.json + model.safetensors or pytorch_model.bin; ``model_type: openai-gpt``) into
:class:`~genfeat.models.gpt.GPTLMHeadModel` (the multiple-choice head comes with the double-heads
model; the LM head is the tied token table, so it needs no weights of its own, and a table stored only
as ``lm_head.weight``, as transformers 5 saves the double-heads model, is that table); writes the reverse,
which ``transformers.OpenAIGPTLMHeadModel.from_pretrained`` (``OpenAIGPTDoubleHeadsModel`` with the
multiple-choice head) loads.

Hugging Face keeps linear layers as ``Conv1D`` with [in, out] weights: the conversion transposes
them. Its one token table holds the pretrained and the special tokens; genfeat keeps the special
ones apart (models/gpt.py), so the export concatenates them and records their number as
``genfeat_n_special`` in config.json, which the import reads back (a directory without it has
n_special 0 and all its tokens in the pretrained table: the same function).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..models.gpt import GPTConfig, GPTLMHeadModel
from . import hf_config, load_converted, read_hf_weights

# (HF config key, genfeat field); vocab_size is n_token + n_special, the inner width 4 n_embd
_CONFIG_FIELDS = [("n_embd", "d_model"), ("n_layer", "n_layer"), ("n_head", "n_head"), ("resid_pdrop", "dropout"),
                  ("embd_pdrop", "dropemb"), ("attn_pdrop", "dropatt"), ("n_positions", "max_position"),
                  ("summary_first_dropout", "mc_dropout"), ("initializer_range", "init_std"),
                  ("layer_norm_epsilon", "layer_norm_epsilon")]
_SPECIAL_KEY = "genfeat_n_special"
_TABLE = "transformer.tokens_embed.weight"
_MC = "multiple_choice_head.summary"
# HF's settings that genfeat's GPT-1 has (others are refused, not silently changed)
_FIXED = {"afn": "gelu", "summary_type": "cls_index", "summary_use_proj": True, "summary_activation": None,
          "summary_proj_to_labels": True}


def _name_map(cfg: GPTConfig) -> dict[str, str]:
    """genfeat parameter name -> HF weight name, for all but the token tables."""
    parts = {}
    for n in range(cfg.n_layer):
        hf = f"transformer.h.{n}"
        parts.update({f"layers.{n}.attn.qkv": f"{hf}.attn.c_attn", f"layers.{n}.attn.out": f"{hf}.attn.c_proj",
                      f"layers.{n}.attn_norm": f"{hf}.ln_1", f"layers.{n}.ff.fc1": f"{hf}.mlp.c_fc",
                      f"layers.{n}.ff.fc2": f"{hf}.mlp.c_proj", f"layers.{n}.ff_norm": f"{hf}.ln_2"})
    if cfg.mc_head:
        parts["mc_proj"] = _MC
    names = {"pos_emb.weight": "transformer.positions_embed.weight"}
    for ours, theirs in parts.items():
        for p in ("weight", "bias"):
            names[f"{ours}.{p}"] = f"{theirs}.{p}"
    return names


def _conv1d(ours: str) -> bool:
    """Whether HF stores this weight as a Conv1D ([in, out], the transpose of nn.Linear's)."""
    return ours.startswith("layers.") and ".norm" not in ours and "_norm" not in ours and ours.endswith("weight")


def hf_config_to_ours(hf: dict[str, Any], mc_head: bool) -> GPTConfig:
    """GPTConfig from an HF OpenAIGPTConfig dict; settings genfeat's GPT-1 does not have raise CheckpointError."""
    unsupported = [(k, hf[k]) for k, ok in _FIXED.items() if k in hf and hf[k] != ok]
    if unsupported:
        raise CheckpointError(f"Hugging Face OpenAI GPT with {', '.join(f'{k}={v!r}' for k, v in unsupported)} is "
                              "not supported", "convert a GPT-1 with afn='gelu' and the default multiple-choice head")
    fields = {ours: hf[theirs] for theirs, ours in _CONFIG_FIELDS if theirs in hf}
    n_special = hf.get(_SPECIAL_KEY, 0)
    d_model = fields.get("d_model", GPTConfig.d_model)
    return hf_config(GPTConfig, {**fields, "n_token": hf.get("vocab_size", 40478) - n_special,
                                 "n_special": n_special, "d_inner": 4 * d_model, "mc_head": mc_head}, "GPT-1")


def ours_to_hf_config(cfg: GPTConfig) -> dict[str, Any]:
    """The config.json of an equivalent HF OpenAIGPTLMHeadModel (OpenAIGPTDoubleHeadsModel with the MC head)."""
    if cfg.d_inner != 4 * cfg.d_model:
        raise CheckpointError(f"a GPT with d_inner {cfg.d_inner} has no Hugging Face form (OpenAI GPT's inner "
                              f"width is 4 d_model = {4 * cfg.d_model})", "save a genfeat checkpoint instead")
    out = {theirs: getattr(cfg, ours) for theirs, ours in _CONFIG_FIELDS}
    out.update(_FIXED)
    out.update({"model_type": "openai-gpt", "vocab_size": cfg.n_token + cfg.n_special, _SPECIAL_KEY: cfg.n_special,
                "architectures": ["OpenAIGPTDoubleHeadsModel" if cfg.mc_head else "OpenAIGPTLMHeadModel"]})
    return out


def load_hf_gpt(path: str | Path) -> GPTLMHeadModel:
    """Build a genfeat GPT-1 from a Hugging Face OpenAI GPT directory (LM head, double heads, or bare)."""
    path = Path(path)
    hf_cfg = json.loads((path / "config.json").read_text())
    weights = read_hf_weights(path)
    if not any(k.startswith("transformer.") for k in weights):  # a bare OpenAIGPTModel
        weights = {f"transformer.{k}": v for k, v in weights.items()}
    if _TABLE not in weights and "lm_head.weight" in weights:
        # transformers 5 ties OpenAIGPTDoubleHeadsModel's table to its head, so writes the pair as lm_head.weight
        weights[_TABLE] = weights.pop("lm_head.weight")
    if _TABLE not in weights:
        raise CheckpointError(f"Hugging Face weights in '{path}' lack '{_TABLE}'",
                              "pass an OpenAI GPT directory (model_type openai-gpt) with its weights")
    model = GPTLMHeadModel(hf_config_to_ours(hf_cfg, mc_head=f"{_MC}.weight" in weights))
    cfg = model.config
    if "lm_head.weight" in weights and not torch.equal(weights.pop("lm_head.weight"), weights[_TABLE]):
        raise CheckpointError("Hugging Face weight 'lm_head.weight' differs from the token table (an untied head)",
                              "genfeat's GPT ties the LM head to the token embeddings; convert a tied model")
    table = weights[_TABLE]
    if tuple(table.shape) != (cfg.n_token + cfg.n_special, cfg.d_model):
        raise CheckpointError(f"Hugging Face weight '{_TABLE}' has shape {tuple(table.shape)}, expected "
                              f"{(cfg.n_token + cfg.n_special, cfg.d_model)}", "the config.json and the weights disagree")
    state = {"word_emb.weight": table[:cfg.n_token]}
    if cfg.n_special:
        state["special_emb.weight"] = table[cfg.n_token:]
    used = {_TABLE}
    for ours, theirs in _name_map(cfg).items():
        if theirs not in weights:
            raise CheckpointError(f"Hugging Face weights lack '{theirs}'", "the config.json and the weights disagree")
        state[ours] = weights[theirs].t() if _conv1d(ours) else weights[theirs]
        used.add(theirs)
    load_converted(model, state, sorted(set(weights) - used), "GPT-1")
    return model.eval()


def save_hf_gpt(model: GPTLMHeadModel, path: str | Path, extra: dict | None = None) -> None:
    """Write config.json + model.safetensors in the OpenAIGPTLMHeadModel (or OpenAIGPTDoubleHeadsModel) format;
    ``extra``: more config.json fields (a task model's input settings)."""
    path = Path(path)
    hf_cfg = {**ours_to_hf_config(model.config), **(extra or {})}
    path.mkdir(parents=True, exist_ok=True)
    state = model.state_dict()
    tensors = {_TABLE: model.token_table().detach().contiguous().clone()}
    for ours, theirs in _name_map(model.config).items():
        tensor = state[ours].detach()
        tensors[theirs] = (tensor.t() if _conv1d(ours) else tensor).contiguous().clone()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(hf_cfg, indent=2, sort_keys=True) + "\n")
