"""A Hugging Face XLNet directory's sentencepiece model reads text as transformers' slow XLNetTokenizer prepares it
(genfeat.data.vocab.XLNetText: spaces, quote pairs, accents, lower-casing, the digit-comma split): the same ids on
GLUE and SQuAD texts and on strings made to hit each rule, character offsets into the text as given, and the rules
kept through a genfeat checkpoint and an export; a tokenizer folder genfeat trained reads text as it is."""

import json
import os
import unicodedata
from pathlib import Path

import pytest

from genfeat.data.tokenizers import TEXT_AS_IS, TokenizerConfig, load_tokenizer, train_tokenizer

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")
pytestmark = pytest.mark.hf_interop
DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data")).resolve()

TRICKY = ["café crème brûlée", "`` mostly martha '' and ``more''", "It cost 1,000, then 2,500,000, and 7, ok",
          "  two   spaces\t\nand a tab ", "ΣΑΣ İstanbul Ⅻ ﬁne", "naïve résumé 3,4,5, x", "", "   ", "1,", ",,,",
          "ΛΟΓΟΣ and ΟΔΟΣ", "the Cafe\u0301 and \u00b4acute"]


def _texts() -> list[str]:
    from genfeat.tasks import load_task

    texts = []
    for task, n in (("sst2", 300), ("rte", 100), ("squad_split", 100)):
        texts += [t for ex in load_task(task, "dev")[:n] for t in ex.texts]
    return texts


