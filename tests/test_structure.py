"""The package's shape: no import cycles between files of ``src/siggate`` (imports inside
functions and modules named in strings for ``importlib`` included), the import layers that
ARCHITECTURE.md's table states,
light entry points, and ``siggate data verify`` for every registered dataset."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "siggate"
HEAVY = ("torch_geometric", "rdkit", "ogb", "pandas", "sklearn")


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of siggate it imports``: every ``import``/``from ... import``
    anywhere in the file (functions included), resolved relative imports, and string
    constants naming a siggate module (``importlib.import_module`` tables, ``"module:function"``
    entry points of the light parsers)."""
    mods = _modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        here = name.split(".") if is_pkg else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("siggate."):
                targets = [node.value.split(":")[0]]  # "module" or a parser's "module:function" entry
            deps.update(t for t in targets if t in mods and t != name)
        graph[name] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert find_cycles(import_graph()) == []


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PKG / parts[1]).is_dir()) else module


ARCHITECTURE = SRC.parent / "ARCHITECTURE.md"
#: modules that import nothing from siggate but the package root, beside the table's leaves
LEAVES = ("siggate.perf.timer",)


def _table_name(name: str) -> str:
    """A name of the import table as :func:`_package` spells it (``train``, ``siggate.config``)."""
    name = name.strip().strip("`")
    return name if name == "siggate" or (PKG / name).is_dir() else f"siggate.{name}"


def import_table(text: str | None = None) -> tuple[dict[str, set[str] | None], set[str]]:
    """The import table of ARCHITECTURE.md (the code block under "Who may import whom"):
    ``({package: the packages it may import, None for everything}, leaves)``. A line is
    ``A, B <- X, Y (comment)``; ``<- nothing`` declares leaves, which every package may import."""
    text = ARCHITECTURE.read_text() if text is None else text
    block = text.split("## Who may import whom", 1)[1].split("```", 2)[1]
    allowed: dict[str, set[str] | None] = {}
    leaves: set[str] = set()
    for line in block.strip().splitlines():
        left, right = (part.strip() for part in re.sub(r"\(.*\)\s*$", "", line).split("<-"))
        names = [_table_name(n) for n in left.split(",")]
        if right == "nothing":
            leaves.update(names)
            deps: set[str] | None = set()
        else:
            deps = None if right == "everything" else {_table_name(n) for n in right.split(",")}
        allowed.update({n: deps for n in names})
    return allowed, leaves


def layer_violations(graph: dict[str, set[str]], allowed: dict, leaves: set[str]) -> list[str]:
    """Every import ``module -> dependency`` between two packages that the table does not allow
    (a leaf may import only the package root)."""
    bad = []
    for mod, deps in sorted(graph.items()):
        a = _package(mod)
        for dep in sorted(deps):
            b = _package(dep)
            if a == b:
                continue
            rule = allowed.get(a, set())
            if a in leaves and b != "siggate":
                bad.append(f"{mod} (a leaf) -> {dep}")
            elif a not in leaves and rule is not None and b not in rule and b not in leaves:
                bad.append(f"{mod} -> {dep}")
    return bad


def test_the_import_table_parses_and_catches_a_forbidden_import():
    allowed, leaves = import_table()
    assert leaves == {"siggate.version", "siggate.options", "siggate.files", "siggate.stats"}
    assert allowed["siggate"] == {"siggate.estimator"} and allowed["siggate.estimator"] is None
    assert allowed["siggate.cli"] is None and "train" in allowed["analysis"] and "perf" in allowed["analysis"]
    assert not {"nn", "train"} & allowed["predictors"] and "analysis" not in allowed["perf"]
    fake = {"siggate.predictors.combine": {"siggate.train.members", "siggate.options"},
            "siggate.options": {"siggate.config"}, "siggate.train.loop": {"siggate.predictors.base"}}
    assert layer_violations(fake, allowed, leaves) == ["siggate.options (a leaf) -> siggate.config",
                                                       "siggate.predictors.combine -> siggate.train.members"]


def test_the_import_table_names_every_package():
    allowed, _ = import_table()
    assert {_package(m) for m in _modules()} == set(allowed)


