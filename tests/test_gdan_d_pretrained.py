"""GDAN's D from a pretrained encoder (genfeat.models.span_reader, genfeat.data.gdan.WindowEncoder; beyond the
thesis): words map to their subwords in the right window, scores do not depend on padding or on the other
questions of a batch, the domain tags, and a gdan run with d_init (a BERT or an XLNet) on real data whose OUT/final/d
scores as the run."""

import os
from pathlib import Path

import pytest
import torch

from genfeat.data.gdan import Paragraph, QAExample, WindowEncoder
from genfeat.data.tokenizers import TokenizerConfig, special_ids, train_tokenizer
from genfeat.models.heads import FineTuneConfig, HeadConfig
from genfeat.models.span_reader import SpanReader, SpanReaderConfig
from genfeat.tasks.transforms import tokenize_with_offsets

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
TEXT = ("The Broncos' defense, led by Von Miller, won Super Bowl 50 in Santa Clara. Peyton Manning's last game "
        "ended with a 24–10 win over the Carolina Panthers, who had lost only one game all season long.")
BACKBONES = {"bert": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_inner": 32, "max_position": 64, "dropout": 0.0,
                      "dropatt": 0.0},
             "xlnet": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "dropout": 0.0,
                       "dropatt": 0.0}}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    (root / "c.txt").write_text("\n".join([TEXT, TEXT.lower(), "who won super bowl 50 ? where was the game ?"] * 3))
    return {"bert": train_tokenizer(TokenizerConfig("wordpiece", 120), root / "c.txt", root / "wp"),
            "xlnet": train_tokenizer(TokenizerConfig("sentencepiece", 80), root / "c.txt", root / "sp")}


def _reader(arch, vocab, max_len):
    torch.manual_seed(0)
    cfg = FineTuneConfig(task="gdan", backbone=arch, backbone_config={"n_token": len(vocab), **BACKBONES[arch]},
                         head=HeadConfig(kind="span", d_model=16, dropout=0.0), max_len=max_len, doc_stride=7)
    return SpanReader(SpanReaderConfig(cfg)).eval()


def _examples():
    p = Paragraph.of("p", TEXT)
    short = Paragraph.of("s", "Von Miller led the defense.")
    return [QAExample("a", p, ("who", "won", "super", "bowl", "50", "?"), 9, 11, ("Super Bowl 50",)),
            QAExample("b", short, ("who", "led", "?"), 0, 1, ("Von Miller",))]


def _tagged_batch(arch, vocab):
    """A tiny reader, its encoder (windows of 40 tokens, 7 subwords apart, tagged) and the batch of _examples()."""
    d = _reader(arch, vocab, max_len=40)
    encoder = WindowEncoder(vocab, d.model.input_format(vocab), 40, 7, tagged=True)
    return d, encoder, encoder.collate(_examples())


@pytest.mark.parametrize("arch", ["bert", "xlnet"])
def test_each_word_is_scored_at_its_own_subwords_in_its_best_window(tokenizers, arch):
    vocab = tokenizers[arch]
    d, encoder, batch = _tagged_batch(arch, vocab)
    assert (batch["window_of"] == 0).sum() > 2, "the long paragraph needs several windows"
    for b, ex in enumerate(_examples()):
        p = ex.paragraph
        ids, offsets = tokenize_with_offsets(vocab, p.text)
        for i, (s, e) in enumerate(p.offsets):
            w = batch["word_window"][b, i]
            assert batch["window_of"][w] == b
            first, last = batch["input_ids"][w, batch["word_first"][b, i]], batch["input_ids"][w, batch["word_last"][b, i]]
            pieces = [t for t, (a, z) in zip(ids, offsets) if s <= a < e]
            assert first.item() == pieces[0] and last.item() == pieces[-1], (p.tokens[i], pieces)
        assert batch["paragraph_mask"][b].sum() == len(p.tokens)
    rows = batch["word_window"][batch["paragraph_mask"]]
    assert batch["context_mask"][rows, batch["word_first"][batch["paragraph_mask"]]].all()
    assert batch["context_mask"][rows, batch["word_last"][batch["paragraph_mask"]]].all()
    assert not batch["context_mask"][torch.arange(len(batch["window_of"])), batch["tag_position"]].any()
    tags = batch["input_ids"][torch.arange(len(batch["window_of"])), batch["tag_position"]]
    assert (tags == special_ids(vocab)["mask"]).all()


