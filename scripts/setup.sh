#!/usr/bin/env bash
# Create .venv and install genfeat with torch 2.13.0: the CPU build where pip finds it (this project's machines
# hold it on local disk); on a machine whose pip reads PyPI, whose Linux torch is the CUDA build, set
# GENFEAT_TORCH_INDEX=https://download.pytorch.org/whl/cpu to install torch from PyTorch's CPU index instead.
# Idempotent: a second call only checks that the environment is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q --upgrade pip
  # torch first and pinned, so the project's torch range is already satisfied by the CPU wheel.
  .venv/bin/pip install -q ${GENFEAT_TORCH_INDEX:+--index-url "$GENFEAT_TORCH_INDEX"} "torch==2.13.0"
fi
# tensorboard: so the TensorBoard test runs in CI instead of being skipped
extras=${GENFEAT_EXTRAS:-test,graph,tensorboard}
.venv/bin/pip install -q -e ".[${extras}]"
