"""Hugging Face XLNet (``XLNetLMHeadModel``) directories <-> genfeat.

Reads config.json plus model.safetensors (or pytorch_model.bin through
``torch.load(weights_only=True)``, never a plain unpickle) and maps it onto
:class:`~genfeat.models.xlnet.XLNetLMHeadModel`; writes the reverse, loadable by
``transformers.XLNetLMHeadModel.from_pretrained``.

HF keeps each projection as one [d, h, e] tensor (q, k, v, o, r); genfeat's relative attention
holds q, k, v stacked as one [3he, d] matrix and o, r as [d, he] and [he, d] matrices.
Configs: HF's ``mem_len`` None (keep every state) is read as 0 (no memory) and exported as None;
genfeat's ``dropatt`` has no HF field (HF uses ``dropout`` for attention probabilities too).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..models.xlnet import XLNetConfig, XLNetLMHeadModel
from . import hf_config, read_hf_weights

_PROJECTIONS = ("q", "k", "v", "o", "r")
# (HF name under transformer.layer.{n}., genfeat name under layers.{n}.) of tensors copied as they are
_LAYER_COPIES = [("rel_attn.r_w_bias", "r_w_bias"), ("rel_attn.r_r_bias", "r_r_bias"),
                 ("rel_attn.r_s_bias", "r_s_bias"), ("rel_attn.seg_embed", "seg_embed"),
                 ("rel_attn.layer_norm.weight", "attn_norm.weight"), ("rel_attn.layer_norm.bias", "attn_norm.bias"),
                 ("ff.layer_1.weight", "ff.fc1.weight"), ("ff.layer_1.bias", "ff.fc1.bias"),
                 ("ff.layer_2.weight", "ff.fc2.weight"), ("ff.layer_2.bias", "ff.fc2.bias"),
                 ("ff.layer_norm.weight", "ff_norm.weight"), ("ff.layer_norm.bias", "ff_norm.bias")]


def hf_config_to_ours(hf: dict[str, Any]) -> XLNetConfig:
    """XLNetConfig from an HF XLNetConfig dict; settings genfeat does not implement raise CheckpointError."""
    if hf.get("attn_type", "bi") != "bi":
        raise CheckpointError(f"Hugging Face XLNet with attn_type {hf['attn_type']!r} is not supported",
                              "only attn_type 'bi' (the released models) can be converted")
    d_model, n_head = hf.get("d_model", 1024), hf.get("n_head", 16)
    fields = {"n_token": hf.get("vocab_size", 32000), "d_model": d_model, "n_layer": hf.get("n_layer", 24),
              "n_head": n_head, "d_head": d_model // max(n_head, 1), "d_inner": hf.get("d_inner", 4096),
              "ff_activation": hf.get("ff_activation", "gelu"), "dropout": hf.get("dropout", 0.1),
              "dropatt": hf.get("dropout", 0.1), "mem_len": hf.get("mem_len") or 0,
              "reuse_len": hf.get("reuse_len") or None, "clamp_len": hf.get("clamp_len", -1),
              "bi_data": hf.get("bi_data", False), "init_std": hf.get("initializer_range", 0.02),
              "layer_norm_epsilon": hf.get("layer_norm_eps", 1e-12)}
    return hf_config(XLNetConfig, fields, "XLNet")


def ours_to_hf_config(cfg: XLNetConfig) -> dict[str, Any]:
    """The config.json of an equivalent HF XLNetLMHeadModel, for use downstream: ``bi_data`` (genfeat's
    bidirectional pretraining pipeline, which makes transformers' XLNet split every batch into forward and reversed
    halves, in its task models too) is written false, as in HF's own pretrained XLNets; the weights are the same."""
    if cfg.n_head * cfg.d_head != cfg.d_model:
        raise CheckpointError(f"an XLNet with n_head * d_head = {cfg.n_head * cfg.d_head} != d_model = "
                              f"{cfg.d_model} has no Hugging Face equivalent",
                              "export a model whose d_head is d_model / n_head")
    return {"model_type": "xlnet", "architectures": ["XLNetLMHeadModel"], "vocab_size": cfg.n_token,
            "d_model": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "d_head": cfg.d_head,
            "d_inner": cfg.d_inner, "ff_activation": cfg.ff_activation, "untie_r": True, "attn_type": "bi",
            "initializer_range": cfg.init_std, "layer_norm_eps": cfg.layer_norm_epsilon, "dropout": cfg.dropout,
            "mem_len": cfg.mem_len or None, "reuse_len": cfg.reuse_len, "bi_data": False,
            "clamp_len": cfg.clamp_len, "same_length": False, "tie_word_embeddings": True}


