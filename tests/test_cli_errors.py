"""Bad input ends in one clear error line and a non-zero exit, never a traceback."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from genfeat.config import UnknownFieldError
from genfeat.errors import ConfigError
from genfeat.runner import load_recipe

DATA = Path(os.environ.get("GENFEAT_DATA", "../shared/data"))

RECIPE = """method: transformer_xl
data: {corpus: ptb, batch_size: 4, tgt_len: 8}
model: {d_model: 16, n_head: 2, d_head: 8, d_inner: 32, n_layer: 1, mem_len: 8}
steps: 2
"""


def genfeat(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "genfeat.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "fix:" in lines[0]
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("yaml_text, needles", [
    (RECIPE.replace("steps: 2", "stepz: 2"), ["unknown config field 'stepz'", "did you mean 'steps'"]),
    (RECIPE.replace("tgt_len: 8", "tgt_len: eight"), ["'data.tgt_len'", "integer"]),
    (RECIPE.replace("transformer_xl", "transformer_yl"), ["unknown method 'transformer_yl'"]),
    ("method: [unclosed", ["not valid YAML"]),
])
def test_bad_recipe(tmp_path, yaml_text, needles):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml_text)
    proc = genfeat("run", str(recipe), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, *needles)
    assert proc.stderr.count(str(recipe)) == 1, "the error names the recipe file, once"
    assert not (tmp_path / "out").exists(), "nothing may be written for a rejected recipe"


def test_bad_override_and_missing_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    proc = genfeat("run", str(recipe), "--train.lr", "fast")
    assert_one_line_error(proc, "'train.lr'")
    assert str(recipe) not in proc.stderr, "an override is not in the recipe file"
    assert_one_line_error(genfeat("run", str(tmp_path / "nope.yaml")), "does not exist")


def test_a_recipe_files_error_names_the_file_and_an_overrides_error_the_field(tmp_path):
    """A bad value the recipe file gives is prefixed with the file (the error's class and fix kept); one an override
    gives names the field the command line set, not the file, which does not hold it."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("method: gdan\ndata: {labelling_rate: 1.5}\n")
    cause = "data.labelling_rate is 1.5, outside (0, 1]. fix: set data.labelling_rate to a fraction"
    for overrides in ({}, {"steps": 3}):    # another override beside it leaves the error the file's
        with pytest.raises(ConfigError, match=re.escape(f"recipe '{recipe}': {cause}")):
            load_recipe(recipe, overrides)
    with pytest.raises(ConfigError) as raised:
        load_recipe(recipe, {"data.labelling_rate": 1.7})
    assert str(raised.value).startswith(cause.replace("1.5", "1.7"))
    recipe.write_text("method: gdan\ndata: {labeling_rate: 0.5}\n")
    with pytest.raises(UnknownFieldError, match=re.escape(f"recipe '{recipe}': unknown config field "
                                                          "'data.labeling_rate'. fix: did you mean 'data.labelling_rate'?")):
        load_recipe(recipe)
    recipe.write_text("steps: 3\n")
    with pytest.raises(ConfigError) as raised:
        load_recipe(recipe)
    assert str(raised.value).startswith(f"recipe '{recipe}' has no 'method' field"), "the file is not named twice"


def test_missing_checkpoint(tmp_path):
    proc = genfeat("evaluate", "--checkpoint", str(tmp_path / "none"), "--data", "ptb:test", "--tgt-len", "8",
                   "--mem-len", "8")
    assert_one_line_error(proc, f"checkpoint '{tmp_path / 'none'}' does not exist")
    (tmp_path / "empty").mkdir()
    proc = genfeat("evaluate", "--checkpoint", str(tmp_path / "empty"), "--task", "sst2")
    assert_one_line_error(proc, "not a model directory (no config.json)")


@pytest.mark.parametrize("args, needles", [
    (["evaluate", "--checkpoint", "x", "--bogus"], ["unrecognized arguments: --bogus", "see genfeat evaluate --help"]),
    (["tokenizer", "train", "--kind", "bpe", "--corpus", "c", "--vocab-size", "9", "--out", "o", "--nope", "1"],
     ["unrecognized arguments: --nope 1", "see genfeat tokenizer train --help"]),
    (["evaluate"], ["required: --checkpoint", "see genfeat evaluate --help"]),
    (["generate", "--checkpoint", "x", "--top-k", "many"], ["--top-k: invalid int value", "genfeat generate --help"]),
    (["rn"], ["invalid choice: 'rn'", "see genfeat --help"]),
])
def test_argument_errors_are_one_line(args, needles):
    assert_one_line_error(genfeat(*args), *needles)


def test_bad_device(tmp_path):
    args = ["--checkpoint", str(tmp_path / "none"), "--data", "ptb:test", "--tgt-len", "8", "--mem-len", "8"]
    assert_one_line_error(genfeat("evaluate", *args, "--device", "gpu"), "--device is 'gpu', not a device")
    if not torch.cuda.is_available():
        assert_one_line_error(genfeat("evaluate", *args, "--device", "cuda"), "CUDA is not available")


def test_debug_shows_traceback(tmp_path):
    proc = genfeat("run", str(tmp_path / "nope.yaml"), "--debug")
    assert proc.returncode != 0 and "Traceback" in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["evaluate", "--tgt-len", "0", "--mem-len", "8"], "--tgt-len is 0"),
    (["evaluate", "--tgt-len", "8", "--mem-len", "-3"], "--mem-len is -3"),
    (["evaluate", "--tgt-len", "8", "--mem-len", "8", "--batch-size", "0"], "--batch-size is 0"),
    (["generate", "--top-k", "0"], "--top-k is 0"),
    (["generate", "--temperature", "0"], "--temperature is 0.0"),
    (["generate", "--temperature", "nan"], "--temperature is nan"),
    (["generate", "--seed", "99999999999999999999999"], "a seed is an integer from 0 to 2**63 - 1"),
    (["generate", "--seed", "-1"], "a seed is an integer from 0 to 2**63 - 1, got -1"),
    (["recl", "--model", "a=x", "--contexts", "8", "16", "--r", "2"], "must be in (0, 1]"),
    (["recl", "--model", "a=x", "--contexts", "16", "8"], "not increasing"),
])
def test_degenerate_numbers_are_refused_before_any_work(tmp_path, args, needle):
    command, *rest = args
    data = [] if command == "generate" else ["--data", "ptb:test"]
    proc = genfeat(command, *rest, *data, *(["--checkpoint", str(tmp_path / "none")] if command != "recl" else []))
    assert_one_line_error(proc, needle)


