#!/usr/bin/env bash
# Short-budget CPU benchmark (issue "Benchmark datasets", item 7): ogbg-molhiv and Peptides-func,
# gate none (GraphGPS) vs elementwise (SigGate-GT), seeds 0,1,2, run one after the other.
#
# Usage (from anywhere in the repository, with siggate's environment active):
#   benchmarks/short_budget/run.sh DATASET BUDGET [EXTRA siggate compare ARGS...]
# e.g.
#   benchmarks/short_budget/run.sh molhiv 1 --set model.layers=1
#
# The runs are one `siggate compare` (the study API: a finished run is skipped, an interrupted
# one resumes): benchmarks/results/short_budget/runs/DATASET/runs/GATE/seedS/ (not in git), each
# with its train.log, whose first line is the exact command. Then: python benchmarks/short_budget/summarize.py
# The siggate that runs is the one of `python` on PATH (override with PYTHON=/path/to/python).
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
DATASET=$1; BUDGET=$2; shift 2
exec "${PYTHON:-python}" -m siggate compare --config "$DATASET" --budget "$BUDGET" --gates none,elementwise --seeds 0-2 \
  --jobs 1 --threads 1 --no-progress --out "benchmarks/results/short_budget/runs/$DATASET" "$@"
