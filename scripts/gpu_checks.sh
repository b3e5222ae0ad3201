#!/usr/bin/env bash
# The checks that need a CUDA GPU, for a session that has one: the CUDA tests (tests/test_cuda.py: Transformer-XL
# and the complement GAN; tests/test_cuda_backbones.py: XLNet, BERT, GPT-1 and the pretraining, fine-tuning, ELMo
# and GDAN debug recipes) and the train benchmarks against Hugging Face on the GPU in fp32 and bf16
# (benchmarks/{xlnet,bert,gpt}_train_vs_hf.py --device cuda) and GPT-1's generation benchmark
# (benchmarks/gpt_generate_vs_hf.py --device cuda, fp32).
#
#   bash scripts/gpu_checks.sh {tests|bench|all} OUTDIR
#
# Uses the python3 on PATH, which must hold a CUDA build of torch, transformers and genfeat's dependencies (genfeat
# itself is taken from src/); GENFEAT_DATA as for the tests. Writes OUTDIR/env.txt, OUTDIR/pytest.log and
# OUTDIR/bench.log (one JSON line per benchmark after its "== name precision" line; each invocation starts them
# afresh; a relative OUTDIR is under the directory it is called from). Exits non-zero when a test or a benchmark
# failed, and 2 before any work where python3's torch sees no CUDA GPU (the CUDA tests would all skip).
set -uo pipefail
what=${1:?usage: scripts/gpu_checks.sh tests|bench|all OUTDIR}
out=${2:?usage: scripts/gpu_checks.sh tests|bench|all OUTDIR}
case $what in tests|bench|all) ;; *) echo "scripts/gpu_checks.sh: unknown stage '$what' (tests, bench or all)" >&2; exit 2;; esac
out=$(realpath -m "$out")
cd "$(dirname "$0")/.."
if ! python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "scripts/gpu_checks.sh: python3's torch sees no CUDA GPU; run it where one is (a CUDA build of torch)" >&2
  exit 2
fi
mkdir -p "$out"
rm -f "$out/env.txt" "$out/bench.log"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
rc=0
{ nvidia-smi; python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'transformers', transformers.__version__, torch.cuda.get_device_name())"; } > "$out/env.txt" 2>&1
if [[ $what != bench ]]; then
  timeout "${GPU_TEST_SECONDS:-400}" python3 -m pytest -q -rs -p no:cacheprovider tests/test_cuda.py \
    tests/test_cuda_backbones.py > "$out/pytest.log" 2>&1 || rc=1
fi
if [[ $what != tests ]]; then
  for bench in xlnet bert gpt; do
    for precision in fp32 bf16; do
      echo "== $bench $precision" >> "$out/bench.log"
      timeout "${GPU_BENCH_SECONDS:-150}" python3 "benchmarks/${bench}_train_vs_hf.py" --device cuda \
        --precision "$precision" >> "$out/bench.log" 2>&1 || rc=1
    done
  done
  echo "== gpt_generate fp32" >> "$out/bench.log"
  timeout "${GPU_BENCH_SECONDS:-150}" python3 benchmarks/gpt_generate_vs_hf.py --device cuda >> "$out/bench.log" 2>&1 || rc=1
fi
exit $rc