@pytest.fixture
def tiny_checkpoint(tmp_path):
    """A small Transformer-XL over 50 bare ids, saved with its vocabulary (no training needed)."""
    import genfeat
    from genfeat.data.vocab import IdVocab
    from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

    torch.manual_seed(0)
    model = TransformerXLLMHeadModel(TransformerXLConfig(n_token=50, d_model=16, n_head=2, d_head=8, d_inner=32,
                                                         n_layer=1, mem_len=4))
    genfeat.save_pretrained(model, tmp_path / "ckpt", IdVocab(50))
    return tmp_path / "ckpt"


def test_data_the_model_cannot_score(tmp_path, tiny_checkpoint):
    import numpy as np

    np.save(tmp_path / "one.npy", np.array([3]))
    np.save(tmp_path / "big.npy", np.array([1, 2, 99]))
    base = ["evaluate", "--checkpoint", str(tiny_checkpoint), "--tgt-len", "4", "--mem-len", "4"]
    assert_one_line_error(genfeat(*base, "--data", str(tmp_path / "one.npy")), "leave nothing to predict")
    assert_one_line_error(genfeat(*base, "--data", str(tmp_path / "big.npy")), "token id 99")
    hf = tmp_path / "hf"
    assert genfeat("export", "--checkpoint", str(tiny_checkpoint), "--out", str(hf)).returncode == 0
    (hf / "vocab.json").unlink()  # no vocabulary: the ids are checked against the model itself
    assert_one_line_error(genfeat(*base[:2], str(hf), *base[3:], "--data", str(tmp_path / "big.npy")),
                          "but the model has 50 types")
    (hf / "model.safetensors").write_bytes((hf / "model.safetensors").read_bytes()[:100])
    assert_one_line_error(genfeat(*base[:2], str(hf), *base[3:], "--data", str(tmp_path / "one.npy")),
                          "corrupt or truncated")


