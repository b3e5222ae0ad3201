#!/usr/bin/env bash
# Set up, then run the test suite (CPU, tiny seeded configs and short runs on ../shared/data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export GENFEAT_DATA=${GENFEAT_DATA:-../shared/data}
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
# pytest exits 5 when it collected no tests: that is a broken suite here, not a pass.
if [[ $rc -eq 5 ]]; then echo "pytest collected no tests" >&2; exit 1; fi
exit $rc
