#!/usr/bin/env bash
# Restart the ZINC study (issue 11) on this machine, in the background. Run from the repository
# root: bash benchmarks/results/campaign/zinc/resume.sh [STUDY_DIR]   (JOBS=2 for two runs at once)
# Creates the study's worktree at the fixed commit and its venv when missing, copies the finished
# runs committed here into the study's output folder (compare skips them), and starts compare,
# which resumes any run that has a last.pt. Log: STUDY_DIR/zinc.log
set -euo pipefail
STUDY=${1:-$(git rev-parse --show-toplevel)/.study}
COMMIT=d4e68f1
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$STUDY/zinc/runs"
if [ ! -d "$STUDY/wt" ]; then
  git worktree add --detach "$STUDY/wt" "$COMMIT"
  ( cd "$STUDY/wt" && python3 -m venv .venv && . .venv/bin/activate && pip install -q -r requirements-cpu.txt -e . )
fi
[ -d "$HERE/runs" ] && cp -rn "$HERE/runs/." "$STUDY/zinc/runs/"
cd "$STUDY/wt" && . .venv/bin/activate
SIGGATE_DATA=${SIGGATE_DATA:-/work/shared/data} nohup siggate compare --config zinc --seeds 0-9 \
  --gates none,headwise,elementwise,none@matched-ffn --budget 60 --jobs "${JOBS:-1}" --threads 1 \
  --out "$STUDY/zinc" --no-progress >> "$STUDY/zinc.log" 2>&1 &
echo "study restarted (pid $!), log: $STUDY/zinc.log"