def test_outputs_never_replace_what_they_should_not(tmp_path, tiny_checkpoint):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("keep me")
    assert_one_line_error(genfeat("export", "--checkpoint", str(tiny_checkpoint), "--out", str(run_dir)),
                          "holds other files")
    assert (run_dir / "notes.txt").read_text() == "keep me"
    (tmp_path / "afile").write_text("x")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    assert_one_line_error(genfeat("run", str(recipe), "--out", str(tmp_path / "afile")), "is an existing file")
    # an existing model directory is what export replaces
    assert genfeat("export", "--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "m")).returncode == 0
    assert genfeat("export", "--checkpoint", str(tiny_checkpoint), "--out", str(tmp_path / "m")).returncode == 0


@pytest.mark.parametrize("args", [
    ["run", "RECIPE", "--out", "afile/sub"],
    ["tokenizer", "train", "--kind", "bpe", "--corpus", "RECIPE", "--vocab-size", "50", "--out", "afile/sub"],
    ["evaluate", "--task", "sst2", "--checkpoint", "nope", "--predictions", "afile/x.tsv"],
    ["recl", "--model", "a=nope", "--data", "ptb:test", "--contexts", "8", "16", "--out", "afile"],
    ["export", "--checkpoint", "nope", "--out", "afile/sub"],
    ["generate-questions", "--checkpoint", "nope", "--paragraphs", "p.txt", "--out", "afile/q.jsonl"],
])
def test_a_file_in_the_way_of_an_output_is_refused_before_any_work(tmp_path, args):
    (tmp_path / "afile").write_text("")
    (tmp_path / "RECIPE").write_text(RECIPE)
    proc = genfeat(*args, cwd=tmp_path)
    assert_one_line_error(proc, "afile", "file")
    assert "nope" not in proc.stderr, "the output path is checked before the inputs are read"
    assert (tmp_path / "afile").read_text() == "" and sorted(p.name for p in tmp_path.iterdir()) == ["RECIPE", "afile"]


@pytest.mark.parametrize("error, needles", [
    (NotADirectoryError(20, "Not a directory", "OUT/afile/sub"), ["cannot use 'OUT/afile/sub': Not a directory",
                                                                   "('OUT/afile' is a file in the way)"]),
    (FileExistsError(17, "File exists", "OUT/afile"), ["cannot use 'OUT/afile': File exists",
                                                        "('OUT/afile' is a file in the way)"]),
    (PermissionError(13, "Permission denied", "OUT/ro"), ["cannot use 'OUT/ro': Permission denied",
                                                          "you may write to"]),
    (IsADirectoryError(21, "Is a directory", "OUT"), ["cannot use 'OUT': Is a directory", "not a folder"]),
])
def test_an_os_error_on_a_path_is_one_error_line(tmp_path, monkeypatch, capsys, error, needles):
    import genfeat.cli as cli

    (tmp_path / "afile").write_text("")
    error.filename = error.filename.replace("OUT", str(tmp_path))

    def fails(args, extra):
        raise error

    monkeypatch.setattr(cli, "cmd_export", fails)
    assert cli.main(["export", "--checkpoint", "c", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "fix: " in err, err
    for needle in needles:
        assert needle.replace("OUT", str(tmp_path)) in err, err
    with pytest.raises(type(error)):
        cli.main(["export", "--checkpoint", "c", "--out", str(tmp_path / "x"), "--debug"])


@pytest.mark.parametrize("recipe, what", [
    ("recipes/complement_gan/mnist_fm.yaml", "the complement GAN"),
    ("recipes/complement_gan/pixelcnn_mnist.yaml", "PixelCNN++ training"),
    ("recipes/gdan/gdan.yaml", "GDAN's gdan setting"),
    ("recipes/planetoid/cora_t.yaml", "Planetoid"),
    ("recipes/planetoid/citeseer_feat.yaml", "the graph baseline 'feat'"),
    ("recipes/word2vec/debug.yaml", "word2vec"),
])
def test_a_method_that_runs_in_one_process_refuses_torchrun_with_one_line(recipe, what, tmp_path):
    """WORLD_SIZE > 1 (torchrun's processes): one error line before any work, not the DDP wrapper's traceback
    (each of these failed so under ``torchrun --nproc_per_node 2``)."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "genfeat.cli", "run", recipe, "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "WORLD_SIZE": "2", "GENFEAT_DATA": str(tmp_path / "no_data")})
    assert_one_line_error(proc, f"{what} does not run under torchrun", "run it as one process")
    assert not (out / "last").exists() and not (out / "results.json").exists()


def test_a_reader_that_closes_stdout_early_ends_the_command_without_a_traceback(tmp_path):
    """``genfeat ... | head``: the reader closing the pipe ended in a BrokenPipeError traceback."""
    script = tmp_path / "chatty.py"
    script.write_text("import sys; from genfeat import cli\n"
                      "cli.cmd_export = lambda args, extra: [print('x' * 1000) for _ in range(10000)]\n"
                      "sys.exit(cli.main(['export', '--checkpoint', 'a', '--out', 'b']))\n")
    proc = subprocess.run(f"'{sys.executable}' '{script}' | head -c 10", shell=True, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout == "x" * 10
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr


def test_generate_questions_refuses_to_write_over_its_paragraphs(tmp_path, capsys):
    from genfeat.cli import main

    paragraphs = tmp_path / "paras.jsonl"
    paragraphs.write_text('{"context": "Paris is the capital of France."}\n')
    code = main(["generate-questions", "--checkpoint", str(tmp_path / "none"), "--paragraphs", str(paragraphs),
                 "--out", str(paragraphs)])
    err = capsys.readouterr().err
    assert code == 2 and "is the --paragraphs file, which the questions would replace" in err
    assert paragraphs.read_text() == '{"context": "Paris is the capital of France."}\n'


def _txl(path, words, **kw):
    import genfeat
    from genfeat.data.vocab import SymbolVocab
    from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel

    torch.manual_seed(0)
    vocab = SymbolVocab([*words, "<eos>"], "word")
    model = TransformerXLLMHeadModel(TransformerXLConfig(n_token=len(vocab), d_model=16, n_head=2, d_head=8,
                                                         d_inner=32, n_layer=1, mem_len=4, **kw))
    genfeat.save_pretrained(model, path, vocab)
    return path


def test_recl_refuses_models_of_other_vocabularies_and_a_name_given_twice(tmp_path, capsys):
    """The data is encoded once, with the first model's vocabulary: a model with another vocabulary of the same size
    was scored on ids that mean other tokens to it (a table, exit 0); a NAME given twice dropped the first model."""
    from genfeat.cli import main

    a = _txl(tmp_path / "a", [f"w{i}" for i in range(20)])
    b = _txl(tmp_path / "b", [f"v{i}" for i in range(20)])
    (tmp_path / "text.txt").write_text(" ".join(f"w{i % 20}" for i in range(400)) + "\n")
    common = ["--data", str(tmp_path / "text.txt"), "--contexts", "4", "8", "--seg-len", "4", "--out",
              str(tmp_path / "recl")]
    capsys.readouterr()
    assert main(["recl", "--model", f"a={a}", "--model", f"b={b}", *common]) == 2
    err = capsys.readouterr().err
    assert "model 'b' has another vocabulary (21 types) than model 'a' (21 types)" in err
    assert main(["recl", "--model", f"a={a}", "--model", f"a={a}", *common]) == 2
    assert "--model names 'a' twice" in capsys.readouterr().err
    assert not (tmp_path / "recl").exists()


def test_learned_positions_bound_the_segment_length(tmp_path, capsys):
    """absolute_learned models index a table of max_klen positions: longer segments were an IndexError /
    RuntimeError traceback (evaluate, recl, a recipe, generate's prompt); max_klen 0 and clamp_len below -1 are
    refused; generate reads a long prompt as several segments with memory."""
    from genfeat.cli import main
    from genfeat.generation import generate
    from genfeat.models.transformer_xl import TransformerXLConfig

    words = [f"w{i}" for i in range(20)]
    ckpt = _txl(tmp_path / "al", words, attn_type="absolute_learned", max_klen=8)
    (tmp_path / "text.txt").write_text(" ".join(f"w{i % 20}" for i in range(400)) + "\n")
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(ckpt), "--data", str(tmp_path / "text.txt"), "--tgt-len", "16",
                 "--mem-len", "4"]) == 2
    assert "--tgt-len is 16, but the model learned positions for segments of at most 8 tokens" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(ckpt), "--data", str(tmp_path / "text.txt"), "--tgt-len", "8",
                 "--mem-len", "4"]) == 0
    assert main(["recl", "--model", f"al={ckpt}", "--data", str(tmp_path / "text.txt"), "--contexts", "4", "8",
                 "--seg-len", "12", "--out", str(tmp_path / "recl")]) == 2
    assert "--seg-len is 12" in capsys.readouterr().err
    from genfeat.hub import load_checkpoint

    model, _ = load_checkpoint(ckpt)
    with pytest.raises(ValueError, match="a segment of 9 tokens is longer than the 8 learned positions"):
        model(torch.zeros(1, 9, dtype=torch.long))
    out = generate(model, torch.arange(20) % 20, 5, top_k=1)             # a 20-token prompt: 3 segments
    assert out.shape == (5,)
    assert main(["generate", "--checkpoint", str(ckpt), "--prompt", " ".join(words), "--length", "3"]) == 0
    for bad, needle in (({"max_klen": 0}, "max_klen must be >= 1"), ({"clamp_len": -5}, "clamp_len >= -1")):
        with pytest.raises(ValueError, match=needle):
            TransformerXLConfig(**bad)
    recipe = tmp_path / "al.yaml"
    recipe.write_text(RECIPE.replace("mem_len: 8}", "mem_len: 8, attn_type: absolute_learned, max_klen: 6}"))
    capsys.readouterr()
    assert main(["run", str(recipe), "--out", str(tmp_path / "run")]) == 2
    assert "data.tgt_len + data.ext_len is 8, but model.max_klen 6 learned positions" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    assert main(["run", str(recipe), "--out", str(tmp_path / "run2"), "--eval.clamp_len", "-5"]) == 2
    assert "eval.clamp_len must be >= -1" in capsys.readouterr().err


def test_a_recipe_may_not_set_train_seed_and_a_folder_is_not_a_recipe(tmp_path, capsys):
    """Every method replaces train.seed with the run's --seed: a recipe's value was silently ignored (the provenance
    record still showed it)."""
    from genfeat.cli import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    capsys.readouterr()
    assert main(["run", str(recipe), "--out", str(tmp_path / "out"), "--train.seed", "5"]) == 2
    assert "train.seed is set, but a run's seed is --seed" in capsys.readouterr().err
    recipe.write_text(RECIPE + "train: {seed: 3}\n")
    assert main(["run", str(recipe), "--out", str(tmp_path / "out")]) == 2
    assert "fix: drop train.seed and pass --seed N" in capsys.readouterr().err
    assert main(["run", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert f"config file '{tmp_path}' is a folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not (DATA / "wikitext-2").is_dir(), reason="needs WikiText-2 in GENFEAT_DATA")
def test_pretraining_errors_name_the_recipe_fields_and_a_resumed_run_counts_all_its_seconds(tmp_path, capsys):
    """A vocabulary size the corpus cannot fill names data.vocab_size (it named the tokenizer command's --vocab-size,
    which run does not take); an XLNet num_predict leaving no context is refused (it was cut to every token); the
    train_seconds of a resumed run count every invocation's training (they counted the last one's)."""
    from genfeat.cli import main
    from genfeat.framework.checkpoint import load_trainer_state
    from genfeat.runner import run_recipe

    capsys.readouterr()
    assert main(["run", "recipes/bert/debug.yaml", "--data.vocab_size", "100000", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "data.vocab_size 100000" in err and "--vocab-size" not in err
    assert main(["run", "recipes/xlnet/debug.yaml", "--objective.num_predict", "100", "--out", str(tmp_path / "x")]) == 2
    assert "objective.num_predict 100 is more than the 29 tokens a segment of data.seq_len 32 holds besides its special " \
        "tokens, so it would be cut to 29" in capsys.readouterr().err
    over = {"steps": 6, "train": {"eval_every": 0}, "zero_shot": {"examples": 8}}
    part = run_recipe("recipes/gpt/debug.yaml", {**over, "train": {"eval_every": 0, "stop_after_steps": 4}}, [0],
                      out_dir=tmp_path / "g", progress=False)
    state = load_trainer_state(tmp_path / "g" / "last")
    assert part["interrupted"] == 1.0 and state["seconds"] > 0
    state["seconds"] = 1000.0            # as if the first invocation had trained for 1,000 s: the total must hold them
    torch.save(state, tmp_path / "g" / "last" / "trainer_state.pt")
    done = run_recipe("recipes/gpt/debug.yaml", over, [0], out_dir=tmp_path / "g", progress=False, resume=True)
    assert 1000.0 < done["train_seconds"] < 1100.0


def test_an_empty_npy_file_is_one_error_line(tmp_path, tiny_checkpoint, capsys):
    from genfeat.cli import main

    (tmp_path / "empty.npy").write_bytes(b"")
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(tiny_checkpoint), "--data", str(tmp_path / "empty.npy"), "--tgt-len",
                 "4", "--mem-len", "4"]) == 2
    assert "empty.npy' is not a readable .npy array" in capsys.readouterr().err


def test_wrong_inputs_to_a_models_forward_are_one_clear_exception():
    """A list, float ids or another rank failed deep inside the models in torch's words ("'list' object has no
    attribute 'shape'", "Expected tensor for argument #1 'indices'", "too many values to unpack")."""
    from genfeat.models.bert import BertConfig, BertForMaskedLM
    from genfeat.models.gpt import GPTConfig, GPTLMHeadModel
    from genfeat.models.lstm_lm import LSTMLMConfig, LSTMLMHeadModel
    from genfeat.models.transformer_xl import TransformerXLConfig, TransformerXLLMHeadModel
    from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel

    models = [TransformerXLLMHeadModel(TransformerXLConfig(n_token=20, d_model=8, n_head=2, d_head=4, d_inner=16,
                                                           n_layer=1)),
              BertForMaskedLM(BertConfig(n_token=20, d_model=8, n_head=2, d_inner=16, n_layer=1, max_position=16)),
              XLNetLMHeadModel(XLNetConfig(n_token=20, d_model=8, n_head=2, d_head=4, d_inner=16, n_layer=1)),
              GPTLMHeadModel(GPTConfig(n_token=20, d_model=8, n_head=2, d_inner=16, n_layer=1, max_position=16)),
              LSTMLMHeadModel(LSTMLMConfig(n_token=20, d_model=8, d_hidden=8, max_position=16))]
    for model in models:
        with pytest.raises(TypeError, match="input_ids must be a torch tensor of token ids.*got list"):
            model([[1, 2, 3]])
        with pytest.raises(TypeError, match=r"input_ids must hold integer token ids \(torch.long\), got torch.float32"):
            model(torch.ones(2, 3))
    for model in models[:3]:
        with pytest.raises(ValueError, match=r"input_ids must be \[b, t\], got shape \(2, 3, 4\)"):
            model(torch.ones(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"input_ids must be \[\.\.\., t\], got shape \(\)"):
        models[-1](torch.tensor(3))


def test_a_checkpoint_of_another_architecture_is_named_with_its_article(tmp_path, capsys):
    """Messages built from an architecture's name said "a xlnet model" (and "a elmo", "a lstm_lm")."""
    from genfeat.cli import main
    from genfeat.hub import save_pretrained
    from genfeat.models.xlnet import XLNetConfig, XLNetLMHeadModel

    save_pretrained(XLNetLMHeadModel(XLNetConfig(n_token=20, d_model=8, n_head=2, d_head=4, d_inner=16, n_layer=1)),
                    tmp_path / "xlnet")
    capsys.readouterr()
    assert main(["generate", "--checkpoint", str(tmp_path / "xlnet")]) == 2
    assert (f"error: checkpoint '{tmp_path / 'xlnet'}' holds an xlnet model, not transformer_xl or gpt. "
            "fix: pass a transformer_xl or gpt checkpoint") in capsys.readouterr().err
    from genfeat.errors import with_article

    assert [with_article(name) for name in ("elmo", "lstm_lm", "XLNetForSequenceClassification", "OpenAIGPTModel",
                                            "gpt", "bert", "word2vec", "question_gen")] == [
        "an elmo", "an lstm_lm", "an XLNetForSequenceClassification", "an OpenAIGPTModel", "a gpt", "a bert",
        "a word2vec", "a question_gen"]


def test_wrong_inputs_to_elmo_are_one_clear_exception():
    """ELMo's forward had no input checks: a list, float ids or an id outside the character vocabulary failed in
    torch's words ("'list' object has no attribute 'dim'", "Expected tensor for argument #1 'indices'", "index out of
    range in self"), and word ids of another rank were reported as char_ids."""
    from genfeat.models.elmo import ElmoBiLM, ElmoConfig

    model = ElmoBiLM(ElmoConfig(n_token=20, n_char=10, max_chars=5, char_dim=4, filters=[(1, 4), (2, 4)], d_proj=8,
                                d_lstm=8, n_layer=1))
    spelled = torch.ones(2, 3, 5, dtype=torch.long)
    with pytest.raises(TypeError, match="char_ids must be a torch tensor of token ids.*got list"):
        model([[[1, 2, 3, 0, 0]]])
    with pytest.raises(TypeError, match=r"char_ids must hold integer token ids \(torch.long\), got torch.float32"):
        model(spelled.float())
    with pytest.raises(ValueError, match=r"char_ids must be \[b, t, c\], got shape \(3, 5\)"):
        model(spelled[0])
    with pytest.raises(ValueError, match=r"char_ids hold ids in \[1, 10\], outside the vocabulary \[0, 10\)"):
        model(spelled.index_fill(2, torch.tensor([4]), 10))
    with pytest.raises(TypeError, match="word_ids must be a torch tensor of token ids.*got list"):
        model(word_ids=[[1, 2]])
    with pytest.raises(TypeError, match=r"word_ids must hold integer token ids \(torch.long\), got torch.float32"):
        model(spelled, torch.ones(2, 3), score_words=True)
    with pytest.raises(ValueError, match=r"word_ids must be \[b, t\], got shape \(3,\)"):
        model(word_ids=torch.ones(3, dtype=torch.long))
    assert model(spelled).layers.shape == (2, 2, 3, 16)


def test_wrong_images_to_pixelcnn_are_one_clear_exception():
    """PixelCNN's forward had no input checks: a list, integer pixels, another rank or channel count failed in torch's
    words, and 8-bit values (0..255) were scored as if in [-1, 1]."""
    from genfeat.models.pixelcnn import PixelCNN, PixelCNNConfig

    model = PixelCNN(PixelCNNConfig(image_shape=(1, 6, 6), filters=4, blocks=1, mixtures=2))
    images = torch.rand(2, 1, 6, 6) * 2 - 1
    with pytest.raises(TypeError, match=r"x must be a float tensor of images \[b, 1, h, w\], got list"):
        model(images.tolist())
    with pytest.raises(TypeError, match=r"x must hold float pixel values in \[-1, 1\], got torch.uint8"):
        model.log_prob(images.to(torch.uint8))
    with pytest.raises(ValueError, match=r"x must be \[b, 1, h, w\], got shape \(1, 6, 6\)"):
        model(images[0])
    with pytest.raises(ValueError, match=r"x must be \[b, 1, h, w\], got shape \(2, 3, 6, 6\)"):
        model(images.expand(2, 3, 6, 6))
    with pytest.raises(ValueError, match=r"x must hold pixel values in \[-1, 1\] \(2v/255 - 1 for an 8-bit value v\), "
                                         r"got values in \[0, 255\]"):
        model.log_prob(torch.linspace(0, 255, 72).view(2, 1, 6, 6))
    assert model.log_prob(images).shape == (2,)
