#!/usr/bin/env bash
# Long MoleculeACE runs from a git worktree at a fixed commit, in the background, resuming: rows
# already "ok" in results/results.json are skipped, so rerunning this after a stop picks up where
# the last run ended. From the repository root:
#
#   COMMIT=1e81f55 bash benchmarks/moleculeace/resume.sh --tools siggate --seeds 0,1,2 [run.py args]
#
# The worktree and its venv live in .study/moleculeace-wt-COMMIT (git-ignored); the rows go into
# this checkout's results/results.json (updated under a lock, so several of these may run at once).
set -euo pipefail
COMMIT=${COMMIT:?the fixed commit to run, e.g. COMMIT=1e81f55}
ROOT=$(git rev-parse --show-toplevel)
STUDY=${STUDY_DIR:-$ROOT/.study}
WT=$STUDY/moleculeace-wt-$COMMIT
# shellcheck source=benchmarks/worktree.sh
source "$(dirname "${BASH_SOURCE[0]}")/../worktree.sh"
pinned_worktree "$WT" "$COMMIT" MoleculeACE==3.0.0  # made the first time; an install cut short is done again
LOG=$STUDY/moleculeace-$(date +%Y%m%d-%H%M%S).log
( cd "$WT" && . .venv/bin/activate && nohup ${NICE:+nice -n "$NICE"} python benchmarks/moleculeace/run.py \
    --results "$ROOT/benchmarks/moleculeace/results/results.json" "$@" >> "$LOG" 2>&1 &
  echo "moleculeace runs started at $COMMIT (pid $!), log: $LOG" )
