"""``siggate --help`` and every sub-command's help: light (checked by import, not by time),
with examples, every option described, and the shared flags where they apply."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("torch", "scipy", "matplotlib", "sklearn", "rdkit", "torch_geometric", "pandas", "ogb")


def _parsers(parser: argparse.ArgumentParser, path=("siggate",)):
    """``(command path, parser)`` for the parser and every sub-parser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def _commands() -> list[tuple[str, ...]]:
    from siggate.cli import build_parser

    return [path[1:] for path, _ in _parsers(build_parser()) if len(path) > 1]


def test_every_help_and_data_list_import_nothing_heavy():
    """In one fresh interpreter: ``siggate --help``, ``siggate <cmd> [<sub>] --help`` for every
    command, and ``siggate data list``; then none of the heavy packages is loaded."""
    probe = f"""
import contextlib, io, json, sys
from siggate.cli import main
from test_cli_help import _commands
outs = {{}}
for cmd in [()] + _commands():
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            main([*cmd, "--help"])
        except SystemExit:
            pass
    outs[" ".join(cmd)] = buf.getvalue()
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = main(["data", "list"])
print(json.dumps({{"heavy": sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r})),
                  "helps": outs, "list_rc": rc, "list": buf.getvalue()}}))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(Path(__file__).parent)])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["heavy"] == []
    assert res["list_rc"] == 0 and "zinc" in res["list"] and "nci5k" in res["list"]
    helps = res["helps"]
    assert len(helps) == len(_commands()) + 1 == 19  # siggate itself, 9 commands and 9 analyses
    assert all(text.startswith("usage: siggate") for text in helps.values())


@pytest.mark.parametrize("cmd", [c for c in _commands()], ids=" ".join)
def test_every_subcommand_has_examples_and_every_option_a_description(cmd):
    from siggate.cli import build_parser

    parser = dict(_parsers(build_parser()))[("siggate", *cmd)]
    text = parser.format_help()
    examples = text.split("examples:\n", 1)[1].splitlines() if "examples:\n" in text else []
    examples = [line for line in examples if line.strip()]
    assert 1 <= len(examples) <= 3, text
    assert all(line.strip().startswith(f"siggate {cmd[0]}") for line in examples)
    if len(cmd) == 2:  # an analysis: its examples run that analysis
        assert all(line.strip().startswith(f"siggate analyze {cmd[1]}") for line in examples)
    for line in examples:  # each example parses (an example named a flag its command does not have)
        words = shlex.split(line.split("  #", 1)[0])[1:]
        try:
            build_parser().parse_args(words)
        except SystemExit:
            pytest.fail(f"the example {line.strip()!r} does not parse")
    undocumented = [a.option_strings or a.dest for a in parser._actions
                    if not isinstance(a, argparse._SubParsersAction) and not (a.help or "").strip()]
    assert undocumented == []
    assert "``" not in text and ":func:" not in text and ":mod:" not in text  # no raw reST


def test_shared_flags_where_they_apply():
    from siggate.cli import build_parser

    parsers = {" ".join(path[1:]): p for path, p in _parsers(build_parser())}

    def flags(name):
        return {s for a in parsers[name]._actions for s in a.option_strings}

    for name in ("train", "evaluate", "predict", "compare", "data", "bench", "analyze rank", "analyze synthetic"):
        assert "--threads" in flags(name), name
    for name in ("train", "evaluate", "compare", "data", "bench", "analyze entropy", "analyze synthetic"):
        assert {"--progress", "--no-progress"} <= flags(name), name
    for name in ("evaluate", "predict", "bench"):
        assert "--device" in flags(name), name
        action = next(a for a in parsers[name]._actions if "--device" in a.option_strings)
        assert action.default == "cpu" and set(action.choices) == {"cpu", "cuda"}


def test_every_data_root_flag_names_where_the_root_is_found_without_it(tmp_path, monkeypatch):
    """Each --data-root help names both places default_data_root looks ($SIGGATE_DATA, then
    ../shared/data beside the checkout; data and train named only the first), and that second
    place is the one it finds here without the variable."""
    from siggate.cli import build_parser
    from siggate.data.base import default_data_root
    from siggate.options import DATA_ROOT_DEFAULT

    helps = {" ".join(path[1:]): a.help for path, p in _parsers(build_parser()) for a in p._actions
             if "--data-root" in a.option_strings}
    assert {"train", "evaluate", "data", "compare"} <= set(helps)
    assert [name for name, text in helps.items() if DATA_ROOT_DEFAULT not in (text or "")] == []
    monkeypatch.setenv("SIGGATE_DATA", str(tmp_path))
    assert default_data_root() == tmp_path
    monkeypatch.delenv("SIGGATE_DATA")
    beside = SRC.parents[1] / "shared" / "data"  # a checkout without it (a clone elsewhere) has no default
    assert default_data_root() == (beside if beside.is_dir() else None)


def test_synthetic_defaults_named_in_its_help_are_its_own():
    """The synthetic analysis' parser is light, so it states its defaults as text: they must be
    the analysis' own families, attention modes and gates."""
    from siggate.analysis import synthetic
    from siggate.cli import build_parser

    parser = dict(_parsers(build_parser()))[("siggate", "analyze", "synthetic")]
    helps = {a.dest: a.help for a in parser._actions}
    assert ",".join(synthetic.FAMILIES) in helps["families"]
    assert ",".join(synthetic.ATTENTION_MODES) in helps["attention"]
    assert ",".join(synthetic.GATES) in helps["gates"]


def test_device_cuda_without_a_gpu_is_one_line(capsys, monkeypatch):
    import torch

    from siggate.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["evaluate", "--checkpoint", "nowhere", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--device cuda" in err[0] and "use --device cpu" in err[0]


def test_every_default_a_help_names_is_the_one_the_parser_uses():
    """`analyze overhead --help` said "--threads N ... (default: 0, torch's choice)" while the
    command set its default to 1 (helper-176). Each help text's "(default: X" is checked against
    the parser's own default where that is a number or a text (a default of None is the command's
    to apply, where it says what it applied)."""
    import re

    from siggate.cli import build_parser

    checked, wrong = 0, []
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            said = re.search(r"\(default: ([^;)]*)", action.help or "")
            default = parser.get_default(action.dest)
            if not said or not action.option_strings or default is None or isinstance(default, bool):
                continue
            text = said.group(1)
            if isinstance(default, (int, float)):
                number = re.match(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", text)
                if not number:
                    continue  # (said in words)
                ok = float(number.group(0)) == float(default)
            elif isinstance(default, str):
                ok = text.startswith(default)
            else:
                continue
            checked += 1
            if not ok:
                wrong.append((" ".join(path), action.option_strings[0], text, default))
    assert checked > 40 and wrong == [], wrong
