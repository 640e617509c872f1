"""``benchmarks/stable_eval/summarize.py --peers``: the before/after pairs of the peer rows, by the
``train.eval_norm=running`` variant or by two named recipes."""

from __future__ import annotations

import json

import pytest

from benchmark_scripts import load

summ = load("stable_eval_summarize", "stable_eval/summarize.py")


def _run(task, seed, value, variant=None, recipe=None, epoch=None, status="ok"):
    return {"tool": "siggate", "task": task, "seed": seed, "value": value, "metric": "mae", "variant": variant,
            "recipe": recipe, "best_epoch": epoch, "cpu_s": 10.0, "git_commit": "abcdef0123", "status": status}


def test_peer_rows_pair_by_variant_or_by_two_recipes(tmp_path):
    path = tmp_path / "peers.json"
    path.write_text(json.dumps({"runs": [
        _run("freesolv", 0, 0.50, variant=summ.RUNNING, epoch=12), _run("freesolv", 0, 0.40, epoch=14),
        _run("nci5k", 0, 0.30, recipe="r-run", variant="x " + summ.RUNNING), _run("nci5k", 0, 0.20, recipe="r"),
        _run("zinc2k", 0, 0.10, recipe="r"),  # no before row: left out
        _run("freesolv", 1, 0.9, recipe="r-run", status="failed"), _run("freesolv", 1, 0.8, recipe="r")]}))
    default = summ.peers_table(path).splitlines()[2:]
    assert default == ["| freesolv | mae | 0 | 0.500 | 0.400 | 12 / 14 | 10 / 10 | `abcdef0`, `abcdef0` |"]
    named = summ.peers_table(path, "r-run", "r").splitlines()[2:]
    assert named == ["| nci5k | mae | 0 | 0.300 | 0.200 | – / – | 10 / 10 | `abcdef0`, `abcdef0` |"]
    with pytest.raises(SystemExit, match="--before and --after name two recipes; give both"):
        summ.peers_table(path, "r-run", None)
