#!/usr/bin/env bash
# Create chemprop 2.3.x's own CPU-only virtual environment for the peer benchmark.
#
# chemprop lives in its own venv (never siggate's): its lightning/torch pins
# must not disturb siggate's, and the benchmark calls its CLI as a subprocess.
#
#   CHEMPROP_VENV=/path/to/venv bash benchmarks/peers/setup_chemprop.sh
#
# Default venv: ~/.cache/siggate/peers/chemprop-venv (outside the repo).
# torch is installed FIRST and pinned to the 2.13.0 CPU wheel; an unpinned
# torch would pull a multi-GB CUDA build in as chemprop's dependency.
set -euo pipefail

VENV="${CHEMPROP_VENV:-$HOME/.cache/siggate/peers/chemprop-venv}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${CHEMPROP_TORCH:-torch==2.13.0}"
CHEMPROP_SPEC="${CHEMPROP_SPEC:-chemprop>=2.3,<2.4}"

case "$(cd "$(dirname "$0")/../.." && pwd)" in
  "$(mkdir -p "$VENV" && cd "$VENV" && pwd)"*) echo "refusing: $VENV is inside the repository" >&2; exit 2 ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
# On this project's machines pip's find-links holds the 2.13.0+cpu wheel, so the
# pin resolves to it; elsewhere set CHEMPROP_TORCH (e.g. to a CPU wheel file).
"$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
"$VENV/bin/python" -m pip install -q "$CHEMPROP_SPEC" "$TORCH_SPEC"
"$VENV/bin/python" - <<'PY'
import chemprop, torch
print(f"chemprop {chemprop.__version__} (torch {torch.__version__}, cuda={torch.cuda.is_available()})")
PY
echo "venv: $VENV"
