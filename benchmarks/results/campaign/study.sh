#!/usr/bin/env bash
# A comparison campaign that outlives sessions: siggate compare runs from a git worktree at a
# fixed commit (so that later work does not change the code under it), in the background,
# resuming finished and interrupted runs. From the repository root:
#
#   bash benchmarks/results/campaign/study.sh resume NAME     # (re)start; JOBS=2 for two runs at once,
#                                                             # FOREGROUND=1 to wait for it (benchmarks/lanes.sh)
#   bash benchmarks/results/campaign/study.sh snapshot NAME   # results so far -> this folder (trains nothing)
#
# benchmarks/results/campaign/NAME/study.conf sets COMMIT (the fixed code) and PARTS, a bash
# array of "SUBDIR|compare arguments" run one after the other, each into STUDY/NAME/SUBDIR
# (SUBDIR "." for one part). STUDY is $STUDY_DIR or .study/ in the clone (git-ignored: the
# worktree wt-COMMIT with its venv, and every run's checkpoints, so an interrupted run resumes
# wherever the clone persists). resume copies the finished runs committed under NAME/ back into
# STUDY first (compare skips them); snapshot copies results.json, results.md, val_curves.png and
# each finished run's metrics.json, config.yaml, log.csv and mad.json (never checkpoints) into NAME/. The
# numbers come from the study's commit; val_curves.png is redrawn from them by this checkout's
# siggate when its .venv exists, so a campaign's plot gains later plotting fixes. study.conf may
# also set ANALYZE, a bash array of `siggate analyze` commands that read a compare folder
# (ANALYZE=(mad): each trained model's last-layer MAD); snapshot runs each with this checkout's
# siggate (its .venv, required then) on every part's STUDY folder, where the checkpoints are,
# before copying, so that they add to its results.json and results.md; a run measured once keeps
# its measurement (mad.json), so a run resumed without its checkpoints (a fresh clone) still counts.
set -euo pipefail
ACTION=${1:?resume or snapshot}
NAME=${2:?campaign name, a folder of benchmarks/results/campaign}
ROOT=$(git rev-parse --show-toplevel)
STUDY=${STUDY_DIR:-$ROOT/.study}
HERE=$ROOT/benchmarks/results/campaign/$NAME
ANALYZE=()
# shellcheck source=/dev/null
source "$HERE/study.conf"
WT=$STUDY/wt-$COMMIT
export SIGGATE_DATA=${SIGGATE_DATA:-$ROOT/../shared/data}

# shellcheck source=benchmarks/worktree.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../worktree.sh"
pinned_worktree "$WT" "$COMMIT"  # made the first time; an install cut short is done again

outdir() { [ "$1" = . ] && echo "$STUDY/$NAME" || echo "$STUDY/$NAME/$1"; }

compare_cmds() {  # one "siggate compare ..." line per part; $1: extra arguments
  for part in "${PARTS[@]}"; do
    echo "siggate compare ${part#*|} $1 --threads 1 --out $(outdir "${part%%|*}") --no-progress"
  done
}

case $ACTION in
  resume)
    for part in "${PARTS[@]}"; do
      sub=${part%%|*}; out=$(outdir "$sub")
      mkdir -p "$out/runs"
      if [ -d "$HERE/$sub/runs" ]; then cp -rn "$HERE/$sub/runs/." "$out/runs/"; fi
    done
    if [ "${FOREGROUND:-0}" = 1 ]; then  # in a queue of long runs (benchmarks/lanes.sh): run here, then return
      ( cd "$WT" && . .venv/bin/activate && bash -c "$(compare_cmds "--jobs ${JOBS:-1}" | paste -sd';')" )
    else
      ( cd "$WT" && . .venv/bin/activate && nohup bash -c "$(compare_cmds "--jobs ${JOBS:-1}" | paste -sd';')" \
          >> "$STUDY/$NAME.log" 2>&1 & echo "campaign $NAME restarted (pid $!), log: $STUDY/$NAME.log" )
    fi
    ;;
  snapshot)
    ( cd "$WT" && . .venv/bin/activate && bash -c "$(compare_cmds "--jobs 1 --aggregate-only" | paste -sd';')" )
    if [ ${#ANALYZE[@]} -gt 0 ] && [ ! -x "$ROOT/.venv/bin/python" ]; then
      echo "error: study.conf sets ANALYZE=(${ANALYZE[*]}), which runs this checkout's siggate: create $ROOT/.venv" >&2
      exit 2
    fi
    for part in "${PARTS[@]}"; do
      dir=$(outdir "${part%%|*}")
      if "$ROOT/.venv/bin/python" -c 'import sys; from siggate.files import folder_busy; sys.exit(not folder_busy(sys.argv[1]))' \
          "$dir"; then  # its comparison still runs (and holds the folder): measured at a later snapshot
        echo "$dir: its comparison is running; ANALYZE=(${ANALYZE[*]}) is left for a snapshot after it"
        continue
      fi
      for analysis in "${ANALYZE[@]}"; do  # this checkout's code on the study's runs (checkpoints included)
        "$ROOT/.venv/bin/python" -m siggate analyze "$analysis" "$dir" --threads 1 --no-progress
      done
    done
    for part in "${PARTS[@]}"; do
      sub=${part%%|*}; src=$(outdir "$sub"); dst=$HERE/$sub
      mkdir -p "$dst"
      cp "$src/results.json" "$src/results.md" "$dst/"
      if [ -f "$src/val_curves.png" ]; then
        cp "$src/val_curves.png" "$dst/"
        if [ -x "$ROOT/.venv/bin/python" ]; then  # the plot in this checkout's style; its numbers are results.json's
          "$ROOT/.venv/bin/python" -c 'import json, sys; from pathlib import Path
from siggate.train.compare import plot_val_curves
plot_val_curves(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2]))' "$dst/results.json" \
            "$dst/val_curves.png" || echo "warning: val_curves.png not redrawn; the study's own plot is kept" >&2
        fi
      fi
      for m in "$src"/runs/*/seed*/metrics.json; do
        [ -f "$m" ] || continue
        run=$(dirname "$m"); rel=${run#"$src"/}
        mkdir -p "$dst/$rel"
        cp "$run/metrics.json" "$run/config.yaml" "$run/log.csv" "$dst/$rel/"
        if [ -f "$run/mad.json" ]; then cp "$run/mad.json" "$dst/$rel/"; fi  # ANALYZE=(mad)'s, kept with the run
      done
    done
    echo "snapshot of $NAME written to $HERE"
    ;;
  *) echo "unknown action $ACTION: resume or snapshot" >&2; exit 2 ;;
esac
