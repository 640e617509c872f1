"""``siggate bench --scaling-large``: one full-batch training step on one large graph, as the
graph grows, for every attention type and PyG's Performer ``GPSConv``.

The graph: :func:`siggate.data.sbm.sbm_large_graph` (stochastic block model, 10 blocks,
average degree 10, 16 features; node classification). The models, the same for every
size: :class:`NodeClassifier` (``Linear(16, dim)``, ``layers`` SigGate-GT layers
(:class:`siggate.nn.GPSLayer`: GINE plus the attention type, gated, FFN, BatchNorms),
``Linear(dim, 10)``) and :class:`PyGPerformerClassifier` (the same with
``torch_geometric.nn.GPSConv(dim, GINEConv(MLP), heads, attn_type="performer")``, for each
``head_channels`` asked: PyG's default is 64, i.e. an inner width of ``heads * 64``; 16 is
siggate's ``dim / heads``). The SBM has no edge features: GINE gets a constant zero
edge feature (no parameter) in both stacks. Dropout 0, AdamW.

A step is ``zero_grad``, forward, cross-entropy on the training nodes, backward, AdamW
step; its time is the wall clock (``perf_counter``) of the whole step, including the
attention layout (Exphormer's expander and pair list, built once per step and shared by
the layers).

Protocol: each size runs in a fresh subprocess (:func:`worker`) that builds the graph
and every model of that size. Each model's first step is its warm-up and measures its peak
memory: ``malloc_trim`` and ``gc``, then the RSS high-water mark is reset
(``/proc/self/clear_refs``, Linux) and the peak is ``VmHWM`` after the step minus ``VmRSS``
before it (resident memory the step added at its peak: activations, gradients,
temporaries, optimizer state; the graph and the parameters are in the baseline). Then
``repeats`` rounds in which every model runs one timed step, the order rotating each round
(the models alternate, so a shared machine's drift hits all alike); a row's ``train_s`` is
the median. ``full`` attention runs only up to ``--full-max-nodes`` (its cost is
quadratic); the sizes it skips are listed under ``skipped``.

``exponent``: per siggate attention type, the log-log slope of ``train_s`` between 10^4
and 10^5 nodes (1 is linear).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from ..options import GPSOptions
from .timer import rotated, timed

NUM_FEATURES, NUM_CLASSES = 16, 10


# ----------------------------------------------------------------------------- models


class _NodeStack(nn.Module):
    """``Linear(in, dim)``, ``layers``, ``Linear(dim, classes)``; every edge gets the same
    zero feature (the graph has none; a buffer, not a parameter). Subclasses say how the
    layers run (:meth:`propagate`)."""

    def __init__(self, in_dim: int, num_classes: int, dim: int, layers: nn.ModuleList) -> None:
        super().__init__()
        self.encoder = nn.Linear(in_dim, dim)
        self.register_buffer("edge_feature", torch.zeros(1, dim))
        self.layers = layers
        self.head = nn.Linear(dim, num_classes)

    def forward(self, data) -> Tensor:
        x = self.encoder(data.x)
        e = self.edge_feature.expand(data.edge_index.size(1), -1)
        batch = x.new_zeros(x.size(0), dtype=torch.long)
        return self.head(self.propagate(x, data.edge_index, e, batch))


class NodeClassifier(_NodeStack):
    """SigGate-GT layers for node classification: ``Linear(in, dim)``, ``layers``
    :class:`~siggate.nn.GPSLayer` (GINE local MPNN, attention ``attn_type`` with the
    ``gate``), ``Linear(dim, classes)``. The attention layout is built once per forward
    pass and shared by the layers.

    Shapes: ``data.x [N, in]``, ``data.edge_index [2, E]`` -> ``[N, classes]``.
    """

    def __init__(self, in_dim: int, num_classes: int, attn_type: str, dim: int = 64, layers: int = 4,
                 heads: int = GPSOptions.heads, gate: str = GPSOptions.gate, attn_kwargs: dict | None = None) -> None:
        from ..nn import GPSLayer

        super().__init__(in_dim, num_classes, dim, nn.ModuleList(
            GPSLayer(dim, heads, local="gine", gate=gate, dropout=0.0, attn_dropout=0.0, attn_type=attn_type,
                     attn_kwargs=attn_kwargs)
            for _ in range(layers)))

    def propagate(self, x: Tensor, edge_index: Tensor, e: Tensor, batch: Tensor) -> Tensor:
        layout = self.layers[0].attn.make_layout(batch, edge_index, 1)
        for layer in self.layers:
            x, e = layer(x, edge_index, e, batch, layout)
        return x


class PyGPerformerClassifier(_NodeStack):
    """The same classifier with PyG's layers: ``GPSConv(dim, GINEConv(Sequential(Linear,
    ReLU, Linear)), heads, attn_type="performer", attn_kwargs={"head_channels": ...})``.

    Shapes: ``data.x [N, in]``, ``data.edge_index [2, E]`` -> ``[N, classes]``.
    """

    def __init__(self, in_dim: int, num_classes: int, dim: int = 64, layers: int = 4, heads: int = GPSOptions.heads,
                 head_channels: int = 64) -> None:
        from torch_geometric.nn import GINEConv, GPSConv

        super().__init__(in_dim, num_classes, dim, nn.ModuleList(
            GPSConv(dim, GINEConv(nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))), heads=heads,
                    dropout=0.0, attn_type="performer", attn_kwargs={"head_channels": head_channels})
            for _ in range(layers)))

    def propagate(self, x: Tensor, edge_index: Tensor, e: Tensor, batch: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, edge_index, batch, edge_attr=e)
        return x


def variant_name(attn: str, impl: str, head_channels: int | None = None) -> str:
    """``"performer"``, ``"pyg-performer-hc64"``, ..."""
    return attn if impl == "siggate" else f"pyg-{attn}-hc{head_channels}"


def build(variant: dict, dim: int, layers: int, heads: int, gate: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if variant["impl"] == "pyg":
        return PyGPerformerClassifier(NUM_FEATURES, NUM_CLASSES, dim, layers, heads, variant["head_channels"])
    return NodeClassifier(NUM_FEATURES, NUM_CLASSES, variant["attn"], dim, layers, heads, gate)


# ----------------------------------------------------------------------------- memory


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def _release_free_memory() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def peak_rss_of(fn) -> tuple[int, int]:
    """``(peak, base)`` bytes: the RSS high-water mark during ``fn()`` above the RSS before
    it (Linux: ``clear_refs`` resets the mark to the current RSS)."""
    _release_free_memory()
    base = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    fn()
    return (_status_kib("VmHWM") - base) * 1024, base * 1024


# ----------------------------------------------------------------------------- one size (a subprocess)


def worker(nodes: int, variants: list[dict], repeats: int, warmup: int, dim: int, layers: int, heads: int,
           gate: str, seed: int, progress: bool) -> dict:
    """Peak memory and step times of every variant on one SBM graph (see the module docstring)."""
    from ..data.sbm import sbm_large_graph

    data = sbm_large_graph(nodes, num_features=NUM_FEATURES, num_blocks=NUM_CLASSES, seed=seed)
    names = [variant_name(**v) for v in variants]
    models = {n: build(v, dim, layers, heads, gate, seed) for n, v in zip(names, variants)}
    opts = {n: torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-5) for n, m in models.items()}

    def step(name: str) -> None:
        model, opt = models[name], opts[name]
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(data)[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()

    out = {"nodes": nodes, "edges": int(data.edge_index.size(1)), "results": {}}
    for name in names:  # first step: warm-up and peak memory
        peak, base = peak_rss_of(lambda: step(name))
        for _ in range(warmup - 1):
            step(name)
        out["results"][name] = {"peak_bytes": peak, "rss_base_bytes": base, "times": [], "cpu_times": [],
                                "params": sum(p.numel() for p in models[name].parameters())}
        _say(progress, f"  n={nodes}: {name} warm, peak {peak / 2**20:.0f} MiB")
    for r in range(repeats):
        for name in rotated(names, r):
            wall, cpu = timed(lambda: step(name))
            out["results"][name]["times"].append(wall)
            out["results"][name]["cpu_times"].append(cpu)
            _say(progress, f"  n={nodes}: round {r + 1}/{repeats} {name} {wall:.2f} s")
    return out


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- the run


def plan(sizes: list[int], attn_types: list[str], pyg_head_channels: list[int], full_max_nodes: int):
    """``{size: [variant, ...]}`` and the skipped ``(size, attn, reason)``."""
    runs, skipped = {}, []
    for n in sizes:
        vs = []
        for attn in attn_types:
            if attn == "full" and n > full_max_nodes:
                skipped.append({"nodes": n, "attn": "full", "impl": "siggate",
                                "reason": f"quadratic: over --full-max-nodes {full_max_nodes}"})
                continue
            vs.append({"attn": attn, "impl": "siggate"})
        vs += [{"attn": "performer", "impl": "pyg", "head_channels": hc} for hc in pyg_head_channels]
        runs[n] = vs
    return runs, skipped


def run_scaling_large(args) -> dict:
    """Every size in a fresh ``python -m siggate.perf.scaling_large`` subprocess; rows,
    growth exponents and speed-ups against PyG."""
    runs, skipped = plan(args.sizes, args.attn_types, args.pyg_head_channels, args.full_max_nodes)
    rows = []
    for n, variants in runs.items():
        _say(args.progress, f"siggate bench --scaling-large: {n} nodes, {len(variants)} models")
        cmd = [sys.executable, "-m", "siggate.perf.scaling_large", "--nodes", str(n), "--variants",
               json.dumps(variants), "--repeats", str(args.repeats), "--warmup", str(args.warmup), "--dim",
               str(args.dim), "--layers", str(args.layers), "--heads", str(args.heads), "--gate", args.gate,
               "--threads", str(args.threads), "--seed", str(args.seed)] + (["--progress"] if args.progress else [])
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=_child_env(args.threads))
        if proc.returncode != 0:
            raise RuntimeError(f"the {n}-node run failed (exit {proc.returncode}); command: {' '.join(cmd)}")
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        for v in variants:
            r = res["results"][variant_name(**v)]
            rows.append({"nodes": n, "edges": res["edges"], "attn": v["attn"], "impl": v["impl"],
                         "gate": args.gate if v["impl"] == "siggate" else "none",
                         "train_s": round(statistics.median(r["times"]), 4), "peak_bytes": r["peak_bytes"],
                         "repeats": len(r["times"]), "times": [round(t, 4) for t in r["times"]],
                         "cpu_s": round(statistics.median(r["cpu_times"]), 4), "rss_base_bytes": r["rss_base_bytes"],
                         "params": r["params"], **({"pyg_head_channels": v["head_channels"]} if "head_channels" in v
                                                  else {})})
    return {"rows": rows, "skipped": skipped, "exponent": growth_exponents(rows),
            "speedup_vs_pyg": speedups(rows)}


def _child_env(threads: int) -> dict:
    env = dict(os.environ)
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[key] = str(threads)
    return env


def growth_exponents(rows: list[dict], lo: int = 10_000, hi: int = 100_000) -> dict:
    """Per siggate attention type: ``log(t_hi / t_lo) / log(hi / lo)`` of ``train_s``."""
    out = {}
    for attn in dict.fromkeys(r["attn"] for r in rows if r["impl"] == "siggate"):
        t = {r["nodes"]: r["train_s"] for r in rows if r["impl"] == "siggate" and r["attn"] == attn}
        if lo in t and hi in t:
            out[attn] = round(math.log(t[hi] / t[lo]) / math.log(hi / lo), 3)
    return out


def speedups(rows: list[dict]) -> list[dict]:
    """``train_s`` of each PyG model over each siggate attention type's, per size."""
    out = []
    for p in (r for r in rows if r["impl"] == "pyg"):
        for s in (r for r in rows if r["impl"] == "siggate" and r["nodes"] == p["nodes"]):
            out.append({"nodes": p["nodes"], "attn": s["attn"], "pyg_head_channels": p["pyg_head_channels"],
                        "speedup": round(p["train_s"] / s["train_s"], 3)})
    return out


