"""The IMDB fine-tuning recipes (recipes/finetune/imdb_{xlnet,bert}.yaml) on the real reviews of ../shared/data for
two steps, each from a tiny backbone given as init: the loader, XLNet and Transformer-XL reading a review as memory
segments and a final segment, BERT cutting it to max_len, the cut reviews counted, and the two recipes reading the
same reviews."""

import os
from pathlib import Path

import pytest

from genfeat.data.tokenizers import TokenizerConfig, special_ids, train_tokenizer
from genfeat.hub import build_model, load_checkpoint, save_pretrained
from genfeat.runner import run_recipe
from genfeat.tasks.transforms import tokenize_with_offsets

from test_finetune_runner import memory_end

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()
TINY = {"bert": {"d_model": 16, "n_layer": 1, "n_head": 2, "d_inner": 32, "max_position": 128, "dropout": 0.0,
                 "dropatt": 0.0},
        "xlnet": {"d_model": 16, "n_layer": 1, "n_head": 2, "d_head": 8, "d_inner": 32, "dropout": 0.0, "dropatt": 0.0}}


def test_the_imdb_recipes_differ_only_in_the_init_and_xlnet_reading_segments():
    from dataclasses import replace

    from genfeat.runner import load_recipe

    _, xlnet = load_recipe("recipes/finetune/imdb_xlnet.yaml")
    _, bert = load_recipe("recipes/finetune/imdb_bert.yaml")
    assert (xlnet.init, bert.init) == ("runs/pretrain_k6/final", "runs/bert_pretrain/final")
    assert xlnet.data.max_segments == 4 and bert.data.max_segments == 1 and bert.data.max_len == 128
    assert replace(xlnet, init=bert.init, data=replace(xlnet.data, max_segments=1)) == bert
    assert (bert.data.task, bert.data.dev_split, bert.data.test_split, bert.keep_best, bert.train.eval_every) == \
        ("imdb", "test", None, False, 0), "the test reviews are scored once, at the end, and nothing is chosen on them"


@pytest.mark.skipif(not (DATA / "imdb" / "aclImdb_v1_labeled.tar.gz").is_file(), reason="IMDB not in GENFEAT_DATA")
def test_imdb_recipes_read_long_reviews_in_segments_with_xlnet_and_cut_them_with_bert(tmp_path, monkeypatch):
    import genfeat.methods.finetune as finetune

    monkeypatch.setenv("GENFEAT_DATA", str(DATA))
    loaded, encoded = {}, []
    read = finetune.load_task

    def load_once(spec, split, seed=0):                  # both runs read the archive once per split
        key = (getattr(spec, "name", spec), split, seed)
        if key not in loaded:
            loaded[key] = read(spec, split, seed=seed)
        return loaded[key]

    encode = finetune.encode_items

    def keep(examples, spec, encoder, cfg, split):
        items, cut = encode(examples, spec, encoder, cfg, split)
        encoded.append((split, examples, items, cut))
        return items, cut

    monkeypatch.setattr(finetune, "load_task", load_once)
    monkeypatch.setattr(finetune, "encode_items", keep)
    corpus = tmp_path / "reviews.txt"
    corpus.write_text("\n".join(ex.texts[0] for ex in load_once("imdb", "train")[::125]))     # 200 reviews
    runs = {}
    for arch, kind in (("xlnet", "sentencepiece"), ("bert", "wordpiece")):
        vocab = train_tokenizer(TokenizerConfig(kind, 1000), corpus, tmp_path / kind)
        fields = {"n_token": len(vocab), **TINY[arch]}
        if arch == "bert":
            fields["pad_id"] = special_ids(vocab)["pad"]
        save_pretrained(build_model(arch, fields), tmp_path / arch, vocab)
        encoded.clear()
        result = run_recipe(f"recipes/finetune/imdb_{arch}.yaml", {
            "init": str(tmp_path / arch), "steps": 2,
            "data": {"max_train_examples": 8, "max_eval_examples": 8, "batch_size": 4, "eval_batch_size": 8}},
            [0], out_dir=tmp_path / f"run_{arch}", progress=False)
        assert result["steps"] == 2 and result["train_examples"] == result["dev_examples"] == 8
        assert 0.0 <= result["dev_accuracy"] <= 1.0 and not any(key.startswith("test_") for key in result)
        assert [(split, cut) for split, _, _, cut in encoded] == [("train", result["train_truncated"]),
                                                                  ("test", result["dev_truncated"])]
        runs[arch] = ([[ex.uid for ex in examples] for _, examples, _, _ in encoded], encoded[:], vocab)
    assert runs["xlnet"][0] == runs["bert"][0], "both recipes train on and score the same reviews"
    assert set(loaded) == {("imdb", "train", 0), ("imdb", "test", 0)}

    model, _ = load_checkpoint(tmp_path / "run_xlnet" / "final")
    assert (model.config.max_len, model.config.max_segments) == (128, 4)
    u = 128 - 2                                                   # A <sep> <cls>
    _, splits, vocab = runs["xlnet"]
    read_whole = 0
    for split, examples, items, cut in splits:
        lost = 0
        for ex, it in zip(examples, items):
            ids, _ = tokenize_with_offsets(vocab, ex.texts[0])
            tail = it.encoded.sequences[0].ids[:-2]
            assert len(tail) <= u and tail == ids[len(ids) - len(tail):], "the final segment ends the review"
            assert len(it.memory) <= 3 and bool(it.memory) == (len(ids) > u)
            start, end = len(ids) - len(tail), memory_end(ids, it.memory, u)
            lost += start > end
            read_whole += bool(it.memory) and start <= end
        assert lost == cut, f"{split}: the reviews with tokens left out are counted"
    assert read_whole > 0, "some reviews are longer than a segment and read whole through the memory"

    _, splits, vocab = runs["bert"]
    for split, examples, items, cut in splits:
        lengths = [len(vocab.encode(ex.texts[0])) for ex in examples]
        assert all(not it.memory and len(it.encoded.sequences[0].ids) == min(n + 2, 128)
                   for it, n in zip(items, lengths))
        assert cut == sum(n > 128 - 2 for n in lengths) > 0, f"{split}: every review longer than 126 tokens is cut"


