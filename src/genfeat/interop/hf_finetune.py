"""Hugging Face BERT task models <-> genfeat fine-tuned models (:class:`~genfeat.models.heads.FineTuneModel`).

Reads ``BertForSequenceClassification`` (classification, or regression with ``num_labels`` 1),
``BertForMultipleChoice`` and ``BertForQuestionAnswering`` directories; writes the same. The encoder's
weights convert as genfeat.interop.hf_bert converts them; the heads map one to one:

- sequence classification / multiple choice: HF's pooler (dense + tanh over [CLS]) is the head's
  ``pooler`` and ``classifier`` its ``out`` (one score per choice for multiple choice);
- question answering: ``qa_outputs`` (start and end scores per token) is the span head's ``out``.

HF task models have no masked-LM head, so the backbone's keeps its initialisation (it is never used for
a task). The task the model was trained for is HF's ``finetuning_task`` when the config names one
(else ``hf:<architecture>``, which ``genfeat evaluate --task`` accepts for any task whose head fits).
Not converted: SQuAD 2.0 answerability heads (HF's BERT has none), and GPT-1's or XLNet's task models.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import save_file

from ..config import to_dict
from ..errors import CheckpointError
from ..models.bert import BertForMaskedLM
from ..models.heads import FineTuneConfig, FineTuneModel, HeadConfig
from . import gather_converted, load_converted, read_hf_weights, split_converted
from .hf_bert import _name_map, hf_config_to_ours, ours_to_hf_config

# HF architecture -> (head weight prefix, head kind or None: classification/regression by num_labels)
BERT_TASK_HEADS = {"BertForSequenceClassification": ("classifier", None),
                   "BertForMultipleChoice": ("classifier", "multiple_choice"),
                   "BertForQuestionAnswering": ("qa_outputs", "span")}


def _encoder_names(model: FineTuneModel) -> dict[str, str | tuple[str, ...]]:
    """FineTuneModel parameter -> HF weight name(s) of the encoder (hf_bert's map without the pretraining heads)."""
    return {f"backbone.{ours}": theirs for ours, theirs in _name_map(model.backbone.config).items()
            if ours.startswith("bert.")}


def _head_names(model: FineTuneModel, prefix: str) -> dict[str, str]:
    names = {f"head.out.{p}": f"{prefix}.{p}" for p in ("weight", "bias")}
    if model.head.pooler is not None:
        names.update({f"head.pooler.{p}": f"bert.pooler.dense.{p}" for p in ("weight", "bias")})
    return names


def load_hf_bert_task(path: str | Path) -> FineTuneModel:
    """A FineTuneModel from a Hugging Face BERT task-model directory (module docstring)."""
    path = Path(path)
    hf_cfg = json.loads((path / "config.json").read_text())
    arch = (hf_cfg.get("architectures") or [""])[0]
    if arch not in BERT_TASK_HEADS:
        raise CheckpointError(f"'{path}' holds a {arch or 'BERT'} model, not a BERT task model",
                              f"pass a {', '.join(BERT_TASK_HEADS)} directory")
    weights = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
               for k, v in read_hf_weights(path).items()}
    prefix, kind = BERT_TASK_HEADS[arch]
    if f"{prefix}.weight" not in weights:
        raise CheckpointError(f"Hugging Face weights lack '{prefix}.weight'", "the config.json and the weights disagree")
    n_out = weights[f"{prefix}.weight"].shape[0]
    kind = kind or ("regression" if n_out == 1 else "classification")
    backbone = BertForMaskedLM(hf_config_to_ours(hf_cfg, nsp=False))
    bert = backbone.config
    dropout = hf_cfg.get("classifier_dropout")
    head = HeadConfig(kind=kind, n_labels=n_out if kind in ("classification", "regression") else 2, d_model=bert.d_model,
                      pool=kind != "span", dropout=bert.dropout if dropout is None else dropout)
    model = FineTuneModel(FineTuneConfig(task=hf_cfg.get("finetuning_task") or f"hf:{arch}", backbone="bert",
                                         backbone_config=to_dict(bert), head=head, max_len=bert.max_position,
                                         doc_stride=bert.max_position // 2), backbone)
    state, used = gather_converted({**_encoder_names(model), **_head_names(model, prefix)}, weights)
    # the unused masked-LM head keeps its initialisation
    state = {**model.state_dict(), **state}
    load_converted(model, state, sorted(set(weights) - used - {"bert.embeddings.position_ids"}), "BERT task model")
    return model.eval()


def save_hf_bert_task(model: FineTuneModel, path: str | Path) -> None:
    """Write a BERT FineTuneModel as the matching Hugging Face task model (config.json + model.safetensors)."""
    cfg = model.config
    if cfg.backbone != "bert" or cfg.head.answerability:
        raise CheckpointError(f"a fine-tuned {cfg.backbone} model{' with an answerability head' if cfg.head.answerability else ''} "
                              "has no Hugging Face task-model format in genfeat", "save a genfeat checkpoint")
    arch = {"span": "BertForQuestionAnswering", "multiple_choice": "BertForMultipleChoice"}.get(
        cfg.head.kind, "BertForSequenceClassification")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = split_converted({**_encoder_names(model), **_head_names(model, BERT_TASK_HEADS[arch][0])},
                              model.state_dict())
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    hf = ours_to_hf_config(model.backbone.config)
    hf.update({"architectures": [arch], "finetuning_task": cfg.task, "classifier_dropout": cfg.head.dropout})
    if cfg.head.kind in ("classification", "regression"):
        hf["num_labels"] = cfg.head.n_labels
        hf["problem_type"] = "regression" if cfg.head.kind == "regression" else "single_label_classification"
        hf["id2label"] = {str(i): f"LABEL_{i}" for i in range(cfg.head.n_labels)}
        hf["label2id"] = {f"LABEL_{i}": i for i in range(cfg.head.n_labels)}
    (path / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
