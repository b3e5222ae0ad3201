"""Hugging Face BERT and XLNet task models <-> genfeat fine-tuned models (:class:`~genfeat.models.heads.FineTuneModel`).

Reads ``BertForSequenceClassification`` (classification, or regression with ``num_labels`` 1),
``BertForMultipleChoice``, ``BertForQuestionAnswering``, ``XLNetForSequenceClassification``,
``XLNetForQuestionAnsweringSimple`` and ``XLNetForQuestionAnswering`` directories; writes the same, and
multiple-choice GPT-1 models as ``OpenAIGPTDoubleHeadsModel``. The encoders' weights convert as
genfeat.interop.hf_bert and hf_xlnet convert them; the heads map one to one:

- BERT sequence classification / multiple choice: HF's pooler (dense + tanh over [CLS]) is the head's
  ``pooler`` and ``classifier`` its ``out`` (one score per choice for multiple choice);
- XLNet sequence classification: ``sequence_summary.summary`` (dense + tanh over the last token,
  ``<cls>``; summary_type "last") is the ``pooler`` and ``logits_proj`` the ``out``;
- question answering: ``qa_outputs`` (start and end scores per token) is the span head's ``out``;
- XLNet question answering (XLNetForQuestionAnswering, XLNet's SQuAD head): a span head with
  start-conditioned end scores (``span_end`` start_conditioned): ``start_logits.dense`` is ``out`` (start scores),
  ``end_logits`` (dense_0 on [h_end; h_start], tanh, LayerNorm, dense_1) is ``end``
  (:class:`~genfeat.models.heads.EndGivenStart`), and ``answer_class`` (dense_0 on [h_start; h_cls], tanh,
  dense_1) is the answerability head ``answer`` with its last layer negated (HF's logit is of "impossible",
  genfeat's of "answerable"). HF always has an answer class, trained or not (its SQuAD 1.1 training never
  reaches it); genfeat keeps it unless config.json says ``genfeat_answerability: false``, which genfeat's
  export writes for a head without one (with a zero answer class: cls_logits 0). It only answers "" on a task
  that admits unanswerable questions (``TaskSpec.unanswerable``, SQuAD 2.0), so a SQuAD 1.1 model's untrained
  answer class leaves ``genfeat evaluate --task squad_split`` answering every question. HF's
  ``start_n_top``/``end_n_top`` beam is not genfeat's decoding (genfeat.methods.finetune).
- GPT-1 double heads: the multiple-choice head (a linear score of each choice's extract state) is a
  multiple-choice head's ``out``. An ``OpenAIGPTDoubleHeadsModel`` directory still loads as genfeat's GPT-1
  with its head (genfeat.interop.hf_gpt); :func:`from_double_heads` makes the task model of it (``genfeat
  evaluate --task`` does), when the directory says which tokens are the special ones (``genfeat_n_special``,
  as hf_gpt writes it), the last three being start, delimiter and extract.

Classes: ``id2label`` becomes the head's ``label_names``, matched to a task's labels before it scores that task
(genfeat.methods.finetune.align_labels; transformers' ``LABEL_0``... name nothing and are read in the task's
order, with a note); the export writes the task's label names. Inputs: the export also writes how the model
reads them (``genfeat_max_len``, ``genfeat_doc_stride``, ``genfeat_max_segments``, ``genfeat_both_orders``,
which transformers keeps as config attributes) and the import reads them back; a directory without them is read
as the HF models read their inputs: at most the model's positions (BERT, GPT-1) or 512 tokens (XLNet) in one
segment, and a pair in one order (``both_orders`` false), as the HF models were trained. HF task models
have no LM head, so the backbone's keeps its initialisation (BERT) or a zero bias (XLNet,
whose decoder is the word embedding); a task never uses it. The task the model was trained for is HF's
``finetuning_task`` when that is a genfeat task (a genfeat export's), else ``hf:<finetuning_task>`` or
``hf:<architecture>``: a head from elsewhere, which ``genfeat evaluate --task`` accepts for any task whose head
fits, also after a genfeat export. Not converted (no HF class has them): an answerability head
beside per-token end scores, start-conditioned end scores on BERT, GPT-1 heads other than multiple choice;
nor XLNet sequence summaries other than "last" with a tanh projection.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from ..config import to_dict
from ..errors import CheckpointError, with_article
from ..models.bert import BertForMaskedLM
from ..models.gpt import GPTLMHeadModel
from ..models.heads import FineTuneConfig, FineTuneModel, HeadConfig, get_adapter
from ..models.xlnet import XLNetLMHeadModel
from ..tasks.catalog import TASKS
from . import gather_converted, hf_gpt, hf_xlnet, load_converted, read_hf_weights, split_converted
from .hf_bert import _name_map, hf_config_to_ours, ours_to_hf_config

# HF architecture -> (head weight prefix, head kind or None: classification/regression by num_labels)
BERT_TASK_HEADS = {"BertForSequenceClassification": ("classifier", None),
                   "BertForMultipleChoice": ("classifier", "multiple_choice"),
                   "BertForQuestionAnswering": ("qa_outputs", "span")}
GPT_TASK = "OpenAIGPTDoubleHeadsModel"
XLNET_TASK_HEADS = {"XLNetForSequenceClassification": ("logits_proj", None),
                    "XLNetForQuestionAnsweringSimple": ("qa_outputs", "span"),
                    "XLNetForQuestionAnswering": ("start_logits.dense", "span")}
XLNET_QA = "XLNetForQuestionAnswering"
_XLNET_POOLER = "sequence_summary.summary"
# XLNetForQuestionAnswering's end scores given the start and answer class (its last weight negated) -> genfeat's
_XLNET_END = {"head.end.dense": "end_logits.dense_0", "head.end.norm": "end_logits.LayerNorm",
              "head.end.score": "end_logits.dense_1"}
_XLNET_ANSWER = {"head.answer.0.weight": "answer_class.dense_0.weight", "head.answer.0.bias": "answer_class.dense_0.bias",
                 "head.answer.3.weight": "answer_class.dense_1.weight"}
_NEGATED = "head.answer.3.weight"


def _head_kind(kind: str | None, n_out: int) -> str:
    return kind or ("regression" if n_out == 1 else "classification")


def _default_names(n: int) -> list[str]:
    """transformers' names for classes nobody named."""
    return [f"LABEL_{i}" for i in range(n)]