@pytest.mark.skipif(not (DATA / "imdb" / "aclImdb_v1_labeled.tar.gz").is_file(), reason="IMDB not in GENFEAT_DATA")
def test_transformer_xl_reads_long_reviews_in_segments_with_memory(tmp_path, monkeypatch):
    """The same recipe from a tiny word-level Transformer-XL: its adapter's ``A <eos>`` format, the review read as
    up to 4 segments of 128 tokens (the earlier ones as memory) and scored; what its memory holds is the review's
    start, the final segment its end."""
    from collections import Counter

    import genfeat.methods.finetune as finetune
    from genfeat.data.vocab import EOS, UNK, SymbolVocab

    monkeypatch.setenv("GENFEAT_DATA", str(DATA))
    encoded = []
    encode = finetune.encode_items

    def keep(examples, spec, encoder, cfg, split):
        items, cut = encode(examples, spec, encoder, cfg, split)
        encoded.append((examples, items, cut))
        return items, cut

    monkeypatch.setattr(finetune, "encode_items", keep)
    reviews = [ex.texts[0] for ex in finetune.load_task("imdb", "train")[::250]]     # 100 reviews
    words = [w for w, _ in Counter(w for r in reviews for w in r.split()).most_common(1500)]
    vocab = SymbolVocab([EOS, UNK, *words], "word", unk=UNK)
    fields = {"n_token": len(vocab), "d_model": 16, "n_layer": 1, "n_head": 2, "d_head": 8, "d_inner": 32,
              "dropout": 0.0, "mem_len": 0}
    save_pretrained(build_model("transformer_xl", fields), tmp_path / "txl", vocab)
    result = run_recipe("recipes/finetune/imdb_xlnet.yaml", {
        "init": str(tmp_path / "txl"), "steps": 2,
        "data": {"max_train_examples": 8, "max_eval_examples": 8, "batch_size": 4, "eval_batch_size": 8}},
        [0], out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 2 and result["dev_examples"] == 8 and 0.0 <= result["dev_accuracy"] <= 1.0
    model, _ = load_checkpoint(tmp_path / "run" / "final")
    assert model.config.backbone == "transformer_xl" and (model.config.max_len, model.config.max_segments) == (128, 4)
    u = 128 - 1                                                   # A <eos>
    read_whole = 0
    for examples, items, cut in encoded:
        lost = 0
        for ex, it in zip(examples, items):
            ids = vocab.encode(ex.texts[0])
            seq = it.encoded.sequences[0].ids
            assert seq[-1] == vocab.index[EOS]
            tail = seq[:-1]
            assert len(tail) <= u and tail == ids[len(ids) - len(tail):], "the final segment ends the review"
            assert len(it.memory) <= 3 and bool(it.memory) == (len(ids) > u)
            start, end = len(ids) - len(tail), memory_end(ids, it.memory, u)
            lost += start > end
            read_whole += bool(it.memory) and start <= end
        assert lost == cut
    assert read_whole > 0, "some reviews are longer than a segment and read whole through the memory"