def hf_state_to_ours(hf: dict[str, torch.Tensor], cfg: XLNetConfig) -> dict[str, torch.Tensor]:
    """genfeat state dict from HF XLNetLMHeadModel tensors (``lm_loss.weight`` is the tied embedding).

    Shapes of the reshaped projections are checked here, those of the copied tensors by
    :func:`load_hf_xlnet` against the model."""
    hf = dict(hf)
    d, he = cfg.d_model, cfg.n_head * cfg.d_head

    def take(name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
        if name not in hf:
            raise CheckpointError(f"Hugging Face weights lack '{name}'",
                                  "the directory does not hold an XLNetLMHeadModel matching its config.json")
        x = hf.pop(name)
        if shape is not None and tuple(x.shape) != shape:
            raise CheckpointError(f"Hugging Face weight '{name}' has shape {tuple(x.shape)}, expected {shape}",
                                  "the config.json and the weights disagree")
        return x

    out = {"word_emb.weight": take("transformer.word_embedding.weight", (cfg.n_token, d)),
           "mask_emb": take("transformer.mask_emb", (1, 1, d)).reshape(d),
           "lm_bias": take("lm_loss.bias", (cfg.n_token,))}
    tied = hf.pop("lm_loss.weight", None)
    if tied is not None and not torch.equal(tied, out["word_emb.weight"]):
        raise CheckpointError("Hugging Face 'lm_loss.weight' differs from the word embeddings",
                              "genfeat's XLNet ties them; convert a model with tie_word_embeddings true")
    for n in range(cfg.n_layer):
        pre = f"transformer.layer.{n}."
        proj = {p: take(pre + f"rel_attn.{p}", (d, cfg.n_head, cfg.d_head)).reshape(d, he) for p in _PROJECTIONS}
        out[f"layers.{n}.attn.qkv.weight"] = torch.cat([proj["q"].t(), proj["k"].t(), proj["v"].t()], 0)
        out[f"layers.{n}.attn.out.weight"] = proj["o"]
        out[f"layers.{n}.attn.r_net.weight"] = proj["r"].t()
        for theirs, ours in _LAYER_COPIES:
            out[f"layers.{n}.{ours}"] = take(pre + theirs)
    if hf:
        raise CheckpointError(f"Hugging Face weights {sorted(hf)[:4]} have no genfeat counterpart",
                              "the directory does not hold an XLNetLMHeadModel matching its config.json")
    return {k: v.contiguous() for k, v in out.items()}


def ours_state_to_hf(model: XLNetLMHeadModel) -> dict[str, torch.Tensor]:
    """HF XLNetLMHeadModel tensors from a genfeat model (``lm_loss.weight`` written as the embedding)."""
    cfg = model.config
    d = cfg.d_model
    state = {k: v.detach() for k, v in model.state_dict().items()}
    out = {"transformer.word_embedding.weight": state["word_emb.weight"],
           "transformer.mask_emb": state["mask_emb"].reshape(1, 1, d),
           "lm_loss.weight": state["word_emb.weight"], "lm_loss.bias": state["lm_bias"]}
    for n in range(cfg.n_layer):
        pre = f"transformer.layer.{n}."
        q, k, v = state[f"layers.{n}.attn.qkv.weight"].t().chunk(3, dim=1)
        mats = {"q": q, "k": k, "v": v, "o": state[f"layers.{n}.attn.out.weight"],
                "r": state[f"layers.{n}.attn.r_net.weight"].t()}
        for p, x in mats.items():
            out[pre + f"rel_attn.{p}"] = x.reshape(d, cfg.n_head, cfg.d_head)
        for theirs, ours in _LAYER_COPIES:
            out[pre + theirs] = state[f"layers.{n}.{ours}"]
    return {k: v.contiguous().clone() for k, v in out.items()}


def load_hf_xlnet(path: str | Path) -> XLNetLMHeadModel:
    """Build a genfeat XLNet from a Hugging Face XLNetLMHeadModel directory."""
    path = Path(path)
    hf_cfg = json.loads((path / "config.json").read_text())
    cfg = hf_config_to_ours(hf_cfg)
    weights = read_hf_weights(path)
    if "lm_loss.bias" not in weights:
        raise CheckpointError(f"'{path}' holds an XLNet without the LM head (architectures "
                              f"{hf_cfg.get('architectures')})", "pass an XLNetLMHeadModel directory")
    model = XLNetLMHeadModel(cfg)
    state = hf_state_to_ours(weights, cfg)
    for k, v in model.state_dict().items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise CheckpointError(f"Hugging Face weight for '{k}' has shape {tuple(state[k].shape)}, expected "
                                  f"{tuple(v.shape)}", "the config.json and the weights disagree")
    model.load_state_dict(state)
    return model.eval()


def save_hf_xlnet(model: XLNetLMHeadModel, path: str | Path) -> None:
    """Write config.json + model.safetensors in the XLNetLMHeadModel format into ``path``.

    The tied ``lm_loss.weight`` is left out of the safetensors file (it may not hold one tensor
    twice); HF re-ties it to the word embeddings on loading. XLNetLMHeadModel has no next-sentence
    head: a model trained with one (``nsp``) is written without it, and a note on stderr says so."""
    if model.config.nsp:
        print("note: the next-sentence head (nsp) has no place in Hugging Face's XLNetLMHeadModel and is left out "
              "of the export; the genfeat checkpoint keeps it", file=sys.stderr)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = ours_state_to_hf(model)
    del tensors["lm_loss.weight"]
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(ours_to_hf_config(model.config), indent=2, sort_keys=True) + "\n")