def _class_names(hf_cfg: dict, n_out: int, where: str) -> list[str]:
    """The classes as ``id2label`` names them, in id order; transformers' defaults when it names none.

    Raises:
        CheckpointError: ``id2label`` or ``num_labels`` counts other than the head's ``n_out`` rows, or ``id2label``
            lacks one of the ids 0..n_out-1 (transformers refuses such a directory; reading its classes in
            another order would mis-score every example).
    """
    id2label = hf_cfg.get("id2label")
    counts = {"id2label": len(id2label) if isinstance(id2label, dict) else None, "num_labels": hf_cfg.get("num_labels")}
    for name, count in counts.items():
        if count is not None and count != n_out:
            raise CheckpointError(f"'{where}' config.json gives {count} classes in {name}, but its classifier has "
                                  f"{n_out} rows", "make id2label, label2id and num_labels name exactly the "
                                  "classifier's classes, or use the config.json saved with these weights")
    if not isinstance(id2label, dict):
        return _default_names(n_out)
    names = [id2label.get(str(i), id2label.get(i)) for i in range(n_out)]
    if None in names:
        raise CheckpointError(f"'{where}' config.json's id2label has keys {sorted(id2label)}, not the ids 0 to "
                              f"{n_out - 1}", "key id2label by the classifier's row numbers")
    return [str(name) for name in names]


