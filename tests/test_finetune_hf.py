"""Hugging Face BERT task models <-> genfeat fine-tuned models (genfeat.interop.hf_finetune): random-weight parity
(fp32, <= 1e-4) with transformers' BertForSequenceClassification (classes and regression), BertForMultipleChoice and
BertForQuestionAnswering, with padding and token types, both ways; and fine-tuning from a Hugging Face directory
on real data (../shared/data) through to evaluating the task model transformers saves."""

import os
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
    again = _exported(ours, transformers.XLNetForSequenceClassification, tmp_path, input_ids=ids[:, 0],
                      attention_mask=mask[:, 0], token_type_ids=types[:, 0])
    torch.testing.assert_close(again.logits, ref, atol=1e-4, rtol=1e-4)


def test_xlnet_question_answering_simple_parity(tmp_path):
    hf = _hf_xlnet(transformers.XLNetForQuestionAnsweringSimple, tmp_path)
    ours = from_pretrained(tmp_path / "hf")
    ids, mask, types = _left_padded()
    with torch.no_grad():
        ref = hf(ids[:, 0], attention_mask=mask[:, 0], token_type_ids=types[:, 0])
        got = ours(ids, mask, types, torch.full((2, 1), 8), torch.ones(2, 9, dtype=torch.bool))
    torch.testing.assert_close(got.start_logits, ref.start_logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got.end_logits, ref.end_logits, atol=1e-4, rtol=1e-4)


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
    again = _exported(ours, transformers.OpenAIGPTDoubleHeadsModel, tmp_path, input_ids=ids,
                      attention_mask=mask.view(-1, 9), mc_token_ids=last)
    torch.testing.assert_close(again.mc_logits, ref, atol=1e-4, rtol=1e-4)
    plain = transformers.OpenAIGPTDoubleHeadsModel(transformers.OpenAIGPTConfig(vocab_size=53, n_embd=16, n_layer=1, n_head=2,
                                                                                n_positions=24))
    plain.save_pretrained(tmp_path / "plain")
    with pytest.raises(CheckpointError, match="genfeat_n_special"):
        from_double_heads(load_checkpoint(tmp_path / "plain")[0])


@pytest.mark.skipif(not (DATA / "glue" / "SST-2" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
def test_finetuning_from_a_hugging_face_directory_and_evaluating_the_task_model_transformers_saves(tmp_path, capsys):
    """End to end: a BertForMaskedLM saved by transformers with its WordPiece tokenizer is the init of two SST-2
    steps; the fine-tuned model, exported and saved again by transformers as BertForSequenceClassification with
    its tokenizer, scores what the run scored."""
    from collections import Counter

    from genfeat import cli
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
    assert cli.main(["export", "--checkpoint", str(tmp_path / "ft" / "final"), "--out", str(tmp_path / "export")]) == 0
    capsys.readouterr()
    hf_task = tmp_path / "hf_task"
    transformers.BertForSequenceClassification.from_pretrained(tmp_path / "export").save_pretrained(hf_task)
    transformers.AutoTokenizer.from_pretrained(tmp_path / "export").save_pretrained(hf_task)
    figures = evaluate_task(hf_task, "sst2", max_examples=32)
    assert figures["examples"] == 32 and set(figures) >= {"accuracy", "truncated", "seconds"}
    assert figures["accuracy"] == pytest.approx(result["dev_accuracy"], abs=1e-12)
