#!/usr/bin/env bash
# Create .venv-hf5: transformers 5.x (scripts/requirements-hf5.txt) over .venv, whose torch and other packages
# it reuses through a .pth file that puts .venv's site-packages after its own, so no second torch is installed.
# scripts/test.sh runs the Hugging Face interop tests (-m hf_interop) in it with PYTHONPATH=src, besides .venv's
# transformers 4.37.2, the last release with Transformer-XL. Needs .venv (scripts/setup.sh).
# Idempotent: a second call only checks that the environment is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-hf5
REQ=scripts/requirements-hf5.txt
if [[ ! -x .venv/bin/python ]]; then
  echo "setup_hf5: .venv is missing; run scripts/setup.sh first" >&2
  exit 1
fi
want=$(sed -n 's/^transformers==//p' "$REQ")
stamp="$(sha256sum "$REQ" | cut -d' ' -f1) $(.venv/bin/python -c 'from importlib.metadata import version; print(version("torch"))')"
check() {  # without importing torch (seconds): where each package is found, and transformers' version
  "$VENV/bin/python" - "$want" <<'PY'
import sys
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

own, base = Path(".venv-hf5").resolve(), Path(".venv").resolve()
assert version("transformers") == sys.argv[1], f"transformers {version('transformers')}, not {sys.argv[1]}"
for name, home in (("transformers", own), ("tokenizers", own), ("huggingface_hub", own), ("torch", base)):
    origin = Path(find_spec(name).origin).resolve()
    assert home in origin.parents, f"{name} from {origin}, not from {home}"
PY
}
if [[ -f $VENV/.genfeat-stamp && $(cat "$VENV/.genfeat-stamp") == "$stamp" ]] && check 2>/dev/null; then
  exit 0
fi
if [[ ! -x $VENV/bin/python ]]; then
  .venv/bin/python -m venv "$VENV"  # .venv's interpreter, which its compiled packages were built for
fi
"$VENV/bin/python" - <<'PY'
import os
import sysconfig
from pathlib import Path

own = Path(sysconfig.get_paths()["purelib"])
base = Path(".venv").resolve() / own.relative_to(Path(sysconfig.get_paths()["data"]))
# a relative line: the two venvs may move together
(own / "genfeat-base-venv.pth").write_text(os.path.relpath(base, own) + "\n")
PY
# pip sees .venv's packages through the .pth: it adds only what transformers 5 needs beyond them
"$VENV/bin/pip" install -q -r "$REQ"
check
echo "$stamp" > "$VENV/.genfeat-stamp"
