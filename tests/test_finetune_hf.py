"""Hugging Face BERT, XLNet and GPT-1 task models <-> genfeat fine-tuned models (genfeat.interop.hf_finetune):
random-weight parity (fp32, <= 1e-4) with transformers' BertForSequenceClassification (classes and regression),
BertForMultipleChoice, BertForQuestionAnswering, XLNetForSequenceClassification, XLNetForQuestionAnsweringSimple,
XLNetForQuestionAnswering (start scores, end scores given the start, answer class, training loss) and
OpenAIGPTDoubleHeadsModel, with padding and token types, both ways; and fine-tuning on real data (../shared/data)
through to evaluating the task model transformers saves, to the run's figures (BERT from a Hugging Face directory on
SST-2, XLNet's SQuAD head and BERT on SQuAD article-split questions, XLNet on MRPC, GPT-1 on RACE), with
``genfeat evaluate --task --json --predictions``."""

import dataclasses
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from genfeat.errors import CheckpointError
from genfeat.hub import from_pretrained, save_pretrained
from genfeat.models.heads import FineTuneModel

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.hf_interop
DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()

CFG = {"vocab_size": 60, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
       "max_position_embeddings": 32, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def _batch(k: int = 1):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (2, k, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :, 6:] = 0                                   # the second example is padded
    types = torch.zeros_like(ids)
    types[..., 4:] = 1
    return ids, mask, types


def _hf(cls, tmp_path, config=None, **extra):
    """A random-weight Hugging Face model of class ``cls`` (BERT's config unless ``config``), saved to tmp/hf."""
    torch.manual_seed(0)
    hf = cls(config(**extra) if config is not None else transformers.BertConfig(**CFG, **extra)).eval()
    with torch.no_grad():                                # random, not zero, biases and layer norms
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    hf.save_pretrained(tmp_path / "hf")
    return hf


def _exported(ours, cls, tmp_path, **inputs):
    """``ours`` exported in Hugging Face format, read back by transformers' ``cls``, run on ``inputs``."""
    save_pretrained(ours, tmp_path / "back", hf=True)
    with torch.no_grad():
        return cls.from_pretrained(tmp_path / "back").eval()(**inputs)


@pytest.mark.parametrize("num_labels", [3, 1])
def test_sequence_classification_parity_both_ways(tmp_path, num_labels):
    hf = _hf(transformers.BertForSequenceClassification, tmp_path, num_labels=num_labels)
    ours = from_pretrained(tmp_path / "hf")
    assert isinstance(ours, FineTuneModel) and ours.config.head.kind == ("regression" if num_labels == 1 else "classification")
    ids, mask, types = _batch()
    with torch.no_grad():
        ref = hf(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0]).logits
        got = ours(ids, mask, types, torch.zeros(2, 1, dtype=torch.long)).logits
    torch.testing.assert_close(got.view(ref.shape), ref, atol=1e-4, rtol=1e-4)
    again = _exported(ours, transformers.BertForSequenceClassification, tmp_path, input_ids=ids[:, 0],
                      attention_mask=mask[:, 0], token_type_ids=types[:, 0])
    torch.testing.assert_close(again.logits, ref, atol=1e-4, rtol=1e-4)


def test_multiple_choice_parity(tmp_path):
    hf = _hf(transformers.BertForMultipleChoice, tmp_path)
    ours = from_pretrained(tmp_path / "hf", architecture="finetune")
    ids, mask, types = _batch(k=4)
    with torch.no_grad():
        ref = hf(ids, attention_mask=mask, token_type_ids=types).logits
        got = ours(ids, mask, types, torch.zeros(2, 4, dtype=torch.long)).logits
    assert got.shape == (2, 4)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


def test_question_answering_parity_both_ways(tmp_path):
    hf = _hf(transformers.BertForQuestionAnswering, tmp_path)
    ours = from_pretrained(tmp_path / "hf")
    assert ours.config.head.kind == "span"
    ids, mask, types = _batch()
    context = torch.ones(2, 9, dtype=torch.bool)
    with torch.no_grad():
        ref = hf(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0])
        got = ours(ids, mask, types, torch.zeros(2, 1, dtype=torch.long), context)
    torch.testing.assert_close(got.start_logits, ref.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.end_logits, ref.end_logits, atol=1e-4, rtol=1e-4)
    again = _exported(ours, transformers.BertForQuestionAnswering, tmp_path, input_ids=ids[:, 0],
                      attention_mask=mask[:, 0], token_type_ids=types[:, 0])
    torch.testing.assert_close(again.start_logits, ref.start_logits, atol=1e-4, rtol=1e-4)


def test_a_pretraining_directory_is_not_a_task_model(tmp_path):
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**CFG))
    hf.save_pretrained(tmp_path / "mlm")
    with pytest.raises(CheckpointError, match="not finetune"):
        from_pretrained(tmp_path / "mlm", architecture="finetune")


XLNET = {"vocab_size": 60, "d_model": 16, "n_layer": 2, "n_head": 2, "d_inner": 32, "dropout": 0.0}


def _hf_xlnet(cls, tmp_path, **extra):
    return _hf(cls, tmp_path, lambda **kw: transformers.XLNetConfig(**XLNET, **kw), **extra)


def _left_padded():
    ids, mask, types = _batch()
    ids, mask, types = ids.flip(-1), mask.flip(-1), types.flip(-1)      # XLNet pads on the left, <cls> last
    return ids, mask, types