def test_import_layers():
    graph = import_graph()
    bad = layer_violations(graph, *import_table())
    for leaf in LEAVES:
        bad += [f"{leaf} (a leaf) -> {dep}" for dep in graph[leaf] if dep != "siggate"]
    assert bad == []


@pytest.mark.parametrize("code", [
    "import siggate.config",
    "import sys; from siggate.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
], ids=["import-config", "siggate-help"])
def test_entry_points_stay_light(code):
    probe = code + (
        "\nimport sys, json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_one_registry_and_light_registry_module():
    from siggate.data import catalog, registry

    assert catalog.DATASETS is registry.DATASETS
    assert {"nci5k", "zinc", "molhiv", "molpcba", "peptides-func", "peptides-struct"} <= set(catalog.DATASETS)
    assert not any(isinstance(v, dict) and v is not registry.DATASETS and v is not registry.DATASET_META
                   for k, v in vars(catalog).items() if k.isupper() and k not in ("DATASETS", "DATASET_META"))


def test_option_names_match_the_implementations():
    from siggate import options
    from siggate.nn.attention import GATE_KINDS, GATE_POSITIONS
    from siggate.nn.layer import LOCAL_MODELS

    assert GATE_KINDS == options.GATE_KINDS and GATE_POSITIONS == options.GATE_POSITIONS
    assert set(LOCAL_MODELS) == set(options.LOCAL_MODEL_NAMES)
    assert options.parse_gate_spec("elementwise@value") == ("elementwise", "value")
    assert options.parse_gate_spec(" none ") == ("none", None)


#: registered datasets whose files are not in ../shared/data (MANIFEST.md: NOT FOUND)
ABSENT_FROM_SHARED_DATA = {"molpcba", "peptides-struct"}


def _registered() -> list[str]:
    from siggate.data.catalog import DATASETS

    return sorted(DATASETS)


@pytest.mark.slow
@pytest.mark.parametrize("name", _registered())
def test_data_verify_every_registered_dataset(name, capsys, monkeypatch):
    """``siggate data verify NAME`` for each registered dataset: its counts where its data is
    present (nci5k ships with RDKit), else one clean exit-2 line naming the missing files
    (the shared data has no molpcba SMILES and no Peptides-struct; see its MANIFEST). Builds
    go to the benchmark tests' shared cache."""
    from siggate.cli import main

    env = os.environ.get("SIGGATE_TEST_CACHE")
    cache = Path(env) if env else Path(tempfile.gettempdir()) / "siggate-test-cache"
    monkeypatch.setenv("SIGGATE_OFFLINE", "1")
    rc = main(["data", "verify", name, "--cache-dir", str(cache)])
    out, err = capsys.readouterr()
    if name in ABSENT_FROM_SHARED_DATA:
        assert rc == 2 and "required files not found" in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) >= 1 and out == ""
        return
    if rc == 2 and "required files not found" in err and os.environ.get("CI", "").strip().lower() != "true":
        pytest.skip(f"the benchmark data of {name} is not where this checkout looks (set SIGGATE_DATA): {err.strip()}")
    assert rc == 0, err
    res = json.loads(out)
    assert res["name"] == name
    if res.get("transductive"):  # one graph, split by node masks: every split holds it, nodes partition
        assert res["num_graphs"] == 1 and set(res["splits"].values()) == {1}
        assert sum(res["split_nodes"].values()) == res["total_nodes"] > 0
    else:
        assert res["num_graphs"] == sum(res["splits"].values()) > 0


def test_data_verify_unknown_name_is_one_line(capsys):
    from siggate.cli import main

    assert main(["data", "verify", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset 'nope'" in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--max-graphs", "--num-nodes"])
def test_data_verify_refuses_a_negative_count(capsys, flag):
    """``data verify pattern --max-graphs -1`` reported 0 graphs in every split and exited 0."""
    from siggate.cli import main

    assert main(["data", "verify", "pattern", flag, "-1"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} -1: give a number >= 1 (or 0 for the default)" in err and len(err.strip().splitlines()) == 1
