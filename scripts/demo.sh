#!/usr/bin/env bash
# The main job: set up, then a short Transformer-XL training, evaluation and generation on
# tiny shakespeare (character level), a few minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export GENFEAT_DATA=${GENFEAT_DATA:-../shared/data}
out=runs/demo
.venv/bin/genfeat run recipes/transformer_xl/demo.yaml --out "$out" --overwrite   # a rerun replaces the last demo
.venv/bin/genfeat evaluate --checkpoint "$out/final" --data tinyshakespeare:val --tgt-len 128 --mem-len 128 --json
.venv/bin/genfeat generate --checkpoint "$out/final" --prompt "ROMEO:" --length 300 --seed 0
