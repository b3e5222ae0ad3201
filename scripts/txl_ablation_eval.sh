#!/usr/bin/env bash
# Table 2.6 at CPU scale: evaluate the four PTB models (recipes/transformer_xl/ptb*.yaml, trained
# into runs/) at several attention lengths, then the RECL of the group. Writes runs/ablation/.
set -euo pipefail
cd "$(dirname "$0")/.."
export GENFEAT_DATA=${GENFEAT_DATA:-../shared/data}
out=runs/ablation
mkdir -p "$out"
: > "$out/eval.jsonl"
for model in ptb ptb_no_recurrence ptb_absolute ptb_shaw; do
  for mem in 0 32 64 128 256 448; do
    .venv/bin/genfeat evaluate --checkpoint "runs/$model/final" --data ptb:valid --tgt-len 64 --mem-len "$mem" \
      --batch-size 10 --threads "${THREADS:-1}" --json | tail -n 1 | sed "s/^{/{\"model\": \"$model\", /" >> "$out/eval.jsonl"
  done
done
.venv/bin/genfeat recl --model xl=runs/ptb/final --model no_recurrence=runs/ptb_no_recurrence/final \
  --model absolute=runs/ptb_absolute/final --model shaw=runs/ptb_shaw/final \
  --data ptb:valid --contexts 16 32 64 128 256 --max-tokens 20000 --out "$out/recl" --json | tail -n 1 > "$out/recl.json"
