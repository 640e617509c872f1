"""``benchmarks/worktree.sh``: the pinned worktree's venv is installed once, a wheel another script
wants is added without installing the rest again, an install cut short is not counted, and a venv
made before the list existed counts once it imports siggate. pip stands in as a logging script, so
nothing is downloaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _shims(tmp_path: Path, python3: str = "exit 1") -> Path:
    """python3 and git on PATH that log their arguments and run ``python3`` / fail, so that no real
    venv or worktree is ever made here."""
    shim = tmp_path / "shim"
    shim.mkdir(exist_ok=True)
    for name, body in (("python3", python3), ("git", "exit 1")):
        (shim / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path / "pip.log"}\n{body}\n')
        (shim / name).chmod(0o755)
    return shim


def _call(tmp_path: Path, *wheels: str, python3: str = "exit 1") -> subprocess.CompletedProcess:
    """``pinned_worktree`` as lanes.sh calls it: its status tested by ``||``, where ``set -e`` is
    off (a failure must come back as its return code, 7 here)."""
    script = f'set -euo pipefail; export PATH={_shims(tmp_path, python3)}:$PATH; ROOT={tmp_path}; ' \
             f'source {ROOT / "benchmarks/worktree.sh"}; ' \
             f'pinned_worktree {tmp_path / "wt-abc"} abc {" ".join(wheels)} || exit 7'
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout == ""  # lanes.sh's worktree() prints the path on stdout after it
    return proc


def _venv(tmp_path: Path, pip_exit: int = 0, python: str = "exit 1") -> Path:
    """A stand-in venv whose pip logs its arguments (and exits ``pip_exit``) and whose python runs ``python``."""
    bin_dir = tmp_path / "wt-abc" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "pip.log"
    for name, body in (("pip", f'echo "$*" >> {log}; exit {pip_exit}'), ("python", python)):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "wt-abc" / ".git").write_text("gitdir: elsewhere\n")  # a worktree already there
    return log


def test_a_wheel_is_added_once_to_an_installed_venv(tmp_path):
    log = _venv(tmp_path)
    mark = tmp_path / "wt-abc" / ".venv" / "installed"
    mark.write_text("base\n")
    assert _call(tmp_path, "MoleculeACE==3.0.0", "molsets==0.3.1").returncode == 0
    assert log.read_text().splitlines() == ["install -q --no-deps MoleculeACE==3.0.0", "install -q --no-deps molsets==0.3.1"]
    assert mark.read_text().splitlines() == ["base", "MoleculeACE==3.0.0", "molsets==0.3.1"]
    assert _call(tmp_path, "MoleculeACE==3.0.0").returncode == 0 and _call(tmp_path).returncode == 0
    assert len(log.read_text().splitlines()) == 2  # nothing installed again


def test_a_failed_wheel_install_is_not_counted_and_the_call_fails(tmp_path):
    log = _venv(tmp_path, pip_exit=3)
    mark = tmp_path / "wt-abc" / ".venv" / "installed"
    mark.write_text("base\n")
    assert _call(tmp_path, "MoleculeACE==3.0.0").returncode == 7
    assert mark.read_text() == "base\n" and log.read_text() == "install -q --no-deps MoleculeACE==3.0.0\n"


def test_a_venv_made_before_the_list_counts_once_it_imports_siggate(tmp_path):
    log = _venv(tmp_path, python=f'exec "{sys.executable}" "$@"')  # this interpreter imports siggate and torch
    assert _call(tmp_path).returncode == 0
    assert (tmp_path / "wt-abc" / ".venv" / "installed").read_text() == "base\n" and not log.exists()


def test_a_venv_without_the_list_is_made_again_and_counted_only_when_its_install_ends(tmp_path):
    """No list and a python that cannot import siggate (an install cut short): python3 -m venv runs
    again and so does the install; a failing install leaves no list and fails the call, a
    finished one writes it."""
    log = _venv(tmp_path, pip_exit=1)
    mark = tmp_path / "wt-abc" / ".venv" / "installed"
    assert _call(tmp_path, python3="exit 0").returncode == 7 and not mark.exists()
    assert log.read_text().splitlines() == ["python3 -m venv .venv", "install -q -r requirements-cpu.txt -e ."]
    (tmp_path / "wt-abc" / ".venv" / "bin" / "pip").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    assert _call(tmp_path, python3="exit 0").returncode == 0 and mark.read_text() == "base\n"
    assert _call(tmp_path).returncode == 0 and len(log.read_text().splitlines()) == 4  # installed once more, then not again


def test_a_failing_venv_or_worktree_is_not_counted(tmp_path):
    """The steps before the install fail the call and write no list: python3 -m venv failing, and
    git failing to add a worktree that is not there."""
    log = _venv(tmp_path)
    mark = tmp_path / "wt-abc" / ".venv" / "installed"
    assert _call(tmp_path).returncode == 7 and not mark.exists()  # the shim's python3 fails
    assert log.read_text().splitlines() == ["python3 -m venv .venv"]
    (tmp_path / "wt-abc" / ".git").unlink()
    assert _call(tmp_path, python3="exit 0").returncode == 7 and not mark.exists()
    assert log.read_text().splitlines()[-1] == "git -C " + str(tmp_path) + " worktree prune"
