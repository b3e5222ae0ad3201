"""Hugging Face Transformer-XL (``TransfoXLLMHeadModel``) directories <-> genfeat.

Reads config.json plus model.safetensors (or pytorch_model.bin through
``torch.load(weights_only=True)``, never a plain unpickle) and maps names and config fields onto
:class:`~genfeat.models.transformer_xl.TransformerXLLMHeadModel`; writes the reverse, loadable by
``transformers.TransfoXLLMHeadModel.from_pretrained``.

Note: HF starts from ``mem_len`` zero vectors of memory, genfeat (like the original code) from an
empty memory; give HF zero-length mems to compare the two.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel
from . import hf_config, read_hf_weights

# (HF config key, genfeat field); the rest of HF's fields are fixed by the architecture.
_CONFIG_FIELDS = [("vocab_size", "n_token"), ("cutoffs", "cutoffs"), ("div_val", "div_val"), ("d_model", "d_model"),
                  ("d_embed", "d_embed"), ("n_head", "n_head"), ("d_head", "d_head"), ("d_inner", "d_inner"),
                  ("n_layer", "n_layer"), ("dropout", "dropout"), ("dropatt", "dropatt"), ("mem_len", "mem_len"),
                  ("clamp_len", "clamp_len"), ("same_length", "same_length"), ("untie_r", "untie_r"),
                  ("tie_word_embeddings", "tie_weight"), ("tie_projs", "tie_projs"), ("pre_lnorm", "pre_lnorm"),
                  ("init_std", "init_std"), ("proj_init_std", "proj_init_std"),
                  ("layer_norm_epsilon", "layer_norm_epsilon")]

# (HF name, genfeat name); {n} is a layer or cluster index, {p} a parameter suffix.
_NAME_PAIRS = [
    ("transformer.word_emb.emb_layers.{n}.weight", "word_emb.layers.{n}.weight"),
    ("transformer.word_emb.emb_projs.{n}", "word_emb.projs.{n}"),
    ("transformer.r_{p}_bias", "r_{p}_bias"),
    ("transformer.layers.{n}.dec_attn.r_{p}_bias", "layers.{n}.r_{p}_bias"),
    ("transformer.layers.{n}.dec_attn.qkv_net.weight", "layers.{n}.attn.qkv.weight"),
    ("transformer.layers.{n}.dec_attn.o_net.weight", "layers.{n}.attn.out.weight"),
    ("transformer.layers.{n}.dec_attn.r_net.weight", "layers.{n}.attn.r_net.weight"),
    ("transformer.layers.{n}.dec_attn.layer_norm.{p}", "layers.{n}.attn_norm.{p}"),
    ("transformer.layers.{n}.pos_ff.CoreNet.0.{p}", "layers.{n}.ff.fc1.{p}"),
    ("transformer.layers.{n}.pos_ff.CoreNet.3.{p}", "layers.{n}.ff.fc2.{p}"),
    ("transformer.layers.{n}.pos_ff.layer_norm.{p}", "layers.{n}.ff_norm.{p}"),
    ("crit.cluster_{p}", "crit.cluster_{p}"),
    ("crit.out_layers.{n}.{p}", "crit.layers.{n}.{p}"),
    ("crit.out_projs.{n}", "crit.projs.{n}"),
]


def _pattern(template: str) -> re.Pattern:
    return re.compile(re.escape(template).replace(r"\{n\}", r"(?P<n>\d+)").replace(r"\{p\}", r"(?P<p>[a-z]+)"))


def _rename(name: str, direction: int) -> str | None:
    """Map a parameter name HF -> genfeat (direction 0) or genfeat -> HF (direction 1)."""
    for pair in _NAME_PAIRS:
        match = _pattern(pair[direction]).fullmatch(name)
        if match:
            return pair[1 - direction].format(**match.groupdict())
    return None


_IGNORED = re.compile(r"transformer\.pos_emb\.inv_freq")


def hf_config_to_ours(hf: dict[str, Any]) -> TransformerXLConfig:
    """TransformerXLConfig from an HF TransfoXLConfig dict; unsupported settings raise CheckpointError."""
    if hf.get("attn_type", 0) != 0:
        raise CheckpointError(f"Hugging Face Transformer-XL with attn_type {hf['attn_type']} is not supported",
                              "only attn_type 0 (relative, the released models) can be converted")
    if hf.get("sample_softmax", -1) > 0:
        raise CheckpointError("Hugging Face Transformer-XL with sample_softmax is not supported",
                              "convert a model trained with the full adaptive softmax")
    fields = {ours: hf[theirs] for theirs, ours in _CONFIG_FIELDS if theirs in hf}
    return hf_config(TransformerXLConfig, fields, "Transformer-XL")


def ours_to_hf_config(cfg: TransformerXLConfig) -> dict[str, Any]:
    """The config.json of an equivalent HF TransfoXLLMHeadModel."""
    if cfg.attn_type != "relative" or cfg.ext_len:
        raise CheckpointError(f"a Transformer-XL with attn_type={cfg.attn_type}, ext_len={cfg.ext_len} has no "
                              "Hugging Face equivalent", "export a relative-attention model without ext_len")
    out = {theirs: getattr(cfg, ours) for theirs, ours in _CONFIG_FIELDS}
    out.update({"model_type": "transfo-xl", "architectures": ["TransfoXLLMHeadModel"], "attn_type": 0,
                "adaptive": True, "sample_softmax": -1, "proj_share_all_but_first": True, "init": "normal",
                "init_range": 0.01})
    return out


def _hf_name_to_ours(name: str) -> str | None:
    if _IGNORED.fullmatch(name):
        return None
    ours = _rename(name, 0)
    if ours is None:
        raise CheckpointError(f"Hugging Face weight '{name}' has no genfeat counterpart",
                              "the directory does not hold a TransfoXLLMHeadModel of a supported configuration")
    return ours


def load_hf_transfo_xl(path: str | Path) -> TransformerXLLMHeadModel:
    """Build a genfeat Transformer-XL from a Hugging Face TransfoXLLMHeadModel directory."""
    path = Path(path)
    cfg = hf_config_to_ours(json.loads((path / "config.json").read_text()))
    model = TransformerXLLMHeadModel(cfg)
    state = {}
    for name, tensor in read_hf_weights(path).items():
        ours = _hf_name_to_ours(name)
        # With shared u, v a .bin file also lists them under every layer; they are the same tensors.
        if ours is not None and not (not cfg.untie_r and re.fullmatch(r"layers\.\d+\.r_[wr]_bias", ours)):
            state[ours] = tensor
    expected = model.state_dict()
    # Tied tensors appear under one name in safetensors files and under all names in .bin files.
    missing = [k for k in expected if k not in state and not _is_tied(model, k, state)]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        raise CheckpointError(f"Hugging Face weights do not match the config (missing {missing[:4]}, "
                              f"unexpected {unexpected[:4]})", "the config.json and the weights disagree")
    for k, v in state.items():
        if expected[k].shape != v.shape:
            raise CheckpointError(f"Hugging Face weight for '{k}' has shape {tuple(v.shape)}, expected "
                                  f"{tuple(expected[k].shape)}", "the config.json and the weights disagree")
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    return model.eval()


def _is_tied(model: TransformerXLLMHeadModel, name: str, state: dict[str, torch.Tensor]) -> bool:
    """True when ``name`` shares storage with a parameter present in ``state``."""
    params = dict(model.named_parameters(remove_duplicate=False))
    if name not in params:
        return False
    target = params[name]
    return any(other in state and p is target for other, p in params.items())


def save_hf_transfo_xl(model: TransformerXLLMHeadModel, path: str | Path) -> None:
    """Write config.json + model.safetensors in the TransfoXLLMHeadModel format into ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    hf_cfg = ours_to_hf_config(model.config)
    tensors = {}
    for name, tensor in model.state_dict().items():
        tensors[_rename(name, 1)] = tensor.detach().contiguous().clone()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(hf_cfg, indent=2, sort_keys=True) + "\n")
