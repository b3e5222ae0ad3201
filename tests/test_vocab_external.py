"""Subword vocabularies loaded from an existing tokenizer file (VocabConfig.tokenizer_file).

The files are built here with tokenizers and sentencepiece themselves; the vocabulary must encode
exactly as the library does, travel with the checkpoint, and fail with a clear message when the
file is missing or is not what the kind says.
"""

import pytest
import sentencepiece as spm
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from genfeat.data.corpora import load_corpus
from genfeat.data.vocab import BPEVocab, SentencePieceVocab, VocabConfig, load_vocab
from genfeat.errors import ConfigError
from genfeat.runner import run_recipe

LINES = ["the lower bound is tight", "a newer model is wider", "the widest margin wins"] * 30
PROBE = "the newest wider bound\n"


def bpe_file(tmp_path):
    tok = Tokenizer(models.BPE())  # GPT-2 style: byte-level BPE, a space before each word
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(LINES, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path, tok


def sentencepiece_file(tmp_path):
    (tmp_path / "train.txt").write_text("\n".join(LINES) + "\n")
    spm.SentencePieceTrainer.train(input=str(tmp_path / "train.txt"), model_prefix=str(tmp_path / "sp"),
                                   vocab_size=24, minloglevel=2)
    return tmp_path / "sp.model", spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))


@pytest.mark.parametrize("kind", ["bpe", "sentencepiece"])
def test_tokenizer_file_encodes_like_the_library_and_round_trips_through_vocab_json(tmp_path, kind):
    path, library = bpe_file(tmp_path) if kind == "bpe" else sentencepiece_file(tmp_path)
    expected = library.encode(PROBE).ids if kind == "bpe" else library.encode(PROBE)
    (tmp_path / "corpus.txt").write_text(PROBE)
    corpus = load_corpus(str(tmp_path / "corpus.txt"), vocab_cfg=VocabConfig(kind=kind, tokenizer_file=str(path)))
    vocab = corpus.vocab
    assert isinstance(vocab, BPEVocab if kind == "bpe" else SentencePieceVocab)
    assert corpus.splits["all"].tolist() == expected
    assert len(vocab) == library.get_vocab_size() if kind == "bpe" else len(vocab) == library.get_piece_size()

    vocab.save(tmp_path / "vocab.json")
    path.unlink()  # the saved vocabulary must not depend on the original file
    again = load_vocab(tmp_path / "vocab.json")
    assert again.kind == kind and len(again) == len(vocab)
    assert again.encode(PROBE) == expected
    assert again.decode(expected).split() == PROBE.split()


def test_recipe_trains_with_a_tokenizer_file_and_the_checkpoint_carries_it(tmp_path):
    path, library = bpe_file(tmp_path)
    (tmp_path / "corpus.txt").write_text("\n".join(LINES) + "\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "method: transformer_xl\n"
        f"data: {{corpus: '{tmp_path / 'corpus.txt'}', batch_size: 2, tgt_len: 8, train_split: all,\n"
        f"       valid_split: all, test_split: null, vocab: {{kind: bpe, tokenizer_file: '{path}'}}}}\n"
        "model: {d_model: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 1, mem_len: 8}\n"
        "train: {progress: false}\n"
        "eval: {batch_size: 2}\n"
        "steps: 2\n")
    result = run_recipe(recipe, out_dir=tmp_path / "run", progress=False)
    assert result["steps"] == 2 and torch.isfinite(torch.tensor(result["valid_loss"]))
    path.unlink()
    for ckpt in ("last", "final"):
        saved = load_vocab(tmp_path / "run" / ckpt / "vocab.json")
        assert len(saved) == library.get_vocab_size()
        assert saved.encode(PROBE) == library.encode(PROBE).ids


@pytest.mark.parametrize("kind", ["bpe", "sentencepiece"])
def test_missing_or_corrupt_tokenizer_file_names_the_file_and_the_fix(tmp_path, kind):
    (tmp_path / "corpus.txt").write_text(PROBE)
    missing = tmp_path / "nope.file"
    with pytest.raises(ConfigError, match=r"tokenizer_file '.*nope\.file' does not exist\. fix: point"):
        load_corpus(str(tmp_path / "corpus.txt"), vocab_cfg=VocabConfig(kind=kind, tokenizer_file=str(missing)))
    for content in (b"", b"\x00\xff garbage {", b'{"version": "1.0"}'):
        corrupt = tmp_path / "corrupt.file"
        corrupt.write_bytes(content)
        with pytest.raises(ConfigError, match=r"tokenizer_file '.*corrupt\.file' (cannot be read|is not a "
                                              r"sentencepiece model).*fix: pass"):
            load_corpus(str(tmp_path / "corpus.txt"), vocab_cfg=VocabConfig(kind=kind, tokenizer_file=str(corrupt)))
    # A file of the other library is refused too, with the kind that would read it in the fix.
    other, _ = sentencepiece_file(tmp_path) if kind == "bpe" else bpe_file(tmp_path)
    other_kind = "sentencepiece" if kind == "bpe" else "bpe"
    with pytest.raises(ConfigError, match=f"use kind {other_kind}"):
        load_corpus(str(tmp_path / "corpus.txt"), vocab_cfg=VocabConfig(kind=kind, tokenizer_file=str(other)))


def test_tokenizer_file_needs_a_subword_kind_and_a_corrupt_saved_tokenizer_is_a_checkpoint_error(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer_file is set but vocab kind is 'word'"):
        VocabConfig(kind="word", tokenizer_file="tokenizer.json")
    (tmp_path / "vocab.json").write_text('{"kind": "bpe", "tokenizer": "{not json"}')
    with pytest.raises(Exception, match="cannot read vocabulary .*not a tokenizers JSON file"):
        load_vocab(tmp_path / "vocab.json")
