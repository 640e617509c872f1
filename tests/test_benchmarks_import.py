"""Every script under ``benchmarks/`` imports: a module it uses that moved or was renamed
breaks this test, not the next reader who runs the script. The scripts are imported, not
run (each keeps its work under ``if __name__ == "__main__"``); shell scripts are checked
with ``bash -n``."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.rglob("*.py") if "runs" not in p.relative_to(BENCHMARKS).parts)
SHELL = sorted(BENCHMARKS.rglob("*.sh"))


def _module_name(path: Path) -> str:
    rel = path.relative_to(BENCHMARKS).with_suffix("")
    return "siggate_benchmarks." + ".".join(part.replace("-", "_") for part in rel.parts)


def test_the_benchmark_scripts_are_found():
    """The globs see the scripts this test is meant to cover (a moved folder empties them)."""
    names = {p.relative_to(BENCHMARKS).as_posix() for p in SCRIPTS}
    assert {"throughput.py", "layer_example.py", "gpu_check.py", "short_budget/summarize.py",
            "peers/run.py", "moleculeace/run.py"} <= names
    assert not any(p.relative_to(BENCHMARKS).parts[0] == "results" for p in SCRIPTS), \
        "scripts sit apart from results: move it out of benchmarks/results/ (campaign/study.sh excepted)"
    assert {p.relative_to(BENCHMARKS).as_posix() for p in SHELL} >= {"results/campaign/study.sh",
                                                                      "short_budget/run.sh"}


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.relative_to(BENCHMARKS).as_posix())
def test_benchmark_script_imports(path, monkeypatch):
    """Import the script under its own module name, as ``python path`` would load it (its
    folder first on ``sys.path``), without running its ``__main__`` block."""
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.setattr(sys, "argv", [str(path)])
    name = _module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    assert module.__name__ != "__main__" and module.__file__ == str(path)


@pytest.mark.parametrize("path", SHELL, ids=lambda p: p.relative_to(BENCHMARKS).as_posix())
def test_benchmark_shell_script_parses(path):
    """``bash -n``: the shell scripts parse (they are not run)."""
    out = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_no_script_names_a_path_of_one_machine():
    """Scripts find siggate, its data and its venv from the environment (``python`` on PATH,
    ``$SIGGATE_DATA``, ``$SIGGATE_CACHE``), never at an absolute path of the machine they were
    written on."""
    found = [f"{p.relative_to(BENCHMARKS)}:{i}: {line.strip()}" for p in SCRIPTS + SHELL
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"(?<![\w.~$])/(work|home|root|Users)/", line)]
    assert found == []


@pytest.mark.parametrize("script, argv, said", [
    ("layer_example.py", ["--rounds", "1"], "layer_example.py: error: --rounds 1: give a whole number >= 2"),
    ("layer_example.py", ["--threads", "0"], "layer_example.py: error: --threads 0: give a whole number >= 1"),
    ("scale/kernel_map.py", ["--rounds", "0"], "kernel_map.py: error: --rounds 0 and --rows None: give whole numbers"),
])
def test_speed_scripts_refuse_counts_they_cannot_time_in_one_line(script, argv, said, capsys, monkeypatch):
    """`layer_example.py --rounds 1` ended in a StatisticsError traceback, `kernel_map.py --rounds 0` in
    min() of nothing (helper-176, helper-177): one line, exit 2, before anything is built."""
    path = BENCHMARKS / script
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location(_module_name(path), path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, _module_name(path), module)
    spec.loader.exec_module(module)
    assert module.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and len(err.strip().splitlines()) == 1, err


def test_gpu_check_refuses_an_out_it_cannot_write_before_its_checks(tmp_path, capsys, monkeypatch):
    """--out into a folder that is not there failed after every check had run (device time, and the
    results lost; helper-186): refused first, in one line on stderr, exit 2."""
    path = BENCHMARKS / "gpu_check.py"
    monkeypatch.syspath_prepend(str(path.parent))
    spec = importlib.util.spec_from_file_location("siggate_benchmarks.gpu_check_out", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "train_step_errors", lambda *a, **k: pytest.fail("checks ran before --out was checked"))
    out = tmp_path / "nowhere" / "g.json"
    assert module.main(["--device", "cpu", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (f"gpu_check: error: --out {out}: no folder {out.parent}; give a JSON file's path "
                                       "in an existing folder\n")


def test_ab_speed_refuses_in_one_line_and_shows_the_benchs_reason(tmp_path, capsys, monkeypatch):
    """--alternations 0 ended in an UnboundLocalError, an unknown commit and a bench flag siggate
    refuses in CalledProcessErrors (the bench's reason dropped with its stderr; helper-186)."""
    path = BENCHMARKS / "ab_speed.py"
    spec = importlib.util.spec_from_file_location("siggate_benchmarks.ab_speed_refusals", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = str(tmp_path / "ab.json")
    for argv, said in ((["--old", "HEAD", "--alternations", "0"], "--alternations 0: give a whole number >= 1"),
                       (["--old", "no-such-commit"], "ab_speed: error: 'no-such-commit' is not a commit of this "
                                                     "repository; give a hash, tag or branch"),
                       (["--old", "HEAD", "--", "--scaling"], "ab_speed: error: --scaling: ab_speed compares the "
                                                              "throughput run's ratios (bench.json)"),
                       (["--old", "HEAD", "--alternations", "1", "--", "--repeats", "0"],
                        "ab_speed: error: siggate bench of old failed (exit 2): siggate bench: error: --repeats 0: "
                        "give a whole number >= 1")):
        with pytest.raises(SystemExit) as exc:
            module.main([*argv[:2], "--out", out, *argv[2:]])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and said in err, err
    assert not (tmp_path / "ab.json").exists()
