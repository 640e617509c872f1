"""``benchmarks/worktree.sh``: the pinned worktree's venv is installed once, a wheel another script
wants is added without installing the rest again, an install cut short is not counted, and a venv
made before the list existed counts once it imports siggate. pip stands in as a logging script, so
nothing is downloaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _call(tmp_path: Path, *wheels: str) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail; ROOT={tmp_path}; source {ROOT / "benchmarks/worktree.sh"}; ' \
             f'pinned_worktree {tmp_path / "wt-abc"} abc {" ".join(wheels)}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


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
    assert _call(tmp_path, "MoleculeACE==3.0.0").returncode != 0
    assert mark.read_text() == "base\n" and log.read_text() == "install -q --no-deps MoleculeACE==3.0.0\n"


def test_a_venv_made_before_the_list_counts_once_it_imports_siggate(tmp_path):
    log = _venv(tmp_path, python=f'exec "{sys.executable}" "$@"')  # this interpreter imports siggate and torch
    assert _call(tmp_path).returncode == 0
    assert (tmp_path / "wt-abc" / ".venv" / "installed").read_text() == "base\n" and not log.exists()


def test_a_venv_without_the_list_is_made_again_and_counted_only_when_its_install_ends(tmp_path):
    """No list and a python that cannot import siggate (an install cut short): python3 -m venv runs
    again (python3 stands in on PATH, logging) and so does the install; a failing install leaves
    no list and fails the call, a finished one writes it."""
    log = _venv(tmp_path, pip_exit=1)
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\necho "python3 $*" >> {log}\n')
    (shim / "python3").chmod(0o755)
    mark = tmp_path / "wt-abc" / ".venv" / "installed"

    def call():
        script = f'set -euo pipefail; export PATH={shim}:$PATH; ROOT={tmp_path}; ' \
                 f'source {ROOT / "benchmarks/worktree.sh"}; pinned_worktree {tmp_path / "wt-abc"} abc'
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)

    assert call().returncode != 0 and not mark.exists()
    assert log.read_text().splitlines() == ["python3 -m venv .venv", "install -q -r requirements-cpu.txt -e ."]
    (tmp_path / "wt-abc" / ".venv" / "bin" / "pip").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    assert call().returncode == 0 and mark.read_text() == "base\n"
    assert call().returncode == 0 and len(log.read_text().splitlines()) == 4  # installed once more, then not again
