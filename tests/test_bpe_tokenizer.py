"""`genfeat tokenizer train --kind bpe`: GPT-1's BPE (``</w>`` suffix) in files Hugging Face loads, clear errors."""

import json
import os
from pathlib import Path

import pytest

from genfeat.cli import main
from genfeat.data.tokenizers import TokenizerConfig, load_tokenizer, special_ids, train_tokenizer
from genfeat.errors import DataError

TEXT = ["The lower bound is tight, and the upper bound follows from it.",
        "A newer model is wider than the older models were last year.",
        "The widest margin wins; narrower margins lose their training runs.",
        "Bounded models generalise when margins are wide and data is plentiful.",
        "Generative features help classifiers that see few labelled examples."] * 20
PTB = Path(os.environ.get("GENFEAT_DATA", "../shared/data")) / "ptb"


def corpus(tmp_path, lines=TEXT):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.hf_interop
def test_bpe_files_load_in_hugging_face_and_encode_alike(tmp_path):
    transformers = pytest.importorskip("transformers")
    vocab = train_tokenizer(TokenizerConfig("bpe", 150, lowercase=True), corpus(tmp_path), tmp_path / "tok")
    assert sorted(p.name for p in (tmp_path / "tok").iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert len(vocab) == 150 and special_ids(vocab) == {"unk": 0}
    pieces = [vocab.tokenizer.id_to_token(i) for i in range(len(vocab))]
    assert pieces[0] == "<unk>" and pieces[1:] == sorted(pieces[1:])  # ids follow the sorted pieces
    probe = "The NEWER bounds widen; margins, tight."
    tokens = vocab.tokenizer.encode(probe, add_special_tokens=False).tokens
    # lower-cased, punctuation split off, every word's last piece marked
    assert "".join(tokens).replace("</w>", " ").split() == "the newer bounds widen ; margins , tight .".split()
    assert all(t.endswith("</w>") for t in (tokens[-1], tokens[-2]))
    assert vocab.decode(vocab.encode(probe)) == "the newer bounds widen ; margins , tight ."
    assert vocab.encode("ж <unk> z") == [0, 0, 0]  # unseen characters, and a literal <unk> as one token
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert isinstance(hf, transformers.OpenAIGPTTokenizerFast) and hf.unk_token == "<unk>"
    assert hf(probe, add_special_tokens=False).input_ids == vocab.encode(probe)
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is True and config["tokenizer_class"] == "OpenAIGPTTokenizer"
    again = load_tokenizer(tmp_path / "tok")
    assert again.encode(probe) == vocab.encode(probe) and special_ids(again) == {"unk": 0}


def test_cased_bpe_keeps_case(tmp_path):
    vocab = train_tokenizer(TokenizerConfig("bpe", 150), corpus(tmp_path), tmp_path / "tok")
    assert vocab.encode("The") != vocab.encode("the")
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())["do_lower_case"] is False


@pytest.mark.hf_interop
def test_cased_bpe_is_read_by_transformers_as_genfeat_reads_it_and_saved_back_so(tmp_path):
    """transformers 5's OpenAIGPTTokenizer lower-cases every text whatever tokenizer.json says (and saves the
    lower-casing into it): a cased BPE names the generic fast tokenizer, which reads tokenizer.json as it is (4.x
    and 5.x), so transformers and genfeat, also after transformers saved it again, give the cased ids."""
    transformers = pytest.importorskip("transformers")
    vocab = train_tokenizer(TokenizerConfig("bpe", 150), corpus(tmp_path), tmp_path / "tok")
    assert json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())["tokenizer_class"] == \
        "PreTrainedTokenizerFast"
    probe = "The NEWER bounds widen; the newer bounds."
    hf = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert hf(probe, add_special_tokens=False).input_ids == vocab.encode(probe) != vocab.encode(probe.lower())
    hf.save_pretrained(tmp_path / "again")
    assert load_tokenizer(tmp_path / "again").encode(probe) == vocab.encode(probe)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "again")(probe, add_special_tokens=False).input_ids \
        == vocab.encode(probe)


def test_bpe_sizes_the_corpus_cannot_give_are_one_clear_error(tmp_path):
    with pytest.raises(DataError, match=r"yields only \d+ BPE types.*fix: pass --vocab-size \d+ or less"):
        train_tokenizer(TokenizerConfig("bpe", 5000), corpus(tmp_path), tmp_path / "tok")
    with pytest.raises(DataError, match=r"make \d+ BPE types, more than --vocab-size 20"):
        train_tokenizer(TokenizerConfig("bpe", 20), corpus(tmp_path), tmp_path / "tok")
    assert not (tmp_path / "tok").exists()


@pytest.mark.skipif(not (PTB / "ptb.valid.txt").is_file(), reason="needs GENFEAT_DATA with ptb")
def test_cli_trains_bpe_on_ptb_and_encodes_held_out_text(tmp_path, capsys):
    out = tmp_path / "bpe"
    assert main(["tokenizer", "train", "--kind", "bpe", "--corpus", str(PTB / "ptb.valid.txt"),
                 "--vocab-size", "2000", "--lowercase", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["vocab_size"] == 2000 and result["kind"] == "bpe"
    vocab = load_tokenizer(out)
    held_out = [line.strip() for line in (PTB / "ptb.test.txt").read_text().splitlines() if line.strip()][:200]
    ids = [vocab.encode(line) for line in held_out]
    n = sum(len(x) for x in ids)
    words = sum(len(line.split()) for line in held_out)
    assert sum(line.split().count("<unk>") for line in held_out) == sum(x.count(0) for x in ids)  # only PTB's own
    assert words <= n < 2.0 * words  # subwords: at least one per word, fewer than two on average
