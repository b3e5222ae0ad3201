"""ELMo reads task words outside its pretraining vocabulary by their characters (models.elmo.SpelledWordVocab)."""

import pytest
import torch

from genfeat.data.chars import CharVocab
from genfeat.data.vocab import SymbolVocab
from genfeat.models.elmo import ElmoBiLM, ElmoConfig, SpelledWordVocab
from genfeat.models.heads import FineTuneConfig, FineTuneModel, HeadConfig

WORDS = ["<eos>", "the", "film", "is", "good", "bad", "not", "a", "plot", "<unk>"]


def model_for(words: list[str]) -> tuple[ElmoBiLM, SpelledWordVocab]:
    """A tiny biLM (seed 0) trained with the word vocabulary ``words``, and the vocabulary it reads text with."""
    chars = CharVocab.from_words(words, 10)
    torch.manual_seed(0)
    model = ElmoBiLM(ElmoConfig(n_token=len(words), n_char=len(chars), max_chars=10, char_dim=4,
                                filters=[(1, 4), (2, 6)], d_proj=6, d_lstm=8, dropout=0.0)).eval()
    model.set_spelling(chars.spell_table(words))
    return model, model.text_vocabulary(SymbolVocab(list(words), "word", unk="<unk>"))


def test_an_unseen_word_gets_its_own_token_vector_not_unk():
    model, vocab = model_for(WORDS)
    ids = vocab.encode("the plod is fog <unk>")            # plod, fog: not in the vocabulary, known characters
    assert ids[:1] == [1] and ids[2] == 3 and ids[4] == WORDS.index("<unk>")
    assert ids[1] == len(WORDS) and ids[3] == len(WORDS) + 1
    assert vocab.encode("fog plod") == [ids[3], ids[1]]     # a word keeps its id
    assert vocab.base.encode("the plod is fog") == [1, 9, 3, 9]   # the word-level vocabulary reads both as <unk>
    token = model(word_ids=torch.tensor([ids])).layers[0, 0]      # [t, 2d] the context-free token layer
    plod, fog, unk = token[1], token[3], token[4]
    assert not torch.allclose(plod, unk) and not torch.allclose(fog, unk) and not torch.allclose(plod, fog)
    torch.testing.assert_close(plod, model.tokens(torch.tensor(vocab.chars.spell("plod")))[None].repeat(1, 2)[0])
    assert vocab.decode(ids) == "the plod is fog <unk>"


def test_features_depend_on_a_words_characters_not_on_its_being_in_the_vocabulary():
    """Two models alike but for one vocabulary word ("plot" vs "plto": the same characters, so the same character
    vocabulary and weights): "plot" in a task text gets the same features and task outputs from both."""
    with_plot, a = model_for(WORDS)
    without, b = model_for([w if w != "plot" else "plto" for w in WORDS])
    assert a.chars.chars == b.chars.chars
    text = "the plot is not good"
    ids_a, ids_b = a.encode(text), b.encode(text)
    assert ids_a[1] < len(WORDS) <= ids_b[1]
    torch.testing.assert_close(with_plot(word_ids=torch.tensor([ids_a])).layers,
                               without(word_ids=torch.tensor([ids_b])).layers, rtol=0, atol=0)
    cfg = FineTuneConfig(task="sst2", backbone="elmo", head=HeadConfig(d_model=12, dropout=0.0))
    torch.manual_seed(1)
    task_a = FineTuneModel(cfg, with_plot).eval()
    torch.manual_seed(1)
    task_b = FineTuneModel(cfg, without).eval()
    ids_a, ids_b = (torch.tensor([[v.encode(text) + [0]]]) for v in (a, b))
    out_a = task_a(ids_a, torch.ones_like(ids_a), summary_index=torch.tensor([[5]])).logits
    out_b = task_b(ids_b, torch.ones_like(ids_b), summary_index=torch.tensor([[5]])).logits
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)


def test_a_lowercased_vocabulary_reads_capitals_as_lower_case():
    _, vocab = model_for(WORDS)
    assert vocab.lowercase and vocab.encode("The Film is NOT bad") == vocab.encode("the film is not bad") == [1, 2, 3, 6, 5]
    _, vocab = model_for([*WORDS, "The"])
    assert not vocab.lowercase and vocab.encode("The the") == [len(WORDS), 1]


def test_spelled_ids_are_read_only_and_in_no_checkpoint():
    model, vocab = model_for(WORDS)
    ids = torch.tensor([vocab.encode("the plod")])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(word_ids=ids, score_words=True)             # the softmax predicts vocabulary words only
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model.spell(torch.tensor([len(WORDS) + 1]))       # an id no word was given
    # not a buffer: the checkpoint and DDP's buffer broadcast leave it alone (it grows while texts are encoded)
    assert "extra_spelling" not in model.state_dict() and all(b is not model.extra_spelling for b in model.buffers())
    assert vocab.payload() == vocab.base.payload() and len(vocab) == len(WORDS)
    assert model.text_vocabulary(vocab).base is vocab.base
