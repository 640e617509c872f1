#!/usr/bin/env bash
# Snapshot of the ZINC study (issue 11) into this folder: results of the runs finished so far
# (siggate compare --aggregate-only, nothing is trained) and each finished run's small files
# (metrics.json, config.yaml, log.csv; never checkpoints). Run from the repository root:
#   bash benchmarks/results/campaign/zinc/snapshot.sh [STUDY_DIR]
# STUDY_DIR holds the study's git worktree (wt/, at the fixed commit) and its output (zinc/).
set -euo pipefail
STUDY=${1:-$(git rev-parse --show-toplevel)/.study}
HERE=$(cd "$(dirname "$0")" && pwd)
( cd "$STUDY/wt" && . .venv/bin/activate && SIGGATE_DATA=${SIGGATE_DATA:-/work/shared/data} \
  siggate compare --config zinc --seeds 0-9 --gates none,headwise,elementwise,none@matched-ffn \
    --budget 60 --jobs 1 --threads 1 --out "$STUDY/zinc" --no-progress --aggregate-only )
cp "$STUDY/zinc/results.json" "$STUDY/zinc/results.md" "$HERE/"
[ -f "$STUDY/zinc/val_curves.png" ] && cp "$STUDY/zinc/val_curves.png" "$HERE/"
for m in "$STUDY"/zinc/runs/*/seed*/metrics.json; do
  [ -f "$m" ] || continue
  run=$(dirname "$m"); rel=${run#"$STUDY/zinc/"}
  mkdir -p "$HERE/$rel"
  cp "$run/metrics.json" "$run/config.yaml" "$run/log.csv" "$HERE/$rel/"
done
echo "snapshot written to $HERE"