def _spiece(tmp_path: Path, texts: list[str]) -> Path:
    """A 400-piece unigram model trained on ``texts`` and numbers with commas (so pieces ending in 'digit,' exist)."""
    numbers = [f"about {i},{i * 7 % 1000:03d}, or {i}, then {i * 13},000,000, more" for i in range(1, 300)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join([*texts, *numbers, *TRICKY]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=400,
                                   character_coverage=1.0, minloglevel=2,
                                   user_defined_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"])
    return tmp_path / "sp.model"


@pytest.mark.skipif(not (DATA / "glue" / "SST-2" / "dev.tsv").is_file(), reason="GLUE not in GENFEAT_DATA")
@pytest.mark.parametrize("settings", [{}, {"do_lower_case": True, "keep_accents": True}])
def test_hf_xlnet_directory_reads_text_as_transformers_xlnet_tokenizer(tmp_path, settings):
    import torch

    from genfeat.data.vocab import XLNetText, load_vocab
    from genfeat.hub import load_checkpoint, save_pretrained
    from genfeat.tasks.transforms import tokenize_with_offsets

    texts = _texts()
    model_file = _spiece(tmp_path, texts)
    tok = transformers.XLNetTokenizer(vocab_file=str(model_file), **settings)
    if tok.is_fast:
        pytest.skip("this transformers has no slow (reference) XLNetTokenizer")
    hf = tmp_path / "hf"
    torch.manual_seed(0)
    transformers.XLNetForSequenceClassification(transformers.XLNetConfig(
        vocab_size=len(tok), d_model=16, n_layer=1, n_head=2, d_inner=32, num_labels=2)).save_pretrained(hf)
    tok.save_pretrained(hf)
    model, vocab = load_checkpoint(hf)
    assert vocab.text == XLNetText(lower=settings.get("do_lower_case", False), remove_space=True,
                                   keep_accents=settings.get("keep_accents", False))
    pieces = {p for t in texts + TRICKY for p in tok.tokenize(t)}
    assert any(len(p) > 1 and p[-2].isdigit() and p[-1] == "," for p in
               (spm.SentencePieceProcessor(model_file=str(model_file)).encode(t, out_type=str) for t in TRICKY)
               for p in p), "the digit-comma rule is exercised"
    assert any(p.startswith("\u2581\"") or p == "\"" for p in pieces), "the quote rule is exercised"
    differ = [t for t in texts + TRICKY if vocab.encode(t) != tok.convert_tokens_to_ids(tok.tokenize(t))]
    assert differ == [], f"{len(differ)} texts read otherwise than transformers reads them, e.g. {differ[:2]}"
    for text in TRICKY + texts[:50]:
        ids, spans = tokenize_with_offsets(vocab, text)
        assert ids == vocab.encode(text)
        assert all(0 <= a <= b <= len(text) for a, b in spans) and spans == sorted(spans), text
        # a piece's characters, prepared as XLNetText prepares them (and NFKC-normalised, as sentencepiece does),
        # hold the piece (where one character gives several, Ⅻ: X, I, I, the piece may be a part of them), and no
        # fewer characters do
        def prepared(a: int, b: int) -> str:
            return unicodedata.normalize("NFKC", vocab.text.prepare(text[a:b])[0])

        for piece, (a, b) in zip(tok.convert_ids_to_tokens(ids), spans):
            surface = unicodedata.normalize("NFKC", piece.replace("\u2581", ""))
            if piece in ("<unk>", "\u2581") or a == b and text in TRICKY:   # sentencepiece gives no characters
                continue                                                  # to the 2nd+ pieces of one (Ⅻ: x, i, i)
            assert surface in prepared(a, b), (text, piece, text[a:b])
            core = b                                  # the combining marks the preparation drops join the piece
            while core - a > 1 and unicodedata.combining(text[core - 1]):
                core -= 1
            spacing = prepared(a, a + 1).isspace()   # '´' prepares to a space: the word's '▁' piece starts there
            assert core - a == 1 or spacing or surface not in prepared(a + 1, core) + prepared(a, core - 1), \
                (text, piece, text[a:b])
    # answers with accents (one written as e + a combining accent, which the preparation drops) and numbers are
    # found at their characters of the original text
    context = "In  1,000, the ``café''   met the Cafe\u0301 crowd."
    ids, spans = tokenize_with_offsets(vocab, context)
    for answer in ("café", "Cafe\u0301", "1,000"):
        start = context.index(answer)
        covering = [(a, b) for a, b in spans if a < start + len(answer) and b > start]
        assert context[covering[0][0]:covering[-1][1]] == answer
    # the rules survive a genfeat checkpoint and an export; genfeat's own sentencepiece reads text as it is
    save_pretrained(model, tmp_path / "ours", vocab=vocab)
    assert load_vocab(tmp_path / "ours" / "vocab.json").text == vocab.text
    save_pretrained(model, tmp_path / "back", vocab=vocab, hf=True)
    config = json.loads((tmp_path / "back" / "tokenizer_config.json").read_text())
    assert (config["do_lower_case"], config["keep_accents"]) == (vocab.text.lower, vocab.text.keep_accents)
    assert config[TEXT_AS_IS] is False
    assert load_checkpoint(tmp_path / "back")[1].text == vocab.text


def test_a_tokenizer_genfeat_trained_reads_text_as_it_is_also_in_an_export(tmp_path):
    """genfeat's own sentencepiece models were trained on text as it is: their folders, and a Hugging Face export
    of such a model (marked TEXT_AS_IS), read it so; without the mark the folder is read as transformers would."""
    (tmp_path / "c.txt").write_text("\n".join(f"café number {i},000, `` quoted ''" for i in range(200)) + "\n")
    trained = train_tokenizer(TokenizerConfig("sentencepiece", 50), tmp_path / "c.txt", tmp_path / "sp")
    again = load_tokenizer(tmp_path / "sp")
    assert trained.text is None and again.text is None
    assert again.encode("`` café ''") == again.sp.encode("`` café ''")
    config = tmp_path / "sp" / "tokenizer_config.json"
    assert json.loads(config.read_text())[TEXT_AS_IS] is True
    assert load_tokenizer(tmp_path / "sp", hf_model=True).text is None
    config.write_text(json.dumps({k: v for k, v in json.loads(config.read_text()).items() if k != TEXT_AS_IS}))
    as_hf = load_tokenizer(tmp_path / "sp", hf_model=True)      # the same folder, not marked: transformers' reading
    assert as_hf.text is not None and as_hf.text.keep_accents   # genfeat writes keep_accents: true
    assert as_hf.encode("`` café ''") == again.sp.encode('" café "')
