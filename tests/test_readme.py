"""The README says what the code does: its key table lists every config key with its default,
its install command is the one CI runs, and its "train on your own graphs" example runs."""

import dataclasses
import math
import re
from pathlib import Path

import yaml

from siggate.config import DataConfig, MembersConfig, ModelConfig, TrainConfig

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _section(heading: str) -> str:
    """The README's text from ``heading`` to the next heading of the same level."""
    level = heading.split(" ")[0]
    start = README.index(heading + "\n")
    nxt = re.search(rf"^{level} ", README[start + len(heading):], re.M)
    return README[start: start + len(heading) + nxt.start()] if nxt else README[start:]


def _key_table() -> dict:
    """``{"model.dim": "64", ...}``: each key of the Configs table with the default it states."""
    rows = {}
    for line in _section("## Configs").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        keys = re.findall(r"`([a-z]+(?:\.[A-Za-z_]+)+)`", cells[0])
        keys = [k for k in keys if k.split(".")[0] in ("data", "model", "train", "members")]
        defaults = re.findall(r"`([^`]*)`", cells[1])
        assert len(keys) == len(defaults), f"row {cells[0]}: {len(keys)} keys, {len(defaults)} defaults"
        for key, default in zip(keys, defaults):
            assert key not in rows, f"{key} is listed twice"
            rows[key] = default
    return rows


def _config_defaults() -> dict:
    out = {}

    def walk(prefix: str, cls) -> None:
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            if dataclasses.is_dataclass(default):  # model.attention.<type>: one row per option
                walk(f"{prefix}.{f.name}", type(default))
            else:
                out[f"{prefix}.{f.name}"] = list(default) if isinstance(default, tuple) else default  # a grid

    for section, cls in (("data", DataConfig), ("model", ModelConfig), ("train", TrainConfig),
                         ("members", MembersConfig)):
        walk(section, cls)
    return out


def test_key_table_lists_every_config_key_with_its_default():
    table, defaults = _key_table(), _config_defaults()
    assert sorted(set(defaults) - set(table)) == [], "config keys missing from the README's key table"
    assert sorted(set(table) - set(defaults)) == [], "README key table names keys the config does not have"
    for key, text in table.items():
        stated, default = yaml.safe_load(text), defaults[key]
        if isinstance(default, float) and not isinstance(stated, bool) and stated is not None:
            assert math.isclose(float(stated), default), f"{key}: README says {text}, the config {default!r}"
        else:
            assert stated == default, f"{key}: README says {text}, the config {default!r}"


def test_set_up_starts_with_the_install_command_ci_runs():
    block = re.search(r"```bash\n(.*?)```", _section("## Set up"), re.S).group(1)
    ci = (ROOT / ".ci" / "run").read_text()
    install = next(line for line in ci.splitlines() if line.startswith("pip install "))
    assert install in block and block.startswith("python3 -m venv .venv")


def test_the_test_command_is_what_ci_runs():
    """The README's test command and ``.ci/run`` run the same steps; both lint the whole
    repository (``ruff check .``, benchmarks included) before the tests."""
    block = re.search(r"Run the tests \(what CI runs, `\.ci/run`\):\n\n```bash\n(.*?)```", README, re.S).group(1)
    steps = [s.strip() for s in block.strip().split("&&")]
    ci = [line.split("#")[0].strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    ci = [line for line in ci if line]
    assert [s for s in steps if s not in ci] == []
    checks = ("ruff ", "python -m pytest")
    assert [line for line in ci if line.startswith(checks)] == [s for s in steps if s.startswith(checks)] == [
        "ruff check .", "python -m pytest -q"]


def test_own_graphs_example_trains_and_predicts(tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", _section("### Train on your own graphs"), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(code, ns)
    run = tmp_path / "runs" / "rings"
    assert {"best.pt", "last.pt", "metrics.json", "config.yaml", "log.csv"} <= {p.name for p in run.iterdir()}
    assert ns["metrics"]["dataset"] == "rings" and ns["metrics"]["epochs"] == 3
    pred = ns["pred"]
    assert tuple(pred.shape) == (20, 1) and bool(pred.isfinite().all())
    # predictions are in target units (ring sizes 4..12), not the normalised scale around 0
    assert 0 < float(pred.mean()) < 20


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README, re.S)


def test_every_python_block_defines_what_it_uses():
    """A snippet copied into a fresh interpreter runs as far as its data: every name it reads is
    imported or assigned in the block itself (the GPSConv snippet used GINEConv, mlp, x, edge_index
    and batch from nowhere, the scikit-learn one smiles, logS, labels and new_smiles)."""
    import ast
    import builtins

    blocks = _python_blocks()
    assert len(blocks) >= 4
    for code in blocks:
        tree = ast.parse(code)
        defined = set(dir(builtins))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.arg):
                defined.add(node.arg)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert used - defined == set(), f"README block uses names it never defines:\n{code}"


def test_the_gps_conv_drop_in_snippet_runs_as_written():
    """The 'change one import' snippet, executed: the gated layer on two small graphs."""
    block = next(b for b in _python_blocks() if "GatedGPSConv as GPSConv" in b)
    ns: dict = {}
    exec(block, ns)
    assert tuple(ns["x"].shape) == (5, 64) and bool(ns["x"].isfinite().all())
    assert type(ns["conv"]).__name__ == "GatedGPSConv" and "gate=elementwise" in repr(ns["conv"])
