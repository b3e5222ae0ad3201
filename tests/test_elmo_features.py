"""ELMo as a fine-tuning backbone: the task scalar mix, frozen and fine-tuned biLM, padding, a recipe run on SST-2."""

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from genfeat.data.chars import CharVocab
from genfeat.errors import ConfigError
from genfeat.hub import build_model, load_checkpoint
from genfeat.methods import finetune
from genfeat.methods.finetune import FineTuneRecipe, build_model_and_vocab, evaluate_task
from genfeat.models.elmo import ElmoBiLM, ElmoConfig, SpelledWordVocab
from genfeat.models.heads import FineTuneConfig, FineTuneModel, HeadConfig
from genfeat.runner import run_recipe
from genfeat.tasks import get_task

SST2 = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "glue" / "SST-2"
WORDS = ["<eos>", "the", "film", "is", "good", "bad", "not", "a", "plot"]


def backbone(**kw) -> ElmoBiLM:
    chars = CharVocab.from_words(WORDS, 10)
    torch.manual_seed(0)
    model = ElmoBiLM(ElmoConfig(n_token=len(WORDS), n_char=len(chars), max_chars=10, char_dim=4, filters=[(2, 6)],
                                d_proj=6, d_lstm=8, dropout=0.0, **kw))
    model.set_spelling(chars.spell_table(WORDS))
    return model


def task_model(**kw) -> FineTuneModel:
    cfg = FineTuneConfig(task="sst2", backbone="elmo", head=HeadConfig(d_model=12, dropout=0.0))
    return FineTuneModel(cfg, backbone(**kw)).eval()


def test_frozen_biLM_trains_only_the_mix_and_the_head():
    model = task_model()
    ids = torch.tensor([[[1, 2, 3, 4, 0]]])
    model(ids, torch.ones_like(ids), summary_index=torch.tensor([[4]])).logits.sum().backward()
    trained = {n for n, p in model.named_parameters() if p.grad is not None}
    assert trained == {"backbone.mix.weights", "backbone.mix.gamma", "head.pooler.weight", "head.pooler.bias",
                       "head.out.weight", "head.out.bias"}
    assert model.config.backbone_config["task_mix"]


def test_finetune_bilm_trains_the_biLM_too():
    model = task_model(finetune_bilm=True)
    ids = torch.tensor([[[1, 2, 3, 4, 0]]])
    model(ids, torch.ones_like(ids), summary_index=torch.tensor([[4]])).logits.sum().backward()
    assert model.backbone.forward_lstms[0].weight_ih_l0.grad is not None
    assert model.backbone.tokens.embed.weight.grad is not None


def test_a_frozen_biLM_reads_without_dropout_in_training_and_a_finetuned_one_with_it():
    ids = torch.tensor([[[1, 2, 3, 4, 0]]])
    mask, where = torch.ones_like(ids), torch.tensor([[4]])
    for finetune_bilm in (False, True):
        model = task_model(finetune_bilm=finetune_bilm)
        model.backbone.drop.p = 0.5
        model.train()
        torch.manual_seed(1)
        first = model(ids, mask, summary_index=where).logits
        second = model(ids, mask, summary_index=where).logits
        assert model.backbone.mix.training and model.head.training
        assert model.backbone.forward_lstms.training == finetune_bilm
        assert torch.equal(first, second) != finetune_bilm      # the head's dropout is 0: only the biLM's can differ


def test_summary_is_the_mean_ELMo_vector_and_padding_changes_nothing():
    model = task_model()
    short = torch.tensor([[[1, 2, 4, 0]]])
    alone_hidden, _ = model.adapter.hidden(model.backbone, short[:, 0], torch.ones(1, 4), None)
    out = model.backbone(word_ids=short[:, 0])
    mixed = model.backbone.mix(out.layers, out.mask)
    torch.testing.assert_close(alone_hidden[0, 3], mixed[0].mean(0))
    torch.testing.assert_close(alone_hidden[0, :3], mixed[0, :3])
    batch = torch.tensor([[[1, 2, 4, 0, 0, 0]], [[1, 8, 3, 6, 5, 0]]])   # the first padded with <eos> ids
    mask = torch.tensor([[[1, 1, 1, 1, 0, 0]], [[1, 1, 1, 1, 1, 1]]])
    logits = model(batch, mask, summary_index=torch.tensor([[3], [5]])).logits
    torch.testing.assert_close(logits[0], model(short, torch.ones_like(short), summary_index=torch.tensor([[3]])).logits[0])


