# shellcheck shell=bash
# Sourced, not run: the one way the long-run scripts (benchmarks/lanes.sh, the campaigns'
# study.sh) make a git worktree at a pinned commit with its own venv.
#
#   pinned_worktree FOLDER COMMIT [WHEEL...]
#
# FOLDER gets the worktree (git-ignored under .study/) and FOLDER/.venv siggate's CPU install
# (requirements-cpu.txt, then `pip install -e .`); each WHEEL (e.g. MoleculeACE==3.0.0, a data
# wheel) is installed without its dependencies. FOLDER/.venv/installed, written after each step,
# lists what is in: an install cut short is done again, a wheel another script wants is added,
# and a venv made before the list existed counts as installed once it imports siggate and its
# main dependencies. Scripts that share a commit install under one lock. Install output goes to stderr, nothing to stdout.
# The caller sets ROOT (the repository the worktree belongs to). Every step is checked, since
# lanes.sh calls it where `set -e` is off (`pinned_worktree ... || return 1`).
pinned_worktree() {
  local wt=$1 commit=$2; shift 2
  local mark=$wt/.venv/installed
  mkdir -p "$(dirname "$wt")" || return 1
  (
    flock 9 || exit 1
    if [ ! -f "$mark" ] && [ -x "$wt/.venv/bin/python" ] && "$wt/.venv/bin/python" -I -c \
        'import siggate.cli, torch, torch_geometric, rdkit, pytest' > /dev/null 2>&1; then
      echo base > "$mark" || exit 1  # made by these scripts before they kept the list
    fi
    if [ ! -f "$mark" ]; then
      if [ ! -e "$wt/.git" ]; then
        git -C "$ROOT" worktree prune >&2 && git -C "$ROOT" worktree add --detach "$wt" "$commit" >&2 || exit 1
      fi
      ( cd "$wt" && python3 -m venv .venv && .venv/bin/pip install -q -r requirements-cpu.txt -e . ) >&2 || exit 1
      echo base > "$mark" || exit 1
    fi
    for wheel in "$@"; do
      grep -qxF "$wheel" "$mark" && continue
      "$wt/.venv/bin/pip" install -q --no-deps "$wheel" >&2 || exit 1
      echo "$wheel" >> "$mark" || exit 1
    done
  ) 9> "$wt.install.lock"
}