def test_xlnet_sequence_classification_parity_both_ways(tmp_path):
    hf = _hf_xlnet(transformers.XLNetForSequenceClassification, tmp_path, num_labels=3)
    ours = from_pretrained(tmp_path / "hf", architecture="finetune")
    assert ours.config.backbone == "xlnet" and ours.config.head.pool
    ids, mask, types = _left_padded()
    last = torch.full((2, 1), ids.shape[-1] - 1)
    with torch.no_grad():
        ref = hf(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0]).logits
        got = ours(ids, mask, types, last).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert ours.config.max_len == 512 and ours.config.max_segments == 1     # transformers' directory: one segment
    ours.config = dataclasses.replace(ours.config, max_len=48, max_segments=3, doc_stride=24, both_orders=True,
                                      max_query_len=20)
    again = _exported(ours, transformers.XLNetForSequenceClassification, tmp_path, input_ids=ids[:, 0],
                      attention_mask=mask[:, 0], token_type_ids=types[:, 0])
    torch.testing.assert_close(again.logits, ref, atol=1e-4, rtol=1e-4)
    # the export keeps how the model reads its inputs (a long review: 3 segments of 48 tokens with memory)
    back = from_pretrained(tmp_path / "back", architecture="finetune").config
    assert (back.max_len, back.max_segments, back.doc_stride, back.both_orders, back.max_query_len) == (48, 3, 24, True, 20)


def test_xlnet_question_answering_simple_parity(tmp_path):
    hf = _hf_xlnet(transformers.XLNetForQuestionAnsweringSimple, tmp_path)
    ours = from_pretrained(tmp_path / "hf")
    ids, mask, types = _left_padded()
    with torch.no_grad():
        ref = hf(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0])
        got = ours(ids, mask, types, torch.full((2, 1), 8), torch.ones(2, 9, dtype=torch.bool))
    torch.testing.assert_close(got.start_logits, ref.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.end_logits, ref.end_logits, atol=1e-4, rtol=1e-4)


def _qa_inputs():
    """Left-padded pairs, a context (the real tokens but a separator at 4 and <cls>) and what HF's p_mask leaves:
    the context and <cls>."""
    ids, mask, types = _left_padded()
    context = mask[:, 0].bool() & (torch.arange(9) != 4) & (torch.arange(9) < 8)
    keep = context.clone()
    keep[:, -1] = True                                                  # <cls>, the summary: "no answer here"
    return ids, mask, types, context, keep


def test_xlnet_question_answering_parity_both_ways(tmp_path):
    """XLNetForQuestionAnswering: start scores, end scores given the start (HF's training-mode end_logits, and its
    beam's end probabilities given its top starts), the answer class (sign flipped), HF's training loss; and the
    model genfeat exports is read back by transformers and by genfeat with the same weights."""
    from genfeat.objectives.span_qa import span_nll
    from genfeat.objectives.task import TaskObjective

    hf = _hf_xlnet(transformers.XLNetForQuestionAnswering, tmp_path, start_n_top=3, end_n_top=2)
    with torch.no_grad():                                # peaked, not near-uniform, start and end distributions
        for p in [*hf.start_logits.parameters(), *hf.end_logits.parameters(), *hf.answer_class.parameters()]:
            p.mul_(20)
    hf.save_pretrained(tmp_path / "hf")
    ours = from_pretrained(tmp_path / "hf")
    head = ours.config.head
    assert (head.kind, head.span_end, head.answerability) == ("span", "start_conditioned", True)
    ids, mask, types, context, keep = _qa_inputs()
    p_mask = (~keep).float()
    start, end = torch.tensor([8, 5]), torch.tensor([8, 7])             # an impossible one points at <cls>
    hf_in = dict(input_ids=ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0], p_mask=p_mask)
    last = torch.full((2, 1), 8)
    with torch.no_grad():
        states = hf.transformer(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0])[0]
        ref_start = hf.start_logits(states, p_mask=p_mask)
        ref_end = hf.end_logits(states, start_positions=start, p_mask=p_mask)
        ref = hf(**hf_in)                                               # inference: the beam and cls_logits
        ref_loss = hf(**hf_in, start_positions=start, end_positions=end).loss
        got = ours(ids, mask, types, last, context, start_positions=start)
        every = ours(ids, mask, types, last, context)
        loss = TaskObjective("span")(ours, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types,
                                            "summary_index": last, "context_mask": context,
                                            "start_positions": start, "end_positions": end})
    diff = lambda a, b: (a - b).abs().max()                             # noqa: E731
    assert diff(got.start_logits[keep], ref_start[keep]) <= 1e-4 and (got.start_logits[~keep] == -1e9).all()
    assert diff(got.end_logits[keep], ref_end[keep]) <= 1e-4
    assert diff(got.answer_logits, -ref.cls_logits) <= 1e-4
    # HF's loss (no is_impossible given) is genfeat's span loss with the end scores given the gold start; the task
    # objective adds its answerability term (module docstring of genfeat.methods.finetune)
    spans = span_nll(got.start_logits, got.end_logits, start, end)
    assert diff(spans.mean(), ref_loss) <= 1e-4
    answerable = torch.nn.functional.binary_cross_entropy_with_logits(got.answer_logits, (start != 8).float(),
                                                                     reduction="sum")
    assert loss.count == 2 and diff(loss.loss_sum, spans.sum() + answerable) <= 1e-5
    # the scores of every start hold those of the given ones, and HF's beam reads them: its top starts' end
    # probabilities are the softmax of genfeat's end scores given those starts
    assert every.end_logits.shape == (2, 9, 9)
    torch.testing.assert_close(every.end_logits[torch.arange(2), start], got.end_logits)
    assert diff(torch.softmax(every.start_logits, -1).topk(3).values, ref.start_top_log_probs) <= 1e-4
    given = every.end_logits[torch.arange(2)[:, None], ref.start_top_index]            # [b, 3 starts, t]
    top = torch.softmax(given, -1).topk(2, dim=-1)                                      # HF: end_n_top per start
    assert diff(top.values.transpose(1, 2).reshape(2, 6), ref.end_top_log_probs) <= 1e-4
    assert torch.equal(top.indices.transpose(1, 2).reshape(2, 6), ref.end_top_index)
    save_pretrained(ours, tmp_path / "back", hf=True)
    again = transformers.XLNetForQuestionAnswering.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert diff(again(**hf_in).cls_logits, ref.cls_logits) <= 1e-6
        assert diff(again(**hf_in, start_positions=start, end_positions=end).loss, ref_loss) <= 1e-6
    mine = from_pretrained(tmp_path / "back")
    assert mine.config.head == head
    assert all(torch.equal(v, mine.state_dict()[k]) for k, v in ours.state_dict().items())