def test_a_finetuned_checkpoint_rebuilds_with_its_mix():
    model = task_model()
    with torch.no_grad():
        model.backbone.mix.weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
    rebuilt = FineTuneModel(dataclasses.replace(model.config))
    rebuilt.load_state_dict(model.state_dict())
    assert torch.equal(rebuilt.backbone.mix.weights, model.backbone.mix.weights)
    assert not any(p.requires_grad for n, p in rebuilt.backbone.named_parameters() if not n.startswith("mix."))


@pytest.mark.skipif(not (SST2 / "train.tsv").is_file(), reason="needs GENFEAT_DATA with GLUE SST-2")
def test_sst2_recipe_fine_tunes_a_pretrained_elmo_and_leaves_the_biLM_frozen(tmp_path):
    text = tmp_path / "text.txt"
    g = torch.Generator().manual_seed(0)
    text.write_text("\n".join(" ".join(WORDS[1 + i] for i in torch.randint(8, (9,), generator=g).tolist())
                              for _ in range(40)) + "\n")
    run_recipe(Path(__file__).parents[1] / "recipes" / "elmo" / "debug.yaml",
               overrides={"steps": 2, "data.train_text": str(text), "data.valid_text": str(text),
                          "data.vocab": {"min_freq": 1, "max_size": 20}, "data.batch_size": 4},
               out_dir=tmp_path / "elmo", progress=False)
    result = run_recipe(Path(__file__).parents[1] / "recipes" / "elmo" / "sst2.yaml",
                        overrides={"init": str(tmp_path / "elmo" / "final"), "data.max_train_examples": 32,
                                   "data.max_eval_examples": 32, "data.batch_size": 8, "steps": 2,
                                   "epochs": 0, "train.eval_every": 0},
                        out_dir=tmp_path / "sst2", progress=False)
    assert 0.0 <= result["dev_accuracy"] <= 1.0 and result["dev_examples"] == 32
    pre, _ = load_checkpoint(tmp_path / "elmo" / "final")
    tuned, _ = load_checkpoint(tmp_path / "sst2" / "final")
    for name, p in pre.state_dict().items():
        assert torch.equal(p, tuned.backbone.state_dict()[name]), name
    assert not torch.equal(tuned.backbone.mix.weights, torch.zeros(3))   # the mix did learn
    # the fine-tuned checkpoint reads SST-2's words (nearly all outside the 10-word vocabulary) by their
    # characters again, and scores the dev examples as the run did
    tuned, vocab = load_checkpoint(tmp_path / "sst2" / "final")
    assert isinstance(vocab, SpelledWordVocab) and vocab.encode("a gorgeous film")[1] >= len(vocab)
    again = evaluate_task(tmp_path / "sst2" / "final", "sst2", max_examples=32)
    assert again["accuracy"] == result["dev_accuracy"]
    # finetune_bilm: true in the recipe trains the biLM too, and its checkpoint rebuilds fine-tuned
    run_recipe(Path(__file__).parents[1] / "recipes" / "elmo" / "sst2.yaml",
               overrides={"init": str(tmp_path / "elmo" / "final"), "finetune_bilm": True, "data.max_train_examples": 32,
                          "data.max_eval_examples": 32, "data.batch_size": 8, "steps": 2, "epochs": 0,
                          "train.eval_every": 0, "keep_best": False},
               out_dir=tmp_path / "sst2_ft", progress=False)
    tuned, _ = load_checkpoint(tmp_path / "sst2_ft" / "final")
    assert tuned.backbone.config.finetune_bilm
    assert not torch.equal(pre.forward_lstms[0].weight_ih_l0, tuned.backbone.forward_lstms[0].weight_ih_l0)


def test_finetune_bilm_needs_an_elmo_init(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="without an init"):
        FineTuneRecipe(finetune_bilm=True, steps=1)
    (tmp_path / "bert").mkdir()
    bert = build_model("bert", {"n_token": 20, "d_model": 8, "n_layer": 1, "n_head": 2, "d_inner": 16})
    monkeypatch.setattr(finetune, "load_checkpoint", lambda path: (bert, None))
    monkeypatch.setattr(finetune, "check_vocab", lambda *args: None)
    with pytest.raises(ConfigError, match="a bert model, not ELMo"):
        build_model_and_vocab(FineTuneRecipe(init=str(tmp_path / "bert"), finetune_bilm=False, steps=1),
                              get_task("sst2"), [], None)
