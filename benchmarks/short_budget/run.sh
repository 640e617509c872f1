#!/usr/bin/env bash
# Short-budget CPU benchmark (issue "Benchmark datasets", item 7): ogbg-molhiv and Peptides-func,
# gate none (GraphGPS) vs elementwise (SigGate-GT), seeds 0,1,2, run one after the other.
#
# Usage (from the repository root):
#   benchmarks/short_budget/run.sh DATASET BUDGET [EXTRA --set ARGS...]
# e.g.
#   benchmarks/short_budget/run.sh molhiv 1 --set model.layers=2
#
# Each run writes benchmarks/results/short_budget/runs/DATASET/GATE/seedS/ (not in git) plus
# command.txt (the exact command) and wall.txt (wall seconds incl. start-up and data loading).
# A run whose metrics.json exists is skipped. Then: python benchmarks/short_budget/summarize.py
set -u
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
DATASET=$1; BUDGET=$2; shift 2
EXTRA=("$@")
export SIGGATE_CACHE=${SIGGATE_CACHE:-/tmp/siggate-test-cache}
SIGGATE=${SIGGATE:-/work/venv/bin/siggate}
BASE=benchmarks/results/short_budget/runs/$DATASET
for seed in 0 1 2; do
  for gate in none elementwise; do
    out=$BASE/$gate/seed$seed
    if [ -f "$out/metrics.json" ]; then echo "skip $out (done)"; continue; fi
    mkdir -p "$out"
    cmd=(env SIGGATE_CACHE="$SIGGATE_CACHE" "$SIGGATE" train --config "$DATASET" --budget "$BUDGET" --seed "$seed"
         --set "model.gate=$gate" "${EXTRA[@]}" --out "$out" --no-progress)
    printf '%q ' "${cmd[@]}" | sed 's/ $//' > "$out/command.txt"
    # the package is installed editable and others edit src/: record what the run imported
    { git rev-parse HEAD; git status --porcelain -- src; echo "diff sha1: $(git diff -- src | sha1sum | cut -d' ' -f1)"; } > "$out/src_state.txt"
    echo "== $(date +%T) $(cat "$out/command.txt")"
    t0=$(date +%s.%N)
    "${cmd[@]}" > "$out/stdout.txt" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    echo "$t0 $t1" | awk '{printf "%.1f\n", $2 - $1}' > "$out/wall.txt"
    echo "$rc" > "$out/rc.txt"
    echo "   rc=$rc wall=$(cat "$out/wall.txt")s"; tail -n 3 "$out/stdout.txt"
  done
done
