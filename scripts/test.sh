#!/usr/bin/env bash
# Set up, then run the test suite (CPU, tiny seeded configs and short runs on ../shared/data) under .venv's
# transformers 4.37.2; then, when no pytest arguments are given, the Hugging Face interop tests (-m hf_interop)
# again under transformers 5.x in .venv-hf5 (scripts/setup_hf5.sh). Fails when either run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [[ $# -eq 0 ]]; then bash scripts/setup_hf5.sh; fi
export GENFEAT_DATA=${GENFEAT_DATA:-../shared/data}

run_pytest() {
  local rc=0
  "$@" || rc=$?
  # pytest exits 5 when it collected no tests: that is a broken suite here, not a pass.
  if [[ $rc -eq 5 ]]; then echo "pytest collected no tests: $*" >&2; return 1; fi
  return $rc
}

rc=0
run_pytest .venv/bin/python -m pytest -q "$@" || rc=$?
if [[ $# -eq 0 ]]; then
  echo "== Hugging Face interop tests under transformers 5.x (.venv-hf5)"
  hf5=0
  run_pytest env PYTHONPATH="$PWD/src" HF_HUB_OFFLINE=1 .venv-hf5/bin/python -m pytest -q -rs -m hf_interop || hf5=$?
  if [[ $rc -eq 0 ]]; then rc=$hf5; fi
fi
exit $rc