@pytest.mark.parametrize("arch", ["bert", "xlnet"])
def test_scores_do_not_depend_on_the_batch_and_tags_matter(tokenizers, arch):
    vocab = tokenizers[arch]
    d, encoder, batch = _tagged_batch(arch, vocab)
    read = lambda b, tag: d(**{k: v for k, v in b.items() if k not in ("start", "end")},  # noqa: E731
                            domain=torch.full((len(b["start"]),), tag))
    together = read(batch, 0)
    for i, ex in enumerate(_examples()):
        n = len(ex.paragraph.tokens)
        alone = read(encoder.collate([ex]), 0)
        torch.testing.assert_close(together.start_logits[i, :n], alone.start_logits[0])
        torch.testing.assert_close(together.end_logits[i, :n], alone.end_logits[0])
    assert torch.isinf(together.start_logits[1, len(_examples()[1].paragraph.tokens):]).all()
    gen = read(batch, 1)
    assert not torch.allclose(gen.start_logits[0], together.start_logits[0])
    d.train()
    loss = -read(batch, 1).start_logits[:, 0].sum()
    loss.backward()
    assert d.tag_embed.grad[1].abs().sum() > 0 and d.tag_embed.grad[0].abs().sum() == 0
    untagged = WindowEncoder(vocab, d.model.input_format(vocab), 40, 7).collate(_examples())
    assert "tag_position" not in untagged and untagged["input_ids"].shape[1] <= batch["input_ids"].shape[1]
    with pytest.raises(ValueError, match="tag token"):
        read(untagged, 0)


@pytest.mark.skipif(not (DATA / "squad").is_dir(), reason="needs GENFEAT_DATA with squad/")
@pytest.mark.parametrize("arch", ["bert", "xlnet"])
def test_gdan_run_with_a_pretrained_d_and_its_final_d(tokenizers, tmp_path, monkeypatch, capsys, arch):
    """The run, then each of its checkpoints with the loader meant for it: OUT/final/d with ``genfeat evaluate``,
    OUT/g_mle/last, OUT/last and OUT/final/g with load_generator, OUT/final/g with ``genfeat generate-questions``."""
    import json

    from test_gdan_method import evaluate_cli

    from genfeat.cli import main
    from genfeat.data.gdan import GDANDataConfig, load_gdan_data
    from genfeat.hub import load_checkpoint, save_pretrained
    from genfeat.methods.gdan import score
    from genfeat.methods.question_gen import load_generator
    from genfeat.hub import build_model
    from genfeat.runner import run_recipe

    monkeypatch.setenv("GENFEAT_DATA", str(DATA))
    vocab = tokenizers[arch]
    torch.manual_seed(0)
    save_pretrained(build_model(arch, {"n_token": len(vocab), **BACKBONES[arch]}), tmp_path / arch, vocab)
    out = run_recipe(ROOT / "recipes/gdan/debug.yaml", {"d_init": str(tmp_path / arch), "d_max_len": 48,
                                                          "d_doc_stride": 24, "max_eval": 20, "max_unlabelled": 6},
                     out_dir=tmp_path / "run", progress=False)["runs"][0]
    assert out["steps"] == 6 and 0.0 <= out["dev_f1"] <= 1.0
    # the debug recipe's reader section configures the GA reader that d_init replaces: a note says it is ignored
    assert ("note: reader.embed_dim, reader.hidden, reader.layers, reader.dropout, reader.qe_comm ignored"
            in capsys.readouterr().err)
    d, d_vocab = load_checkpoint(tmp_path / "run" / "final" / "d")
    assert type(d).__name__ == "SpanReader" and len(d_vocab) == len(vocab) and d.model.config.backbone == arch
    encoder = WindowEncoder(d_vocab, d.model.input_format(d_vocab), 48, 24, 32, tagged=True)
    dev = load_gdan_data(GDANDataConfig(labelling_rate=0.05, wikitext=[]), seed=0).dev[:20]
    assert score(d, dev, encoder.collate, 0)["f1"] == out["dev_f1"]
    run = tmp_path / "run"
    # genfeat evaluate reads the span reader's windows and tag from the saved recipe: the run's figures
    for split in ("dev", "test"):
        code, result = evaluate_cli(run / "final" / "d", split, capsys, "--max-examples", "20")
        assert code == 0 and (result["squad_f1"], result["exact_match"]) == (out[f"{split}_f1"], out[f"{split}_em"])
    # every checkpoint holding G loads with load_generator, though D is a span reader; G's vocabulary is the words
    gens = {name: load_generator(run / name) for name in ("g_mle/last", "last", "final/g")}
    assert all(v.symbols == gens["final/g"][1].symbols for _, v in gens.values())
    for a, b in zip(gens["last"][0].state_dict().values(), gens["final/g"][0].state_dict().values()):
        assert torch.equal(a, b), "OUT/last and OUT/final/g hold the same G"
    (tmp_path / "p.txt").write_text("Peyton Manning led the Denver Broncos to a win in Super Bowl 50 in 2016.\n")
    code = main(["generate-questions", "--checkpoint", str(run / "final" / "g"), "--paragraphs",
                 str(tmp_path / "p.txt"), "--out", str(tmp_path / "q.jsonl"), "--beam", "2", "--max-len", "5",
                 "--chunks", "rules", "--json"])
    records = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert code == 0 and records and all(r["answer"] and len(r["question"].split()) <= 5 for r in records)
