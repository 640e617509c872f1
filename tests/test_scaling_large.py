"""``siggate bench --scaling-large``: the plan, the derived numbers, and a tiny end-to-end run
(one size, one fresh subprocess) that writes the documented JSON and PNG."""

from __future__ import annotations

import json
import math

import torch

from siggate.perf.scaling_large import NodeClassifier, growth_exponents, plan, speedups


def test_plan_skips_full_attention_above_its_limit():
    runs, skipped = plan([1000, 100_000], ["full", "performer"], [64], full_max_nodes=10_000)
    assert [v["attn"] for v in runs[1000]] == ["full", "performer", "performer"]
    assert [(v["attn"], v["impl"]) for v in runs[100_000]] == [("performer", "siggate"), ("performer", "pyg")]
    assert skipped == [{"nodes": 100_000, "attn": "full", "impl": "siggate",
                        "reason": "quadratic: over --full-max-nodes 10000"}]


def test_exponent_is_the_log_log_slope_and_speedup_the_time_ratio():
    rows = [{"nodes": n, "attn": "performer", "impl": "siggate", "train_s": t} for n, t in ((10**4, 0.5), (10**5, 6.0))]
    rows += [{"nodes": 10**5, "attn": "performer", "impl": "pyg", "pyg_head_channels": 64, "train_s": 30.0}]
    assert growth_exponents(rows)["performer"] == round(math.log10(12.0), 3)
    assert speedups(rows) == [{"nodes": 10**5, "attn": "performer", "pyg_head_channels": 64, "speedup": 5.0}]


def test_node_classifier_takes_every_attention_type():
    from siggate.data.sbm import sbm_large_graph

    data = sbm_large_graph(200, seed=1)
    for kind in ("full", "performer", "exphormer"):
        torch.manual_seed(0)
        model = NodeClassifier(16, 10, kind, dim=16, layers=2, heads=4)
        out = model(data)
        assert out.shape == (200, 10) and torch.isfinite(out).all()
        out.sum().backward()
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_scaling_large_writes_rows_exponents_and_plot(tmp_path, capsys):
    from siggate.perf.bench import main

    assert main(["--scaling-large", "--sizes", "150", "--repeats", "2", "--layers", "1", "--dim", "8",
                 "--pyg-head-channels", "2", "--full-max-nodes", "100", "--note", "smoke", "--out", str(tmp_path),
                 "--no-progress"]) == 0
    assert capsys.readouterr().err == ""  # progress only on a terminal
    res = json.loads((tmp_path / "scaling_large.json").read_text())
    assert {"rows", "exponent", "machine", "command", "skipped", "speedup_vs_pyg", "memory", "note"} <= set(res)
    assert [(r["attn"], r["impl"]) for r in res["rows"]] == [("performer", "siggate"), ("exphormer", "siggate"),
                                                             ("performer", "pyg")]
    for r in res["rows"]:
        assert {"nodes", "edges", "attn", "impl", "gate", "train_s", "peak_bytes", "repeats"} <= set(r)
        assert r["nodes"] == 150 and r["repeats"] == 2 and r["train_s"] > 0 and r["peak_bytes"] >= 0
    assert res["skipped"][0]["attn"] == "full"
    assert res["machine"]["threads"] == 1 and res["command"].startswith("siggate bench")
    assert "--warmup" not in res["command"] and "--sizes 150" in res["command"]  # the flags given, no filled default
    assert (tmp_path / "scaling_large.png").stat().st_size > 0