def _task_name(finetuning_task: Any, arch: str) -> str:
    """The genfeat task a task model's head serves: its ``finetuning_task`` when it names a genfeat task (case, ``-``
    and ``_`` aside: transformers' older GLUE scripts wrote "SST-2", "sts-b", "MNLI-MM"), or is already marked
    ``hf:``; else ``hf:<its name>`` (``hf:<architecture>`` when it names none), a head from elsewhere."""
    name = str(finetuning_task) if finetuning_task else ""
    if name in TASKS or name.startswith("hf:"):
        return name
    key = name.lower().replace("-", "").replace("_", "")
    key = "mnli" if key == "mnlimm" else key
    known = {task.replace("_", ""): task for task in TASKS}
    return known.get(key, f"hf:{name or arch}")


def _task_model(arch: str, backbone_name: str, backbone, hf_cfg: dict, kind: str, n_out: int, dropout: float,
                max_len: int, where: str | Path, **span: Any) -> FineTuneModel:
    """``where``: the directory (for errors). ``span``: HeadConfig's answerability, span_end and
    layer_norm_epsilon. The input settings a genfeat export
    wrote (:func:`_input_fields`) come back; a directory from elsewhere reads at most ``max_len`` tokens in one
    segment, with a stride of half of it."""
    head = HeadConfig(kind=kind, n_labels=n_out if kind in ("classification", "regression") else 2,
                      d_model=backbone.config.d_model, pool=kind != "span" and get_adapter(backbone_name).pool,
                      dropout=dropout, **span)
    max_len = hf_cfg.get("genfeat_max_len", max_len)
    return FineTuneModel(FineTuneConfig(
        task=_task_name(hf_cfg.get("finetuning_task"), arch), backbone=backbone_name,
        backbone_config=to_dict(backbone.config), head=head, max_len=max_len,
        doc_stride=hf_cfg.get("genfeat_doc_stride", max_len // 2),
        max_query_len=hf_cfg.get("genfeat_max_query_len", FineTuneConfig.max_query_len),
        max_segments=hf_cfg.get("genfeat_max_segments", 1),
        both_orders=hf_cfg.get("genfeat_both_orders", False), squad_seed=hf_cfg.get("genfeat_squad_seed"),
        label_names=_class_names(hf_cfg, n_out, str(where)) if kind == "classification" else []), backbone)


def _input_fields(model: FineTuneModel) -> dict:
    """HF config fields (genfeat's own, which transformers keeps) for the input settings the model was trained with:
    read back, the directory reads its inputs as the genfeat checkpoint does."""
    cfg = model.config
    return {"genfeat_max_len": cfg.max_len, "genfeat_doc_stride": cfg.doc_stride,
            "genfeat_max_query_len": cfg.max_query_len, "genfeat_max_segments": cfg.max_segments,
            "genfeat_both_orders": cfg.both_orders,
            **({} if cfg.squad_seed is None else {"genfeat_squad_seed": cfg.squad_seed})}


def read_differently(model: FineTuneModel) -> list[str]:
    """What transformers' task model of an export computes otherwise than ``model``, one sentence each (``genfeat
    export`` prints them; genfeat reads the export back as trained, from the fields of :func:`_input_fields`)."""
    cfg, notes = model.config, []
    spec = TASKS.get(cfg.task)
    if cfg.both_orders and spec is not None and spec.transform == "similarity":
        notes.append(f"the model adds the states of both orders of each {cfg.task} pair (both_orders); transformers' "
                     "task model reads one order, so its scores differ from genfeat's")
    if cfg.max_segments > 1:
        notes.append(f"the model reads texts longer than {cfg.max_len} tokens as up to {cfg.max_segments} segments, "
                     "the earlier ones as memory; transformers' task model reads one segment, so its scores of long "
                     "texts differ from genfeat's")
    return notes


def _label_fields(model: FineTuneModel) -> dict:
    """HF config fields of a classification or regression head: ``id2label`` names the task's classes (a genfeat
    task's label names, else its labels) where the model knows them, else transformers' defaults."""
    head = model.config.head
    if head.kind not in ("classification", "regression"):
        return {}
    spec = TASKS.get(model.config.task)
    names = model.config.label_names or (spec.class_names if spec is not None else [])
    if head.kind == "regression" or len(names) != head.n_labels:
        names = _default_names(head.n_labels)
    return {"num_labels": head.n_labels,
            "problem_type": "regression" if head.kind == "regression" else "single_label_classification",
            "id2label": {str(i): name for i, name in enumerate(names)},
            "label2id": {name: i for i, name in enumerate(names)}}


def load_hf_task(path: str | Path) -> FineTuneModel:
    """A FineTuneModel from a Hugging Face BERT or XLNet task-model directory (module docstring)."""
    arch = (json.loads((Path(path) / "config.json").read_text()).get("architectures") or [""])[0]
    return load_hf_xlnet_task(path) if arch in XLNET_TASK_HEADS else load_hf_bert_task(path)


def save_hf_task(model: FineTuneModel, path: str | Path) -> None:
    """Write a BERT, XLNet or GPT-1 FineTuneModel as the matching Hugging Face task model."""
    save = {"xlnet": save_hf_xlnet_task, "gpt": save_hf_gpt_task}.get(model.config.backbone, save_hf_bert_task)
    save(model, path)


def from_double_heads(gpt: GPTLMHeadModel, where: str = "the model", directory: str | Path | None = None
                      ) -> FineTuneModel:
    """A multiple-choice FineTuneModel from a GPT-1 with the multiple-choice head (an OpenAIGPTDoubleHeadsModel
    directory loads as one) whose special tokens are known (``n_special`` >= 3, read from ``genfeat_n_special``;
    start, delimiter and extract the last three, as genfeat writes them). The multiple-choice head becomes
    the task head; the LM head stays the tied token table. ``directory``: where ``gpt`` was read from, whose
    config.json may hold the input settings of a genfeat export (:func:`_input_fields`)."""
    if not gpt.config.mc_head or gpt.config.n_special < 3:
        raise CheckpointError(f"{where} has no multiple-choice head, or does not say which of its tokens are GPT-1's "
                              f"start, delimiter and extract tokens (genfeat_n_special is {gpt.config.n_special})",
                              "fine-tune it with genfeat (method: finetune), or set genfeat_n_special in config.json "
                              "to the number of special tokens at the end of its token table, extract last")
    backbone = GPTLMHeadModel(dataclasses.replace(gpt.config, mc_head=False))
    state = gpt.state_dict()
    head_state = {f"head.out.{p}": state.pop(f"mc_proj.{p}") for p in ("weight", "bias")}
    backbone.load_state_dict(state)
    config = Path(directory or "", "config.json")
    hf_cfg = json.loads(config.read_text()) if directory is not None and config.is_file() else {}
    inputs = {k: v for k, v in hf_cfg.items() if k.startswith("genfeat_") and k != "genfeat_n_special"}
    model = _task_model(GPT_TASK, "gpt", backbone, inputs, "multiple_choice", 1, gpt.config.mc_dropout,
                        gpt.config.max_position, where)
    load_converted(model, {**model.state_dict(), **head_state}, [], "GPT-1 task model")
    return model.eval()


def save_hf_gpt_task(model: FineTuneModel, path: str | Path) -> None:
    """Write a multiple-choice GPT-1 FineTuneModel as an OpenAIGPTDoubleHeadsModel directory."""
    cfg = model.config
    if cfg.head.kind != "multiple_choice":
        raise CheckpointError(f"a fine-tuned GPT-1 with a {cfg.head.kind} head has no Hugging Face format in genfeat "
                              "(OpenAIGPTDoubleHeadsModel scores choices)",
                              "keep it as a genfeat checkpoint (genfeat export --format genfeat); genfeat evaluate and "
                              "fine-tuning read that")
    gpt = GPTLMHeadModel(dataclasses.replace(model.backbone.config, mc_head=True, mc_dropout=cfg.head.dropout))
    head = model.head.state_dict()
    gpt.load_state_dict({**model.backbone.state_dict(), "mc_proj.weight": head["out.weight"],
                         "mc_proj.bias": head["out.bias"]})
    hf_gpt.save_hf_gpt(gpt, path, _input_fields(model))


def load_hf_xlnet_task(path: str | Path) -> FineTuneModel:
    """A FineTuneModel from an XLNetForSequenceClassification, XLNetForQuestionAnsweringSimple or
    XLNetForQuestionAnswering directory (module docstring)."""
    path = Path(path)
    hf_cfg = json.loads((path / "config.json").read_text())
    arch = (hf_cfg.get("architectures") or [""])[0]
    prefix, kind = XLNET_TASK_HEADS[arch]
    if hf_cfg.get("summary_type", "last") != "last" or hf_cfg.get("summary_activation", "tanh") != "tanh" \
            or not hf_cfg.get("summary_use_proj", True):
        raise CheckpointError(f"'{path}' summarises sequences with summary_type {hf_cfg.get('summary_type')!r}, "
                              f"activation {hf_cfg.get('summary_activation')!r}", "convert an XLNet task model with "
                              "the default summary (the last token, a tanh projection)")
    weights = read_hf_weights(path)
    conditioned = arch == XLNET_QA
    answerability = conditioned and bool(hf_cfg.get("genfeat_answerability", True))
    if conditioned and not answerability:
        # the answer class genfeat exports for a head without one, or an untrained one
        weights = {k: v for k, v in weights.items() if not k.startswith("answer_class.")}
    head_names = _head_names_xlnet(prefix, kind != "span", conditioned, answerability)
    absent = [theirs for theirs in head_names.values() if theirs not in weights]
    if absent:
        raise CheckpointError(f"Hugging Face weights lack '{absent[0]}'", "the config.json and the weights disagree"
                              + (" (a model without an answer class needs genfeat_answerability false in config.json)"
                                 if absent[0].startswith("answer_class.") else ""))
    head_state = {ours: weights.pop(theirs) for ours, theirs in head_names.items()}
    if _NEGATED in head_state:
        head_state[_NEGATED] = -head_state[_NEGATED]
    cfg = hf_xlnet.hf_config_to_ours(hf_cfg)
    backbone = XLNetLMHeadModel(cfg)
    # a task model has no LM head: the backbone's decoder bias starts at zero
    backbone.load_state_dict(hf_xlnet.hf_state_to_ours({**weights, "lm_loss.bias": torch.zeros(cfg.n_token)}, cfg))
    n_out = head_state["head.out.weight"].shape[0]
    span = {"answerability": answerability, "span_end": "start_conditioned",
            "layer_norm_epsilon": cfg.layer_norm_epsilon} if conditioned else {}
    model = _task_model(arch, "xlnet", backbone, hf_cfg, _head_kind(kind, n_out), n_out,
                        hf_cfg.get("summary_last_dropout", cfg.dropout), 512, path, **span)
    load_converted(model, {**model.state_dict(), **head_state}, [], "XLNet task model")
    return model.eval()


def _head_names_xlnet(prefix: str, pooled: bool, conditioned: bool = False, answerability: bool = False
                      ) -> dict[str, str]:
    """FineTuneModel head parameter -> HF weight name of an XLNet task model (``answer.3`` is negated)."""
    names = {f"head.out.{p}": f"{prefix}.{p}" for p in ("weight", "bias")}
    if pooled:
        names.update({f"head.pooler.{p}": f"{_XLNET_POOLER}.{p}" for p in ("weight", "bias")})
    if conditioned:
        names.update({f"{ours}.{p}": f"{theirs}.{p}" for ours, theirs in _XLNET_END.items() for p in ("weight", "bias")})
    if answerability:
        names.update(_XLNET_ANSWER)
    return names


def save_hf_xlnet_task(model: FineTuneModel, path: str | Path) -> None:
    """Write an XLNet FineTuneModel as XLNetForSequenceClassification, XLNetForQuestionAnsweringSimple or (a
    start-conditioned span head) XLNetForQuestionAnswering, with ``genfeat_answerability`` (module docstring)."""
    head = model.config.head
    conditioned = head.span_end == "start_conditioned"
    if head.kind == "multiple_choice" or (head.answerability and not conditioned):
        raise CheckpointError(f"a fine-tuned XLNet with a {head.kind} head"
                              f"{' and answerability' if head.answerability else ''} has no Hugging Face "
                              "task-model format in genfeat", "save a genfeat checkpoint")
    arch = (XLNET_QA if conditioned else "XLNetForQuestionAnsweringSimple") if head.kind == "span" \
        else "XLNetForSequenceClassification"
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v for k, v in hf_xlnet.ours_state_to_hf(model.backbone).items() if not k.startswith("lm_loss.")}
    state = model.state_dict()
    for ours, theirs in _head_names_xlnet(XLNET_TASK_HEADS[arch][0], head.kind != "span", conditioned,
                                          head.answerability).items():
        tensors[theirs] = (-state[ours] if ours == _NEGATED else state[ours]).detach().contiguous().clone()
    extra = {}
    if conditioned:
        extra = {"genfeat_answerability": head.answerability}
        if not head.answerability:
            d = head.d_model
            tensors.update({"answer_class.dense_0.weight": torch.zeros(d, 2 * d), "answer_class.dense_0.bias": torch.zeros(d),
                            "answer_class.dense_1.weight": torch.zeros(1, d)})
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    hf = hf_xlnet.ours_to_hf_config(model.backbone.config)
    hf.update({"architectures": [arch], "finetuning_task": model.config.task, "summary_type": "last",
               "summary_use_proj": True, "summary_activation": "tanh", "summary_last_dropout": head.dropout,
               **_label_fields(model), **_input_fields(model), **extra})
    (path / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")


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
        raise CheckpointError(f"'{path}' holds {with_article(arch or 'BERT')} model, not a BERT task model",
                              f"pass a {', '.join(BERT_TASK_HEADS)} directory")
    weights = {k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
               for k, v in read_hf_weights(path).items()}
    prefix, kind = BERT_TASK_HEADS[arch]
    if f"{prefix}.weight" not in weights:
        raise CheckpointError(f"Hugging Face weights lack '{prefix}.weight'", "the config.json and the weights disagree")
    n_out = weights[f"{prefix}.weight"].shape[0]
    backbone = BertForMaskedLM(hf_config_to_ours(hf_cfg, nsp=False))
    dropout = hf_cfg.get("classifier_dropout")
    model = _task_model(arch, "bert", backbone, hf_cfg, _head_kind(kind, n_out), n_out,
                        backbone.config.dropout if dropout is None else dropout, backbone.config.max_position, path)
    state, used = gather_converted({**_encoder_names(model), **_head_names(model, prefix)}, weights)
    # the unused masked-LM head keeps its initialisation
    state = {**model.state_dict(), **state}
    load_converted(model, state, sorted(set(weights) - used - {"bert.embeddings.position_ids"}), "BERT task model")
    return model.eval()


def save_hf_bert_task(model: FineTuneModel, path: str | Path) -> None:
    """Write a BERT FineTuneModel as the matching Hugging Face task model (config.json + model.safetensors)."""
    cfg = model.config
    if cfg.backbone != "bert" or cfg.head.answerability or cfg.head.span_end != "linear":
        what = (" with an answerability head" if cfg.head.answerability
                else " with start-conditioned end scores" if cfg.head.span_end != "linear" else "")
        raise CheckpointError(f"a fine-tuned {cfg.backbone} model{what} has no Hugging Face task-model format in genfeat",
                              "save a genfeat checkpoint")
    arch = {"span": "BertForQuestionAnswering", "multiple_choice": "BertForMultipleChoice"}.get(
        cfg.head.kind, "BertForSequenceClassification")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = split_converted({**_encoder_names(model), **_head_names(model, BERT_TASK_HEADS[arch][0])},
                              model.state_dict())
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    hf = ours_to_hf_config(model.backbone.config)
    hf.update({"architectures": [arch], "finetuning_task": cfg.task, "classifier_dropout": cfg.head.dropout,
               **_label_fields(model), **_input_fields(model)})
    (path / "config.json").write_text(json.dumps(hf, indent=2, sort_keys=True) + "\n")
