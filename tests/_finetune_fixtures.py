"""Fine-tuning settings shared by tests/test_finetune_runner.py and tests/test_finetune_hf.py."""

XLNET_SQUAD = {
    "init": None, "backbone": "xlnet", "span_end": "start_conditioned", "vocab_size": 400, "steps": 3, "head_dropout": 0.0,
    "model": {"d_model": 32, "n_layer": 1, "n_head": 2, "d_head": 16, "d_inner": 64, "dropout": 0.0, "dropatt": 0.0},
    "data": {"task": "squad_split", "max_train_examples": 8, "max_eval_examples": 6, "batch_size": 4,
             "eval_batch_size": 8, "max_len": 64, "doc_stride": 32, "max_query_len": 16, "test_split": None},
    "train": {"eval_every": 0, "progress": False}}
"""Overrides of recipes/finetune/squad_xlnet.yaml: a random XLNet with XLNet's SQuAD head (end scores given the
start) fine-tuned for three steps on 8 SQuAD article-split questions, scored on 6 (the run test_finetune_hf.py
exports as XLNetForQuestionAnswering)."""