def plot_scaling_large(res: dict, path: Path) -> None:
    from .plots import figure, loglog_panels, save_figure

    fig, axes = figure(2)
    keys = dict.fromkeys((r["attn"], r["impl"], r.get("pyg_head_channels")) for r in res["rows"])
    for attn, impl, hc in keys:
        rows = [r for r in res["rows"] if (r["attn"], r["impl"], r.get("pyg_head_channels")) == (attn, impl, hc)]
        label = f"siggate {attn}" if impl == "siggate" else f"PyG GPSConv performer (head_channels {hc})"
        style = "o-" if impl == "siggate" else "s--"
        n = [r["nodes"] for r in rows]
        axes[0].plot(n, [r["train_s"] for r in rows], style, label=label)
        axes[1].plot(n, [r["peak_bytes"] / 2**20 for r in rows], style, label=label)
    loglog_panels(axes, [("one training step (median)", "seconds"),
                         ("peak memory of a step (RSS high-water mark)", "MiB")], "nodes (SBM graph, average degree 10)")
    axes[0].axhline(10, color="k", lw=0.8, ls=":")
    axes[1].axhline(4096, color="k", lw=0.8, ls=":")
    axes[0].legend(fontsize=7)
    m = res["model"]
    save_figure(fig, path, f"{m['layers']} layers, dim {m['dim']}, {m['heads']} heads, {m['gate']} gate, GINE; "
                f"torch threads: {res['machine']['threads']}")


def main(argv: list[str] | None = None) -> int:
    """The subprocess entry point: one size, JSON on the last line of stdout."""
    p = argparse.ArgumentParser(prog="python -m siggate.perf.scaling_large", description=worker.__doc__)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--variants", required=True, help="JSON list of {attn, impl[, head_channels]}")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--gate", default="elementwise")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--progress", action="store_true")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    t0 = time.time()
    res = worker(a.nodes, json.loads(a.variants), a.repeats, a.warmup, a.dim, a.layers, a.heads, a.gate, a.seed,
                 a.progress)
    res["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