def test_xlnet_question_answering_without_answerability_round_trips(tmp_path):
    """A start-conditioned head without answerability is exported with a zero answer class and
    genfeat_answerability false, which transformers keeps and genfeat reads back as no answerability; a
    directory that says it has an answer class and has none is one error naming the config field."""
    import json

    from genfeat.models.heads import FineTuneConfig, HeadConfig

    torch.manual_seed(0)
    ours = FineTuneModel(FineTuneConfig(task="squad_split", backbone="xlnet", backbone_config={
        "n_token": 60, "d_model": 16, "n_layer": 1, "n_head": 2, "d_head": 8, "d_inner": 32, "dropout": 0.0},
        head=HeadConfig(kind="span", d_model=16, pool=False, span_end="start_conditioned", dropout=0.0))).eval()
    save_pretrained(ours, tmp_path / "hf", hf=True)
    hf = transformers.XLNetForQuestionAnswering.from_pretrained(tmp_path / "hf").eval()
    ids, mask, types, context, keep = _qa_inputs()
    with torch.no_grad():
        assert torch.equal(hf(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0]).cls_logits,
                           torch.zeros(2))
    hf.save_pretrained(tmp_path / "resaved")
    again = from_pretrained(tmp_path / "resaved")
    assert again.config.head == ours.config.head and not hasattr(again.head, "answer")
    with torch.no_grad():
        want = ours(ids, mask, types, torch.full((2, 1), 8), context)
        got = again(ids, mask, types, torch.full((2, 1), 8), context)
    assert (got.end_logits - want.end_logits).abs().max() <= 1e-5 and got.answer_logits is None
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    cfg["genfeat_answerability"] = True
    (tmp_path / "hf" / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "hf" / "model.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("answer_class.")},
              str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="genfeat_answerability false"):
        from_pretrained(tmp_path / "hf")


def test_gpt_double_heads_multiple_choice_parity_both_ways(tmp_path):
    from genfeat.hub import load_checkpoint
    from genfeat.interop.hf_finetune import from_double_heads

    cfg = transformers.OpenAIGPTConfig(vocab_size=53, n_embd=16, n_layer=2, n_head=2, n_positions=24, resid_pdrop=0.0,
                                       embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0, genfeat_n_special=3)
    hf = _hf(transformers.OpenAIGPTDoubleHeadsModel, tmp_path, lambda **kw: cfg)
    gpt, _ = load_checkpoint(tmp_path / "hf")
    ours = from_double_heads(gpt)
    assert ours.config.head.kind == "multiple_choice" and not ours.config.head.pool
    assert (ours.input_format(None).start_id, ours.input_format(None).extract_id) == (50, 52)
    ids, mask, _ = _batch(k=3)
    ids = ids % 50                                                      # the pretrained tokens 0..49
    ids[..., -1] = 52                                                   # every choice ends with <extract>
    ids[1, :, 5] = 52
    mask[1, :, 6:] = 0
    last = mask.sum(-1) - 1                                             # [b, k] position of <extract>
    with torch.no_grad():
        # HF's OpenAI GPT flattens the choices of input_ids but not of the mask
        ref = hf(ids, attention_mask=mask.view(-1, 9), mc_token_ids=last).mc_logits
        got = ours(ids, mask, None, last).logits
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    assert ours.config.max_len == 24                                    # a directory from elsewhere: n_positions
    ours.config = dataclasses.replace(ours.config, max_len=16)
    again = _exported(ours, transformers.OpenAIGPTDoubleHeadsModel, tmp_path, input_ids=ids,
                      attention_mask=mask.view(-1, 9), mc_token_ids=last)
    torch.testing.assert_close(again.mc_logits, ref, atol=1e-4, rtol=1e-4)
    assert from_double_heads(load_checkpoint(tmp_path / "back")[0], directory=tmp_path / "back").config.max_len == 16
    plain = transformers.OpenAIGPTDoubleHeadsModel(transformers.OpenAIGPTConfig(vocab_size=53, n_embd=16, n_layer=1, n_head=2,
                                                                                n_positions=24))
    plain.save_pretrained(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="genfeat_n_special"):
        from_double_heads(load_checkpoint(tmp_path / "plain")[0])


def _saved_by_transformers(cls, tmp_path, capsys) -> Path:
    """The fine-tuned tmp/ft/final exported by ``genfeat export`` and saved again by transformers as ``cls`` with its
    tokenizer, into tmp/hf_task."""
    from genfeat import cli

    assert cli.main(["export", "--checkpoint", str(tmp_path / "ft" / "final"), "--out", str(tmp_path / "export")]) == 0
    capsys.readouterr()
    cls.from_pretrained(tmp_path / "export").save_pretrained(tmp_path / "hf_task")
    transformers.AutoTokenizer.from_pretrained(tmp_path / "export").save_pretrained(tmp_path / "hf_task")
    return tmp_path / "hf_task"


@pytest.mark.skipif(not (DATA / "glue" / "SST-2" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
def test_finetuning_from_a_hugging_face_directory_and_evaluating_the_task_model_transformers_saves(tmp_path, capsys):
    """End to end: a BertForMaskedLM saved by transformers with its WordPiece tokenizer is the init of two SST-2
    steps; the fine-tuned model, exported and saved again by transformers as BertForSequenceClassification with
    its tokenizer, scores what the run scored."""
    from collections import Counter

    from genfeat.methods.finetune import evaluate_task
    from genfeat.runner import run_recipe
    from genfeat.tasks import load_task

    texts = [ex.texts[0] for ex in load_task("sst2", "train")[:400]]
    words = [w for w, _ in Counter(w for t in texts for w in t.lower().split()).most_common(250)]
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    mlm = tmp_path / "mlm"
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(**{**CFG, "vocab_size": len(tokenizer),
                                                            "max_position_embeddings": 64})).save_pretrained(mlm)
    tokenizer.save_pretrained(mlm)
    result = run_recipe("recipes/finetune/sst2_bert.yaml", {
        "init": str(mlm), "steps": 2, "data": {"max_train_examples": 32, "max_eval_examples": 32, "batch_size": 16,
                                               "max_len": 64}, "train": {"eval_every": 0}},
        [0], out_dir=tmp_path / "ft", progress=False)
    assert result["steps"] == 2 and result["dev_examples"] == 32 and 0.0 <= result["dev_accuracy"] <= 1.0
    hf_task = _saved_by_transformers(transformers.BertForSequenceClassification, tmp_path, capsys)
    figures = evaluate_task(hf_task, "sst2", max_examples=32)
    assert figures["examples"] == 32 and set(figures) >= {"accuracy", "truncated", "seconds"}
    assert figures["accuracy"] == pytest.approx(result["dev_accuracy"], abs=1e-12)
    _classes_in_another_order(hf_task, tmp_path, figures["accuracy"], capsys)


def _classes_in_another_order(hf_task: Path, tmp_path: Path, accuracy: float, capsys) -> None:
    """The SST-2 task model above names its classes and keeps its max_len; copies of it whose head lists the classes
    the other way round, and say so in id2label, score what it scores; copies that name other classes are refused,
    and copies that name none are read in the task's order, with a note."""
    from safetensors.torch import load_file, save_file

    from genfeat.hub import load_checkpoint
    from genfeat.methods.finetune import align_labels, evaluate_task
    from genfeat.tasks import get_task

    config = json.loads((hf_task / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"} and config["genfeat_max_len"] == 64
    original = load_checkpoint(hf_task)[0]
    assert original.config.max_len == 64 and original.config.label_names == ["negative", "positive"]

    def variant(name: str, id2label: dict, task: str | None = "sst2", flip: bool = True) -> Path:
        out = tmp_path / name
        shutil.copytree(hf_task, out)
        weights = load_file(out / "model.safetensors")
        if flip:
            weights = {k: v.flip(0).contiguous() if k.startswith("classifier.") else v for k, v in weights.items()}
        save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
        cfg = {**config, "id2label": id2label, "label2id": {v: int(k) for k, v in id2label.items()}, "finetuning_task": task}
        (out / "config.json").write_text(json.dumps(cfg))
        return out

    flipped = variant("flipped", {"0": "POSITIVE", "1": "Negative"})
    model = load_checkpoint(flipped)[0]
    assert not torch.equal(model.head.out.weight, original.head.out.weight)
    align_labels(model, get_task("sst2"), flipped)
    assert torch.equal(model.head.out.weight, original.head.out.weight)
    assert torch.equal(model.head.out.bias, original.head.out.bias)
    assert evaluate_task(flipped, "sst2", max_examples=32)["accuracy"] == accuracy
    as_files = variant("as_files", {"0": "1", "1": "0"})                 # the labels as the TSV writes them
    assert evaluate_task(as_files, "sst2", max_examples=32)["accuracy"] == accuracy
    with pytest.raises(CheckpointError, match=r"names its classes \['yes', 'no'\], which are not task 'sst2''s labels "
                                              r"0 \(negative\), 1 \(positive\)"):
        evaluate_task(variant("other", {"0": "yes", "1": "no"}), "sst2", max_examples=32)
    capsys.readouterr()
    for task in ("sst2", None):   # transformers' run_glue names the task but leaves the classes unnamed
        unnamed = variant(f"unnamed_{task}", {"0": "LABEL_0", "1": "LABEL_1"}, task=task, flip=False)
        assert evaluate_task(unnamed, "sst2", max_examples=32)["accuracy"] == accuracy
        assert "does not name its classes (id2label LABEL_0, LABEL_1); they are read as task 'sst2''s labels in its " \
               "order (negative, positive)" in capsys.readouterr().err
    # transformers' older GLUE scripts named the task "SST-2": still genfeat's sst2, refused for another task
    legacy = variant("legacy", {"0": "LABEL_0", "1": "LABEL_1"}, task="SST-2", flip=False)
    assert load_checkpoint(legacy)[0].config.task == "sst2"
    with pytest.raises(CheckpointError, match="task 'sst2'"):
        evaluate_task(legacy, "cola", max_examples=32)
    # exported to genfeat's format, a task model that names no task, or one genfeat does not know, is still a head
    # from elsewhere (hf:...), checked by shape
    from genfeat import cli
    emotion = variant("emotion", {"0": "LABEL_0", "1": "LABEL_1"}, task="emotion", flip=False)
    for hf_dir in (unnamed, emotion):
        assert evaluate_task(hf_dir, "sst2", max_examples=32)["accuracy"] == accuracy
        assert cli.main(["export", "--checkpoint", str(hf_dir), "--out", str(tmp_path / f"g_{hf_dir.name}"),
                         "--format", "genfeat"]) == 0
        assert evaluate_task(tmp_path / f"g_{hf_dir.name}", "sst2", max_examples=32)["accuracy"] == accuracy
    assert load_checkpoint(tmp_path / "g_emotion")[0].config.task == "hf:emotion"
    capsys.readouterr()
    # a config that counts other classes than the classifier's rows (transformers refuses it too) is not read as
    # transformers' unnamed defaults, which would score the flipped head in the wrong order
    extra = variant("three_names", {"0": "positive", "1": "negative", "2": "neutral"})
    with pytest.raises(CheckpointError, match=r"gives 3 classes in id2label, but its classifier has 2 rows"):
        evaluate_task(extra, "sst2", max_examples=32)
    gapped = variant("gapped", {"0": "positive", "2": "negative"})
    with pytest.raises(CheckpointError, match=r"id2label has keys \['0', '2'\], not the ids 0 to 1"):
        evaluate_task(gapped, "sst2", max_examples=32)
    counted = json.loads((flipped / "config.json").read_text())
    (flipped / "config.json").write_text(json.dumps({**counted, "num_labels": 3}))
    with pytest.raises(CheckpointError, match=r"gives 3 classes in num_labels"):
        load_checkpoint(flipped)


@pytest.mark.skipif(not (DATA / "squad" / "dev-v1.1.json").is_file(), reason="SQuAD not in GENFEAT_DATA")
def test_xlnet_squad_head_exported_and_saved_by_transformers_scores_what_the_run_scored_and_is_an_init(tmp_path, capsys):
    """End to end: XLNet with XLNet's SQuAD head fine-tuned on SQuAD article-split questions
    (test_finetune_runner's XLNET_SQUAD run), exported, saved again by transformers as XLNetForQuestionAnswering with
    its tokenizer: genfeat evaluates it to the run's figures and fine-tunes from it."""
    from _finetune_fixtures import XLNET_SQUAD

    from genfeat.methods.finetune import evaluate_task
    from genfeat.runner import run_recipe

    result = run_recipe("recipes/finetune/squad_xlnet.yaml", XLNET_SQUAD, [0], out_dir=tmp_path / "ft", progress=False)
    hf_task = _saved_by_transformers(transformers.XLNetForQuestionAnswering, tmp_path, capsys)
    figures = evaluate_task(hf_task, "squad_split", max_examples=6)
    assert figures["examples"] == 6
    assert (figures["exact_match"], figures["squad_f1"]) == pytest.approx(
        (result["dev_exact_match"], result["dev_squad_f1"]), abs=1e-12)
    again = run_recipe("recipes/finetune/squad_xlnet.yaml", {**XLNET_SQUAD, "init": str(hf_task), "model": {}, "steps": 1},
                       [0], out_dir=tmp_path / "init", progress=False)
    assert again["steps"] == 1 and 0.0 <= again["dev_exact_match"] <= again["dev_squad_f1"] <= 1.0


def test_task_names_of_older_transformers_scripts_are_genfeat_tasks():
    from genfeat.interop.hf_finetune import _task_name

    names = ("SST-2", "sts-b", "MNLI-MM", "CoLA", "qqp", "squad_split", "emotion", None, "hf:x")
    assert [_task_name(n, "bert") for n in names] == \
        ["sst2", "stsb", "mnli", "cola", "qqp", "squad_split", "hf:emotion", "hf:bert", "hf:x"]


def test_an_export_transformers_reads_otherwise_says_so_and_an_export_onto_its_checkpoint_is_refused(tmp_path, capsys):
    """A similarity head over both orders of a pair and a model reading long texts as memory segments compute what
    transformers' task models do not: the export says so on stderr (genfeat reads it back as trained). Exporting a
    checkpoint onto itself would replace it: refused."""
    from genfeat import cli

    _hf(transformers.BertForSequenceClassification, tmp_path, num_labels=1)
    ours = from_pretrained(tmp_path / "hf")
    ours.config = dataclasses.replace(ours.config, task="stsb", both_orders=True)
    save_pretrained(ours, tmp_path / "ours")
    capsys.readouterr()
    assert cli.main(["export", "--checkpoint", str(tmp_path / "ours"), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "note: the model adds the states of both orders of each stsb pair" in err and "transformers' task model " \
        "reads one order" in err
    assert from_pretrained(tmp_path / "out").config.both_orders
    from genfeat.interop.hf_finetune import read_differently

    ours.config = dataclasses.replace(ours.config, task="sst2", max_segments=3)
    assert read_differently(ours) == ["the model reads texts longer than 32 tokens as up to 3 segments, the earlier "
                                      "ones as memory; transformers' task model reads one segment, so its scores of "
                                      "long texts differ from genfeat's"]
    ours.config = dataclasses.replace(ours.config, task="stsb", both_orders=False, max_segments=1)
    save_pretrained(ours, tmp_path / "ours")
    assert cli.main(["export", "--checkpoint", str(tmp_path / "ours"), "--out", str(tmp_path / "out")]) == 0
    assert "note:" not in capsys.readouterr().err
    before = sorted(p.name for p in (tmp_path / "ours").iterdir())
    assert cli.main(["export", "--checkpoint", str(tmp_path / "ours"), "--out", str(tmp_path / "ours")]) == 2
    assert "is the checkpoint being exported" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "ours").iterdir()) == before


def _evaluate_cli(capsys, hf_task: Path, task: str, *flags: str) -> dict:
    """``genfeat evaluate --checkpoint hf_task --task task [flags] --json``: the figures of its last stdout line."""
    from genfeat import cli

    capsys.readouterr()
    assert cli.main(["evaluate", "--checkpoint", str(hf_task), "--task", task, *flags, "--json"]) == 0
    figures = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert figures["task"] == task and figures["checkpoint"] == str(hf_task) and figures["seconds"] >= 0
    return figures


XLNET_MRPC = {
    "init": None, "backbone": "xlnet", "vocab_size": 300, "steps": 2, "head_dropout": 0.0,
    "model": {"d_model": 16, "n_layer": 1, "n_head": 2, "d_head": 8, "d_inner": 32, "dropout": 0.0, "dropatt": 0.0},
    "data": {"max_train_examples": 32, "max_eval_examples": 0, "batch_size": 16, "eval_batch_size": 64, "max_len": 64},
    "train": {"eval_every": 0, "progress": False}}
"""Overrides of recipes/finetune/mrpc_xlnet.yaml: a random XLNet with a sentencepiece tokenizer trained on 32 MRPC
training pairs, two steps, scored on all 408 dev pairs (a GLUE submission file numbers every row of the split)."""


@pytest.mark.skipif(not (DATA / "glue" / "MRPC" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
def test_xlnet_glue_model_saved_by_transformers_as_sequence_classification_scores_what_the_run_scored(tmp_path, capsys):
    """End to end: XLNet fine-tuned on MRPC, exported, saved again by transformers as XLNetForSequenceClassification
    with its tokenizer: ``genfeat evaluate --task mrpc --json`` gives the run's dev figures over all 408 pairs, and its
    ``--predictions`` is the GLUE submission file genfeat's own checkpoint writes, which scores those figures."""
    from genfeat.eval.metrics import task_scores
    from genfeat.runner import run_recipe
    from genfeat.tasks import get_task, load_task

    result = run_recipe("recipes/finetune/mrpc_xlnet.yaml", XLNET_MRPC, [0], out_dir=tmp_path / "ft", progress=False)
    assert result["steps"] == 2 and result["dev_examples"] == 408
    hf_task = _saved_by_transformers(transformers.XLNetForSequenceClassification, tmp_path, capsys)
    assert json.loads((hf_task / "config.json").read_text())["architectures"] == ["XLNetForSequenceClassification"]
    figures = _evaluate_cli(capsys, hf_task, "mrpc", "--predictions", str(tmp_path / "MRPC.tsv"))
    assert figures["examples"] == 408 and figures["split"] == "dev"
    assert set(figures) >= {"accuracy", "f1", "truncated", "seconds"}
    assert (figures["accuracy"], figures["f1"]) == pytest.approx((result["dev_accuracy"], result["dev_f1"]), abs=1e-12)
    assert figures["truncated"] == result["dev_truncated"]
    lines = (tmp_path / "MRPC.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 409
    assert [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(408)]
    labels = get_task("mrpc").labels
    preds = [labels.index(line.split("\t")[1]) for line in lines[1:]]
    gold = [ex.label for ex in load_task("mrpc", "dev")]
    assert task_scores(["accuracy", "f1"], preds, gold) == pytest.approx(
        {"accuracy": figures["accuracy"], "f1": figures["f1"]}, abs=1e-12)
    ours = _evaluate_cli(capsys, tmp_path / "ft" / "final", "mrpc", "--predictions", str(tmp_path / "ours.tsv"))
    assert (tmp_path / "ours.tsv").read_text() == (tmp_path / "MRPC.tsv").read_text()
    assert (ours["accuracy"], ours["f1"]) == (figures["accuracy"], figures["f1"])
    # two steps leave a head that predicts the majority class: its scores, not only their argmax, are the run's,
    # from the same token ids (the sentencepiece model transformers saved again)
    assert _same_outputs(tmp_path / "ft" / "final", hf_task, "mrpc")["score"].std(0).min() > 0


def _head_outputs(checkpoint: Path, task: str, n: int) -> tuple[list, dict[str, torch.Tensor]]:
    """The token ids of the items (windows) of the first ``n`` dev examples of ``task`` as the checkpoint reads them,
    and its head's outputs of them: class scores [items, classes] (``score``), or span start and end scores
    (``start``, ``end``) of all their positions, concatenated."""
    from genfeat.hub import load_checkpoint
    from genfeat.methods.finetune import encode_items, encoder_for, predict
    from genfeat.tasks import get_task, load_task

    model, vocab = load_checkpoint(checkpoint)
    if not isinstance(model, FineTuneModel):                            # an OpenAIGPTDoubleHeadsModel directory
        from genfeat.interop.hf_finetune import from_double_heads

        model = from_double_heads(model, directory=checkpoint)
    encoder = encoder_for(model, vocab)
    items, _ = encode_items(load_task(task, "dev")[:n], get_task(task), encoder, model.config, "dev")
    outs = predict(model, items, encoder.fmt, 64)
    return [[seq.ids for seq in it.encoded.sequences] for it in items], \
        {key: (torch.stack if key == "score" else torch.cat)([o[key] for o in outs]) for key in outs[0]}


def _same_outputs(trained: Path, hf_task: Path, task: str, n: int = 64) -> dict[str, torch.Tensor]:
    """Assert that ``hf_task`` reads the first ``n`` dev examples of ``task`` into the token ids ``trained`` (the
    genfeat checkpoint it was exported from) reads, and scores them as it does (1e-6); the scores."""
    ids, want = _head_outputs(trained, task, n)
    again, got = _head_outputs(hf_task, task, n)
    assert again == ids and set(got) == set(want)
    assert all((got[key] - want[key]).abs().max() <= 1e-6 for key in want)
    return want


BERT_SQUAD = {
    "init": None, "backbone": "bert", "vocab_size": 400, "steps": 2, "head_dropout": 0.0,
    "model": {"d_model": 16, "n_layer": 1, "n_head": 2, "d_inner": 32, "max_position": 64, "dropout": 0.0,
              "dropatt": 0.0},
    "data": {"task": "squad_split", "max_train_examples": 8, "max_eval_examples": 6, "batch_size": 4,
             "eval_batch_size": 8, "max_len": 64, "doc_stride": 32, "max_query_len": 16, "test_split": None},
    "train": {"eval_every": 0, "progress": False}}
"""Overrides of recipes/finetune/squad_bert.yaml: a random BERT with a WordPiece tokenizer trained on 8 SQuAD
article-split training questions, two steps, scored on 6 dev questions (several 64-token windows each)."""


@pytest.mark.skipif(not (DATA / "squad" / "dev-v1.1.json").is_file(), reason="SQuAD not in GENFEAT_DATA")
def test_bert_squad_model_saved_by_transformers_as_question_answering_scores_what_the_run_scored(tmp_path, capsys):
    """End to end: BERT fine-tuned on SQuAD article-split questions, exported, saved again by transformers as
    BertForQuestionAnswering with its tokenizer: ``genfeat evaluate --task squad_split --json`` scores the run's dev
    questions (the article split the run recorded) to its figures, and ``--predictions`` writes the official
    evaluation's {question id: answer} JSON, the answers genfeat's own checkpoint gives, which score those figures."""
    from genfeat.eval.metrics import squad_scores
    from genfeat.methods.finetune import subset
    from genfeat.runner import run_recipe
    from genfeat.tasks import load_task

    result = run_recipe("recipes/finetune/squad_bert.yaml", BERT_SQUAD, [0], out_dir=tmp_path / "ft", progress=False)
    assert result["steps"] == 2 and result["dev_examples"] == 6
    hf_task = _saved_by_transformers(transformers.BertForQuestionAnswering, tmp_path, capsys)
    config = json.loads((hf_task / "config.json").read_text())
    assert config["architectures"] == ["BertForQuestionAnswering"] and config["genfeat_squad_seed"] == 0
    figures = _evaluate_cli(capsys, hf_task, "squad_split", "--max-examples", "6", "--predictions",
                            str(tmp_path / "answers.json"))
    assert figures["examples"] == 6 and set(figures) >= {"exact_match", "squad_f1", "truncated", "seconds"}
    assert (figures["exact_match"], figures["squad_f1"]) == pytest.approx(
        (result["dev_exact_match"], result["dev_squad_f1"]), abs=1e-12)
    answers = json.loads((tmp_path / "answers.json").read_text())
    dev = subset(load_task("squad_split", "dev"), 6)
    assert list(answers) == [ex.uid for ex in dev] and all(isinstance(a, str) for a in answers.values())
    scored = squad_scores(list(answers.values()), [[text for text, _ in ex.answers] for ex in dev])
    assert (scored["exact_match"], scored["squad_f1"]) == pytest.approx(
        (figures["exact_match"], figures["squad_f1"]), abs=1e-12)
    ours = _evaluate_cli(capsys, tmp_path / "ft" / "final", "squad_split", "--max-examples", "6", "--predictions",
                         str(tmp_path / "ours.json"))
    assert json.loads((tmp_path / "ours.json").read_text()) == answers
    assert (ours["exact_match"], ours["squad_f1"]) == (figures["exact_match"], figures["squad_f1"])
    # two steps find no answer (both figures 0): the answers, and the start and end scores of every window, are
    # the run's
    outputs = _same_outputs(tmp_path / "ft" / "final", hf_task, "squad_split", 6)
    assert outputs["start"].std() > 0 and outputs["end"].std() > 0


GPT_RACE = {
    "init": None, "backbone": "gpt", "vocab_size": 300, "steps": 2, "aux_lm_weight": 0.5, "head_dropout": 0.0,
    "model": {"d_model": 16, "n_layer": 1, "n_head": 2, "d_inner": 64, "max_position": 64, "dropout": 0.0,
              "dropatt": 0.0, "dropemb": 0.0},
    "data": {"train_split": "test", "max_train_examples": 16, "max_eval_examples": 16, "batch_size": 4,
             "eval_batch_size": 16, "max_len": 64, "test_split": None},
    "train": {"eval_every": 0, "progress": False}}
"""Overrides of recipes/finetune/race_nopretrain.yaml: a random GPT-1 (d_inner 4 d_model, as transformers' GPT has it)
with a BPE tokenizer trained on 16 RACE questions, with the auxiliary LM, two steps, scored on 16 dev questions. It
trains on the test split's questions: the train split is read from its 14.6 MB tar.xz (about 10 s)."""


@pytest.mark.skipif(not (DATA / "race" / "RACE" / "dev").is_dir() or not (DATA / "race" / "RACE" / "test").is_dir(),
                    reason="RACE not in GENFEAT_DATA")
def test_gpt_race_model_saved_by_transformers_as_double_heads_scores_what_the_run_scored(tmp_path, capsys):
    """End to end: GPT-1 fine-tuned on RACE (multiple choice), exported as OpenAIGPTDoubleHeadsModel (its special
    tokens counted by genfeat_n_special), saved again by transformers with its tokenizer: ``genfeat evaluate --task
    race --json`` gives the run's dev accuracy and ``--predictions`` the uid<TAB>answer file genfeat's own checkpoint
    writes. A GPT-1 with a classification head has no transformers class genfeat writes: its export is refused."""
    from genfeat import cli
    from genfeat.hub import load_checkpoint
    from genfeat.methods.finetune import subset
    from genfeat.models.heads import FineTuneConfig, HeadConfig
    from genfeat.runner import run_recipe
    from genfeat.tasks import load_task

    result = run_recipe("recipes/finetune/race_nopretrain.yaml", GPT_RACE, [0], out_dir=tmp_path / "ft", progress=False)
    assert result["steps"] == 2 and result["dev_examples"] == 16
    hf_task = _saved_by_transformers(transformers.OpenAIGPTDoubleHeadsModel, tmp_path, capsys)
    config = json.loads((hf_task / "config.json").read_text())
    assert config["architectures"] == ["OpenAIGPTDoubleHeadsModel"] and config["genfeat_n_special"] == 3
    assert config["vocab_size"] == len(transformers.AutoTokenizer.from_pretrained(hf_task)) + 3
    figures = _evaluate_cli(capsys, hf_task, "race", "--max-examples", "16", "--predictions", str(tmp_path / "race.tsv"))
    assert figures["examples"] == 16 and set(figures) >= {"accuracy", "truncated", "seconds"}
    assert figures["accuracy"] == pytest.approx(result["dev_accuracy"], abs=1e-12)
    assert figures["truncated"] == result["dev_truncated"]
    lines = (tmp_path / "race.tsv").read_text().splitlines()
    dev = subset(load_task("race", "dev"), 16)
    assert lines[0] == "uid\tprediction" and [line.split("\t")[0] for line in lines[1:]] == [ex.uid for ex in dev]
    answers = [line.split("\t")[1] for line in lines[1:]]
    assert set(answers) <= set("ABCD")
    assert sum("ABCD".index(a) == ex.label for a, ex in zip(answers, dev)) / 16 == figures["accuracy"]
    ours = _evaluate_cli(capsys, tmp_path / "ft" / "final", "race", "--max-examples", "16", "--predictions",
                         str(tmp_path / "ours.tsv"))
    assert (tmp_path / "ours.tsv").read_text() == (tmp_path / "race.tsv").read_text()
    assert ours["accuracy"] == figures["accuracy"]
    assert _same_outputs(tmp_path / "ft" / "final", hf_task, "race", 16)["score"].std(0).min() > 0
    # the same backbone with a classification head (GPT-1 on SST-2): transformers' double-heads model scores choices
    model, vocab = load_checkpoint(tmp_path / "ft" / "final")
    classifier = FineTuneModel(FineTuneConfig(task="sst2", backbone="gpt", backbone_config=model.config.backbone_config,
                                              head=HeadConfig(kind="classification", d_model=16, pool=False,
                                                              dropout=0.0), max_len=64), model.backbone)
    save_pretrained(classifier, tmp_path / "sst2", vocab)
    capsys.readouterr()
    assert cli.main(["export", "--checkpoint", str(tmp_path / "sst2"), "--out", str(tmp_path / "sst2_hf")]) == 2
    assert "a fine-tuned GPT-1 with a classification head has no Hugging Face format in genfeat " \
           "(OpenAIGPTDoubleHeadsModel scores choices). fix: keep it as a genfeat checkpoint (genfeat export --format " \
           "genfeat)" in capsys.readouterr().err
    assert not (tmp_path / "sst2_hf").exists()
