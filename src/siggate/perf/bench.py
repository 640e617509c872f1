"""``siggate bench``: training/inference throughput and peak memory of SigGate-GT.

Variants, built from the protocol configs (``siggate/configs/{zinc,peptides-func}.yaml``)
with the same encoders, pooling, head and batches:

* ``none``, ``headwise``, ``elementwise``: :class:`siggate.nn.SigGateGT` with that gate;
* ``pyg``: the reference, a stack of PyG's own :class:`torch_geometric.nn.GPSConv`
  (``GINEConv(Sequential(Linear, ReLU, Linear))`` local model, ``attn_type="multihead"``,
  i.e. ``nn.MultiheadAttention``), between siggate's node/edge encoders and the same
  pooling and head (:class:`PyGReference`).

Timing protocol: after ``--warmup`` steps per variant, ``--repeats`` rounds; in each round
every variant runs the same ``--batches`` training steps (zero_grad, forward, loss,
backward, AdamW step) and then the same batches in inference (``eval()`` +
``inference_mode``), variants interleaved (the starting variant rotates each round).
A round gives graphs/s per variant; ratios are taken within a round (paired) and
summarised by their median and spread, which cancels most of the drift of a shared
machine.

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` over one training step; on CPU
the allocator events recorded by ``torch.profiler`` (``profile_memory=True``): every
tensor allocation and free during one training step, summed in time order; the peak of
that running sum is the tensor memory the step needs on top of what was resident
before it (parameters, optimizer state; gradients are released first by
``zero_grad(set_to_none=True)``). It counts tensor bytes exactly, unlike RSS (allocator
caching) or ``tracemalloc`` (blind to torch).

``--scaling``: one graph per batch, growing node counts; time and peak memory of a
training step and an inference pass, plotted to ``scaling.png``.

``--scaling-large``: one large graph (10^3 to 10^5 or 10^6 nodes), a training step of a
node classifier per attention type and PyG's Performer ``GPSConv``, each size in a fresh
subprocess (:mod:`siggate.perf.scaling_large`), to ``scaling_large.json`` and ``.png``.

The logic lives here so that the installed CLI works; ``benchmarks/throughput.py`` is a
thin script calling :func:`main`.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import torch
from torch import Tensor, nn

from ..config_args import CLIError, check_device, check_out_folder
from ..options import ATTN_TYPES, progress_enabled
from .args import LARGE_SIZES, SCALING_SIZES, VARIANTS, build_parser
from .timer import interleaved_round, rotated, timed

GATES = ("none", "headwise", "elementwise")
CONFIGS = {"zinc": "zinc", "peptides": "peptides-func"}
GIB = 1024**3


# ----------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict:
    """Versions, threads and processor of this run."""
    import torch_geometric

    info = {
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "device": str(device),
        "platform": platform.platform(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


# ----------------------------------------------------------------------------- models


class PyGReference(nn.Module):
    """The GraphGPS model assembled from PyG's :class:`~torch_geometric.nn.GPSConv`.

    Same node/edge encoders (:class:`siggate.nn.encoders.NodeEncoder`,
    :func:`~siggate.nn.encoders.make_edge_encoder`), pooling and MLP head as
    :class:`siggate.nn.SigGateGT`; each layer is
    ``GPSConv(dim, GINEConv(Sequential(Linear(dim, dim), ReLU(), Linear(dim, dim))), heads,
    dropout, attn_type="multihead", attn_kwargs={"dropout": attn_dropout})``, whose
    layout (BatchNorm after each residual branch, branches summed, FFN ``d -> 2d -> d``
    with a residual and BatchNorm) is the one of :class:`siggate.nn.GPSLayer`. GINE
    ``eps`` is a fixed 0 in both (a buffer in PyG, a frozen parameter in siggate). The
    edge stream is not updated (GINE). For ``local="gatedgcn"`` configs the reference
    still uses GINE: ``GPSConv`` cannot carry GatedGCN's edge-feature updates.

    Shapes: a PyG ``Batch`` with ``G`` graphs -> ``[G, T]``.
    """

    def __init__(self, num_tasks: int, dim: int, layers: int, heads: int, dropout: float, attn_dropout: float,
                 node_features: str, num_node_types: int, num_edge_types: int, pe: str, pe_steps: int,
                 pe_dim: int, pooling: str, head_layers: int, pool_norm: float = 1.0) -> None:
        super().__init__()
        from torch_geometric.nn import GINEConv, GPSConv

        from ..nn.encoders import NodeEncoder, make_edge_encoder
        from ..nn.model import mlp_head, pool_graphs

        self.pool = partial(pool_graphs, pooling=pooling, norm=pool_norm)
        self.node_encoder = NodeEncoder(node_features, dim, num_node_types, pe, pe_steps, pe_dim)
        self.edge_encoder = make_edge_encoder(node_features, dim, num_edge_types)
        self.layers = nn.ModuleList(
            GPSConv(dim, GINEConv(nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))), heads=heads,
                    dropout=dropout, attn_type="multihead", attn_kwargs={"dropout": attn_dropout})
            for _ in range(layers)
        )
        self.head = mlp_head(dim, head_layers, num_tasks)

    def forward(self, data) -> Tensor:
        x = self.node_encoder(data)
        e = self.edge_encoder(data.edge_attr)
        for layer in self.layers:
            x = layer(x, data.edge_index, data.batch, edge_attr=e)
        return self.head(self.pool(x, data.batch, data.num_graphs))


def model_kwargs(cfg_name: str, info, overrides: dict | None = None) -> dict:
    """Model hyper-parameters of a protocol config, with the dataset's feature layout."""
    from ..config import load_config

    m = load_config(cfg_name).model.to_dict()
    keys = ("dim", "layers", "heads", "local", "dropout", "attn_dropout", "pe", "pe_steps", "pe_dim", "pooling",
            "pool_norm", "head_layers")
    kw = {k: m[k] for k in keys}
    overrides = dict(overrides or {})
    if "dim" in overrides and kw["pe"] != "none":  # keep the positional share of the width
        overrides.setdefault("pe_dim", max(1, round(kw["pe_dim"] * overrides["dim"] / kw["dim"])))
    kw.update(overrides)
    kw.update(num_tasks=info.num_tasks, node_features=info.node_features, num_node_types=info.num_node_types,
              num_edge_types=info.num_edge_types)
    return kw


def build_model(variant: str, kw: dict, seed: int = 0) -> nn.Module:
    """``variant`` in :data:`VARIANTS`; ``kw`` from :func:`model_kwargs`."""
    from ..nn import SigGateGT

    torch.manual_seed(seed)
    if variant == "pyg":
        kw = {k: v for k, v in kw.items() if k != "local"}
        return PyGReference(**kw)
    return SigGateGT(gate=variant, **kw)


def count_params(model: nn.Module) -> dict:
    return {
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in model.parameters()),
    }


def make_optimizer(model: nn.Module, kind: str, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW; ``kind`` ``"fused"`` (one kernel for all parameters), ``"foreach"`` or
    ``"forloop"`` (PyTorch's default on CPU, one small op per tensor and step)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opts = {"fused": {"fused": True}, "foreach": {"foreach": True}, "forloop": {"foreach": False}}[kind]
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, **opts)


# ----------------------------------------------------------------------------- data


def synthetic_molecule(n: int, seed: int, node_features: str = "ogb", num_node_types: int = 28,
                       num_edge_types: int = 4, num_tasks: int = 1):
    """A molecule-like graph of ``n`` nodes: a chain with a 6-ring closed every 6 atoms
    (degree 2-3, like aromatic chains), random OGB-range categorical features."""
    from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    src = list(range(n - 1))
    dst = list(range(1, n))
    for i in range(0, n - 5, 6):
        src.append(i)
        dst.append(i + 5)
    ei = torch.tensor([src, dst], dtype=torch.long)
    ei = torch.cat([ei, ei.flip(0)], 1) if n > 1 else torch.zeros(2, 0, dtype=torch.long)
    e = ei.size(1)
    if node_features == "ogb":
        x = torch.stack([torch.randint(0, min(k, 6), (n,), generator=g) for k in get_atom_feature_dims()], 1)
        ea = torch.stack([torch.randint(0, min(k, 3), (e,), generator=g) for k in get_bond_feature_dims()], 1)
    else:
        x = torch.randint(0, num_node_types, (n, 1), generator=g)
        ea = torch.randint(1, num_edge_types, (e, 1), generator=g)
    return Data(x=x, edge_index=ei, edge_attr=ea, y=torch.zeros(1, num_tasks), num_nodes=n)


def _synthetic_info(kind: str):
    from ..data.base import TaskInfo

    if kind == "peptides":
        return TaskInfo(name="synthetic-peptides", task="multilabel", num_tasks=10, metric="ap")
    return TaskInfo(name="synthetic", task="regression", num_tasks=1, metric="mae")


def _nci5k_fallback(n_graphs: int, seed: int):
    """NCI-5K molecules featurized here (used when the dataset registry is unavailable)."""
    import random

    from rdkit import RDConfig

    from ..data.base import TaskInfo
    from ..data.chem import InvalidSmiles, smiles_to_graph

    path = Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"
    lines = [ln.split()[0] for ln in path.read_text().splitlines() if ln.strip()]
    random.Random(seed).shuffle(lines)
    graphs = []
    for smi in lines:
        try:
            g = smiles_to_graph(smi)
        except InvalidSmiles:
            continue
        g.y = torch.zeros(1, 1)
        graphs.append(g)
        if len(graphs) >= n_graphs:
            break
    return graphs, TaskInfo(name="nci5k", task="regression", num_tasks=1, metric="mae")


def load_graphs(config: str, dataset: str, n_graphs: int, seed: int, data_root=None, cache_dir=None):
    """Real graphs for a benchmark config (positional encodings added here).

    ``config`` ``"zinc"``: ``dataset`` ``"auto"`` takes ZINC when it loads from the data
    root, else NCI-5K (molecules of RDKit's ``first_5K.smi``); ``"peptides"``:
    Peptides-func (the first build featurizes 15,535 peptides, then it is cached).
    ``"synthetic"``: molecule-like chains (tests). Returns ``(graphs, info, source)``.
    """
    import random

    def sample(graphs):
        rng = random.Random(seed)
        return [graphs[i].clone() for i in rng.sample(range(len(graphs)), min(n_graphs, len(graphs)))]

    if dataset == "synthetic":
        rng = random.Random(seed)
        lo, hi = (50, 300) if config == "peptides" else (8, 40)
        graphs = [synthetic_molecule(rng.randint(lo, hi), seed + i, num_tasks=10 if config == "peptides" else 1)
                  for i in range(n_graphs)]
        info, source = _synthetic_info(config), "synthetic molecule-like chains"
    else:
        from ..data.catalog import get_dataset

        if config == "peptides":
            ds = get_dataset("peptides-func", root=data_root, cache_dir=cache_dir)
            graphs, info, source = sample(ds.train), ds.info, "peptides-func (train split)"
        else:
            graphs = None
            if dataset in ("auto", "zinc"):
                try:
                    ds = get_dataset("zinc", root=data_root, cache_dir=cache_dir, download=False)
                    graphs, info, source = sample(ds.train), ds.info, "zinc (train split)"
                except Exception as exc:  # noqa: BLE001 - any failure means: use NCI-5K
                    if dataset == "zinc":
                        raise
                    print(f"siggate bench: ZINC not available ({type(exc).__name__}: {exc}); using NCI-5K",
                          file=sys.stderr)
            if graphs is None:
                try:
                    ds = get_dataset("nci5k", cache_dir=cache_dir)
                    graphs, info, source = sample(ds.train), ds.info, "nci5k (train split)"
                except Exception as exc:  # noqa: BLE001
                    print(f"siggate bench: nci5k loader failed ({exc}); featurizing first_5K.smi", file=sys.stderr)
                    graphs, info = _nci5k_fallback(n_graphs, seed)
                    source = "nci5k (first_5K.smi featurized by the benchmark)"
    for g in graphs:
        for key in ("rwse", "lap_vec", "lap_val", "smiles"):
            if key in g:
                delattr(g, key)
        g.y = torch.nan_to_num(g.y.float().view(1, -1))
    return graphs, info, source


def make_batches(graphs: list, batch_size: int, n_batches: int, seed: int) -> list:
    """``n_batches`` batches of ``batch_size`` graphs drawn like a shuffled loader."""
    import random

    from torch_geometric.data import Batch

    rng = random.Random(seed)
    order: list[int] = []
    out = []
    for _ in range(n_batches):
        while len(order) < batch_size:
            perm = list(range(len(graphs)))
            rng.shuffle(perm)
            order += perm
        idx, order = order[:batch_size], order[batch_size:]
        out.append(Batch.from_data_list([graphs[i] for i in idx]))
    return out


def batch_stats(batches: list) -> dict:
    nodes = [int(n) for b in batches for n in torch.bincount(b.batch, minlength=b.num_graphs).tolist()]
    real = sum(nodes)
    padded = sum(b.num_graphs * int(torch.bincount(b.batch).max()) for b in batches)
    return {
        "graphs_per_batch": batches[0].num_graphs,
        "nodes_mean": round(real / len(nodes), 2),
        "nodes_max": max(nodes),
        "edges_mean": round(sum(int(b.edge_index.size(1)) for b in batches) / len(nodes), 2),
        "dense_padding_fraction": round(1 - real / padded, 3),
    }


# ----------------------------------------------------------------------------- steps


def _autocast(device: torch.device, bf16: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()


def train_step(model, opt, batch, crit, device, bf16: bool) -> None:
    with _autocast(device, bf16):
        out = model(batch)
        loss = crit(out.float(), batch.y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def infer_step(model, batch, device, bf16: bool) -> None:
    """One inference pass; a siggate model runs as its inference transform
    (``for_inference()``: BatchNorms folded; folded again only when the weights changed, so
    once per round, after its training steps), the same model in float32
    (``for_inference`` folds in one dtype, so not under ``--bf16``)."""
    with torch.inference_mode(), _autocast(device, bf16):
        fold = getattr(model, "for_inference", None)
        (fold() if fold is not None and not bf16 else model)(batch)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_train_memory(model, opt, batch, crit, device, bf16: bool) -> int:
    """Peak tensor bytes allocated during one training step above what was resident
    before it (see the module docstring)."""
    model.train()
    opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        train_step(model, opt, batch, crit, device, bf16)
        _sync(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        train_step(model, opt, batch, crit, device, bf16)
    return _peak_from_profile(prof)


def peak_infer_memory(model, batch, device, bf16: bool) -> int:
    model.eval()
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        infer_step(model, batch, device, bf16)
        _sync(device)
        return int(torch.cuda.max_memory_allocated(device) - base)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        infer_step(model, batch, device, bf16)
    return _peak_from_profile(prof)


def _peak_from_profile(prof) -> int:
    events = [(e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type().name == "CPU"]
    events.sort(key=lambda t: t[0])
    cur = peak = 0
    for _, nbytes in events:
        cur += nbytes
        peak = max(peak, cur)
    return int(peak)


def resident_bytes(model, opt) -> int:
    """Parameters, buffers and optimizer state."""
    n = sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))
    for state in opt.state.values():
        n += sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v))
    return int(n)


# ----------------------------------------------------------------------------- statistics


def summarize(values: list[float]) -> dict:
    v = sorted(values)
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return {"median": statistics.median(v), "q25": q[0], "q75": q[2], "min": v[0], "max": v[-1], "n": len(v)}


def _r(x: dict, nd: int = 4) -> dict:
    return {k: (round(val, nd) if isinstance(val, float) else val) for k, val in x.items()}


# ----------------------------------------------------------------------------- throughput


class _Setup:
    """What one config's benchmark runs on: batches, models, optimizers and the loss."""

    def __init__(self, config: str, args, device: torch.device) -> None:
        from ..config import load_config
        from ..data.pe import add_pe
        from ..train.losses import loss_fn

        self.cfg_name = CONFIGS[config]
        cfg = load_config(self.cfg_name)
        batch_size = args.batch_size or cfg.train.batch_size
        overrides = {k: v for k, v in (("layers", args.layers), ("dim", args.dim)) if v}
        n_graphs = max(batch_size * args.batches, 256) if args.dataset != "synthetic" else batch_size * args.batches
        graphs, info, self.source = load_graphs(config, args.dataset, n_graphs, args.seed, args.data_root,
                                                args.cache_dir)
        self.kw = kw = model_kwargs(self.cfg_name, info, overrides)
        if kw["pe"] == "rwse":
            add_pe(graphs, rwse_steps=kw["pe_steps"])
        elif kw["pe"] == "lappe":
            add_pe(graphs, lap_dim=kw["pe_steps"])
        self.batches = [b.to(device) for b in make_batches(graphs, batch_size, args.batches, args.seed)]
        self.crit = loss_fn(cfg.train.loss, info.task)  # the training loop's loss (labels masked where missing)
        self.variants = list(args.variants)
        self.models = {v: build_model(v, kw, args.seed).to(device) for v in self.variants}
        self.opts = {v: make_optimizer(self.models[v], args.optimizer, cfg.train.lr, cfg.train.weight_decay)
                     for v in self.variants}
        self.params = {v: count_params(m) for v, m in self.models.items()}
        self.device, self.bf16 = device, args.bf16

    def step(self, kind: str, v: str, b) -> None:
        """One training step (``kind="train"``) or inference pass of variant ``v`` on batch ``b``."""
        m = self.models[v]
        if kind == "train":
            m.train()
            train_step(m, self.opts[v], b, self.crit, self.device, self.bf16)
        else:
            m.eval()
            infer_step(m, b, self.device, self.bf16)
        _sync(self.device)

    def memory(self) -> dict:
        """Peak and resident memory of every variant on the largest batch."""
        big = max(self.batches, key=lambda b: b.num_nodes)
        mem = {}
        for v in self.variants:
            m, opt = self.models[v], self.opts[v]
            mem[v] = {
                "train_peak_bytes": peak_train_memory(m, opt, big, self.crit, self.device, self.bf16),
                "infer_peak_bytes": peak_infer_memory(m, big, self.device, self.bf16),
                "resident_bytes": resident_bytes(m, opt),
                "batch_nodes": int(big.num_nodes),
            }
        return mem


def _time_interleaved(setup: _Setup, repeats: int) -> tuple[dict, dict]:
    """Interleaved at the step level: for every batch each variant runs once, the order
    rotating (:func:`siggate.perf.timer.interleaved_round`); a round is one pass over the
    batches, training then inference, and gives one total time per variant and kind.
    Returns ``(wall, cpu)``, each ``{(kind, variant): [seconds per round]}``."""
    wall = {(k, v): [0.0] * repeats for k in ("train", "infer") for v in setup.variants}
    cpu = {(k, v): [0.0] * repeats for k in ("train", "infer") for v in setup.variants}
    i = 0
    for r in range(repeats):
        for kind in ("train", "infer"):
            per_job = interleaved_round(setup.variants, setup.batches, lambda v, b: setup.step(kind, v, b), first=i + 1)
            i += len(setup.batches)
            for times in per_job:
                for v, (w, c) in times.items():
                    wall[kind, v][r] += w
                    cpu[kind, v][r] += c
    return wall, cpu


def _ratios(res: dict, variants: list, wall: dict, cpu: dict, n_g: int) -> None:
    """Add throughputs, paired speed ratios and gate overheads (wall and CPU clocks) to ``res``."""
    for kind in ("train", "infer"):
        res["graphs_per_s"][kind] = {v: _r(summarize([n_g / t for t in wall[kind, v]]), 2) for v in variants}
    for name, clock in (("ratios", wall), ("cpu_ratios", cpu)):
        res[name] = {}
        for base in ("pyg", "none"):
            if base not in variants:
                continue
            for kind in ("train", "infer"):
                for v in variants:
                    if v == base:
                        continue
                    paired = [tb / tv for tv, tb in zip(clock[kind, v], clock[kind, base])]  # speed v / speed base
                    res[name][f"{kind}_{v}_vs_{base}"] = _r(summarize(paired))
    res["cpu_graphs_per_s"] = {kind: {v: _r(summarize([n_g / t for t in cpu[kind, v]]), 2) for v in variants}
                               for kind in ("train", "infer")}
    if "none" in variants:
        for v in ("headwise", "elementwise"):
            if v in variants:
                over = [tv / tn - 1 for tv, tn in zip(wall["train", v], wall["train", "none"])]
                res[f"overhead_{v}"] = _r(summarize(over))
                over = [tv / tn - 1 for tv, tn in zip(cpu["train", v], cpu["train", "none"])]
                res[f"cpu_overhead_{v}"] = _r(summarize(over))


def bench_config(config: str, args, device: torch.device) -> dict:
    """Interleaved timing and memory of every variant on one config; returns a dict."""
    setup = _Setup(config, args, device)
    variants, kw, params = setup.variants, setup.kw, setup.params
    for v in variants:  # warm-up: allocator, lazy optimizer state, first-call paths
        for _ in range(args.warmup):
            for b in setup.batches[: min(len(setup.batches), 2)]:
                setup.step("train", v, b)
                setup.step("infer", v, b)
    t_start = time.time()
    wall, cpu = _time_interleaved(setup, args.repeats)
    timed_s = time.time() - t_start
    mem = setup.memory()
    res = {
        "config": setup.cfg_name,
        "data": setup.source,
        "batches": batch_stats(setup.batches),
        "model": {k: kw[k] for k in ("dim", "layers", "heads", "local", "attn_dropout", "dropout", "pe", "pe_steps",
                                     "pe_dim", "pooling", "head_layers", "node_features")},
        "reference_local": "gine",
        "optimizer": f"AdamW ({args.optimizer})",
        "loss": setup.crit.__name__,
        "repeats": args.repeats,
        "batches_per_round": len(setup.batches),
        "warmup": args.warmup,
        "timed_seconds": round(timed_s, 1),
        "clock": "wall (perf_counter); cpu_* entries use process_time",
        "params": params,
        "graphs_per_s": {},
        "memory": mem,
    }
    _ratios(res, variants, wall, cpu, sum(b.num_graphs for b in setup.batches))
    if "pyg" in variants and "none" in variants:
        res["peak_mem_ratio_vs_pyg"] = round(mem["none"]["train_peak_bytes"] / max(1, mem["pyg"]["train_peak_bytes"]), 4)
        res["param_rel_diff_none_vs_pyg"] = round(
            abs(params["none"]["trainable"] - params["pyg"]["trainable"]) / params["pyg"]["trainable"], 6)
    return res


def _top_level(zinc: dict) -> dict:
    r = zinc["ratios"]
    get = lambda key: r[key]["median"] if key in r else None  # noqa: E731
    return {
        "train_ratio_vs_pyg": get("train_none_vs_pyg"),
        "infer_ratio_vs_pyg": get("infer_none_vs_pyg"),
        "overhead_headwise": zinc.get("overhead_headwise", {}).get("median"),
        "overhead_elementwise": zinc.get("overhead_elementwise", {}).get("median"),
        "peak_mem_ratio_vs_pyg": zinc.get("peak_mem_ratio_vs_pyg"),
        "params": {v: p["trainable"] for v, p in zinc["params"].items()},
    }


def print_table(res: dict, file=None) -> None:
    file = file or sys.stdout  # looked up per call: a default bound at import outlives a captured stdout
    gps = res["graphs_per_s"]
    print(f"\n{res['config']} on {res['data']}: {res['batches']}", file=file)
    print(f"{'variant':12s} {'train g/s':>10s} {'[q25,q75]':>17s} {'infer g/s':>10s} {'[q25,q75]':>17s} "
          f"{'train peak MiB':>14s} {'params':>9s}", file=file)
    for v in gps["train"]:
        t, i = gps["train"][v], gps["infer"][v]
        mib = res["memory"][v]["train_peak_bytes"] / 2**20
        tq = "[%.0f, %.0f]" % (t["q25"], t["q75"])
        iq = "[%.0f, %.0f]" % (i["q25"], i["q75"])
        print(f"{v:12s} {t['median']:10.1f} {tq:>17s} {i['median']:10.1f} {iq:>17s} {mib:14.1f} "
              f"{res['params'][v]['trainable']:9d}", file=file)
    print("  speed ratios (paired per round; median [IQR]), wall clock | CPU time:", file=file)
    for key, val in res["ratios"].items():
        if not key.endswith("_vs_pyg"):
            continue
        c = res["cpu_ratios"][key]
        print(f"  {key:28s} {val['median']:.3f} [{val['q25']:.3f}, {val['q75']:.3f}] | "
              f"{c['median']:.3f} [{c['q25']:.3f}, {c['q75']:.3f}]", file=file)
    for v in ("headwise", "elementwise"):
        if f"overhead_{v}" in res:
            o, c = res[f"overhead_{v}"], res[f"cpu_overhead_{v}"]
            print(f"  overhead {v:11s} (train step vs none) {100 * o['median']:+.1f}% "
                  f"[{100 * o['q25']:+.1f}%, {100 * o['q75']:+.1f}%] | {100 * c['median']:+.1f}% "
                  f"[{100 * c['q25']:+.1f}%, {100 * c['q75']:+.1f}%]", file=file)
    if "peak_mem_ratio_vs_pyg" in res:
        print(f"  peak train memory none/pyg {res['peak_mem_ratio_vs_pyg']:.3f}", file=file)


# ----------------------------------------------------------------------------- scaling


def run_scaling(args, device: torch.device) -> dict:
    """Batch of one graph of each size: seconds per training step / inference, peak memory."""
    from torch_geometric.data import Batch

    from ..config import load_config
    from ..data.base import TaskInfo
    from ..data.pe import add_pe
    from ..train.losses import loss_fn

    cfg = load_config("zinc")
    info = TaskInfo(name="synthetic", task="regression", num_tasks=1, metric="mae")
    overrides = {k: v for k, v in (("layers", args.layers), ("dim", args.dim)) if v}
    kw = model_kwargs("zinc", info, overrides)
    variants = list(args.variants)
    models = {v: build_model(v, kw, args.seed).to(device) for v in variants}
    opts = {v: make_optimizer(models[v], args.optimizer, cfg.train.lr, cfg.train.weight_decay) for v in variants}
    crit = loss_fn("l1", "regression")
    sizes = list(args.sizes)
    rows = []
    for n in sizes:
        g = synthetic_molecule(n, args.seed + n)
        add_pe([g], rwse_steps=kw["pe_steps"])
        batch = Batch.from_data_list([g]).to(device)
        for v in variants:
            models[v].train()
            for _ in range(args.warmup):  # (one step, whatever --warmup said, before it was read)
                train_step(models[v], opts[v], batch, crit, device, args.bf16)
        t_train = {v: [] for v in variants}
        t_infer = {v: [] for v in variants}
        reps = max(1, args.repeats if n <= 500 else max(1, args.repeats // 3))
        for r in range(reps):
            for v in rotated(variants, r):
                models[v].train()
                t_train[v].append(timed(lambda: (train_step(models[v], opts[v], batch, crit, device, args.bf16),
                                                 _sync(device)))[0])
                models[v].eval()
                t_infer[v].append(timed(lambda: (infer_step(models[v], batch, device, args.bf16), _sync(device)))[0])
        for v in variants:
            row = {
                "nodes": n,
                "edges": int(g.edge_index.size(1)),
                "variant": v,
                "train_s": round(statistics.median(t_train[v]), 5),
                "infer_s": round(statistics.median(t_infer[v]), 5),
                "train_peak_bytes": peak_train_memory(models[v], opts[v], batch, crit, device, args.bf16),
                "infer_peak_bytes": peak_infer_memory(models[v], batch, device, args.bf16),
                "resident_bytes": resident_bytes(models[v], opts[v]),
                "repeats": reps,
            }
            row["train_total_bytes"] = row["train_peak_bytes"] + row["resident_bytes"]
            rows.append(row)
            print(f"  n={n:5d} {v:12s} train {row['train_s']:8.4f} s  infer {row['infer_s']:8.4f} s  "
                  f"train peak {row['train_peak_bytes'] / 2**20:9.1f} MiB  infer peak "
                  f"{row['infer_peak_bytes'] / 2**20:8.1f} MiB", flush=True)
    largest = max(sizes)
    check = {v: next(r["train_total_bytes"] for r in rows if r["nodes"] == largest and r["variant"] == v)
             for v in variants}
    return {
        "model": {k: kw[k] for k in ("dim", "layers", "heads", "local", "attn_dropout", "pe", "pe_steps", "pe_dim")},
        "graph": "synthetic molecule-like chain, 6-rings every 6 atoms, OGB-range features, RWSE",
        "sizes": sizes,
        "warmup_steps": args.warmup,  # training steps per model and size before its timed rounds
        "rows": rows,
        "largest": largest,
        "train_total_bytes_at_largest": check,
        "fits_4gib_at_largest": {v: b <= 4 * GIB for v, b in check.items()},
    }


def plot_scaling(res: dict, path: Path) -> None:
    from .plots import figure, loglog_panels, save_figure

    fig, axes = figure(2)
    variants = list(dict.fromkeys(r["variant"] for r in res["rows"]))
    for v in variants:
        rows = [r for r in res["rows"] if r["variant"] == v]
        n = [r["nodes"] for r in rows]
        line, = axes[0].plot(n, [r["train_s"] for r in rows], "o-", label=f"{v} train step")
        axes[0].plot(n, [r["infer_s"] for r in rows], "s--", color=line.get_color(), alpha=0.6,
                     label=f"{v} inference")
        axes[1].plot(n, [r["train_peak_bytes"] / 2**20 for r in rows], "o-", color=line.get_color(),
                     label=f"{v} train step")
        axes[1].plot(n, [r["infer_peak_bytes"] / 2**20 for r in rows], "s--", color=line.get_color(), alpha=0.6,
                     label=f"{v} inference")
    loglog_panels(axes, [("time per graph (batch of one)", "seconds"), ("peak tensor memory per graph", "MiB")],
                  "nodes")
    axes[1].axhline(4096, color="k", lw=0.8, ls=":")
    axes[1].text(res["sizes"][0], 4096 * 1.1, "4 GiB", fontsize=8)
    axes[0].legend(fontsize=7)
    m = res["model"]
    save_figure(fig, path, f"SigGate-GT scaling: {m['layers']} layers, dim {m['dim']}, {m['heads']} heads, "
                f"attn dropout {m['attn_dropout']}, torch threads: {res['machine']['threads']}")


# ----------------------------------------------------------------------------- CLI


def _parser_defaults() -> dict:
    """Every option's default, as the parser gives it when no flag is given."""
    return vars(build_parser().parse_args([]))


def _command_line(args) -> str:
    """The ``siggate bench`` command that reproduces ``args``."""
    defaults = _parser_defaults()
    parts = ["siggate bench"]
    for key, val in vars(args).items():
        if key in ("func", "command", "command_line", "verbose") or key not in defaults:
            continue
        if isinstance(val, list):
            val = ",".join(map(str, val))
        if val == defaults[key] or val is None or val is False:
            continue
        flag = "--" + key.replace("_", "-")
        parts.append(flag if val is True else f"{flag} {shlex.quote(str(val))}")
    return " ".join(parts)


#: the options each mode reads (attribute names); any other given flag is refused, not ignored:
#: --scaling measured the zinc model under --config peptides, --scaling-large ran without --bf16, and
#: each recorded the flag in its command line as if it had been applied
MODE_READS = {
    "": {"config", "dataset", "data_root", "cache_dir", "repeats", "warmup", "batches", "batch_size", "layers",
         "dim", "variants", "optimizer", "device", "bf16", "threads", "seed", "out", "note"},
    "--scaling": {"repeats", "warmup", "layers", "dim", "variants", "optimizer", "device", "bf16", "threads", "seed",
                  "out", "sizes", "note"},
    "--scaling-large": {"repeats", "warmup", "layers", "dim", "attn_types", "pyg_head_channels", "full_max_nodes",
                        "heads", "gate", "device", "threads", "seed", "out", "sizes", "note"},
}
#: read by every mode, or no measurement's option
_ANY_MODE = {"scaling", "scaling_large", "progress", "func", "command", "command_line", "verbose"}


def _unread_flags(args) -> str | None:
    """Why ``args`` give a flag that their mode does not read (the flags named, the mode's words), or None."""
    mode = "--scaling-large" if args.scaling_large else "--scaling" if args.scaling else ""
    defaults = _parser_defaults()
    unread = ["--" + key.replace("_", "-") for key, val in vars(args).items()
              if key in defaults and key not in _ANY_MODE and key not in MODE_READS[mode] and val != defaults[key]
              and not (key == "dataset" and val == "synthetic")]  # (the scaling modes' graphs are synthetic)
    if not unread:
        return None
    what = {"": "the benchmark of the protocol configs", "--scaling": "--scaling (the zinc model on one synthetic "
            "molecule per size)", "--scaling-large": "--scaling-large (a node classifier on one SBM graph per size)"}
    keys = {flag[2:].replace("-", "_") for flag in unread}
    readers = [m or "the protocol benchmark" for m, reads in MODE_READS.items() if keys & reads]
    return (f"{what[mode]} does not read {', '.join(unread)}"
            + (f" (read by {' and '.join(readers)})" if readers else "")
            + f"; drop {'it' if len(unread) == 1 else 'them'}")


def check_args(args) -> None:
    """Refuse, in one line (:class:`~siggate.config_args.CLIError`), options the benchmark cannot
    run with: they ended in a traceback (``--repeats 0``: IndexError; ``--variants ''``:
    ZeroDivisionError) or were replaced by the config's values without a word (``--dim 0``,
    while ``bench.json`` recorded the 0), and flags the chosen mode does not read
    (:data:`MODE_READS`)."""
    if args.scaling and args.scaling_large:
        raise CLIError("--scaling and --scaling-large are two benchmarks; give one")
    why = _unread_flags(args)
    if why:
        raise CLIError(why)
    args.variants = [v.strip() for v in str(args.variants).split(",") if v.strip()]
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad or not args.variants:
        raise CLIError(f"--variants: {'unknown ' + ', '.join(map(repr, bad)) if bad else 'none given'}; choose "
                       f"from {','.join(VARIANTS)}")
    # --scaling-large's first step is its warm-up and memory measurement: at least one (0 was recorded as 0)
    warmup_low = 1 if args.scaling_large else 0
    for flag, value, low in (("--repeats", args.repeats, 1), ("--batches", args.batches, 1),
                             ("--warmup", args.warmup, warmup_low),
                             ("--batch-size", args.batch_size, 1), ("--layers", args.layers, 1), ("--dim", args.dim, 1),
                             ("--heads", args.heads, 1)):
        if value is not None and value < low:
            raise CLIError(f"{flag} {value}: give a whole number >= {low}")
    if args.scaling_large:
        dim = args.dim or LARGE_DIM  # (the default's too: --heads 3 failed in the first size's subprocess)
        if dim % args.heads:
            raise CLIError(f"--dim {dim} is not divisible by --heads {args.heads}: choose a width that is"
                           + ("" if args.dim else f" (--dim's default with --scaling-large is {LARGE_DIM})"))
        large_variants(args)
    if args.dim and not args.scaling_large:  # the protocol configs' heads
        from ..config import load_config

        for name in (["zinc", "peptides"] if args.config == "both" else [args.config]):
            heads = load_config(CONFIGS[name]).model.heads
            if args.dim % heads:
                raise CLIError(f"--dim {args.dim} is not divisible by the {name} config's {heads} heads: choose a "
                               "width that is")
    if args.dataset != "synthetic" and not (args.scaling or args.scaling_large):
        from ..data.base import checked_data_root

        checked_data_root(args.data_root)  # a misspelt root read as "no ZINC here": NCI-5K's graphs measured instead
    if args.sizes:
        try:
            sizes = _ints(args.sizes)
        except ValueError:
            raise CLIError(f"--sizes {args.sizes!r}: give node counts separated by commas, e.g. 100,1000") from None
        if args.scaling_large:  # the generator's smallest graph for its blocks and degree (20 failed in a subprocess)
            from ..data.sbm_large import smallest_num_nodes

            least = smallest_num_nodes()
        else:  # a graph of one node fails the BatchNorm of training
            least = 2
        if not sizes or min(sizes) < least:
            raise CLIError(f"--sizes {args.sizes!r}: give node counts >= {least} separated by commas, e.g. 100,1000")
    if args.scaling_large:
        if args.full_max_nodes < 1:
            raise CLIError(f"--full-max-nodes {args.full_max_nodes}: give a whole number >= 1")
        types, widths = large_variants(args)
        over = [n for n in (_ints(args.sizes) if args.sizes else LARGE_SIZES) if n > args.full_max_nodes]
        if types == ["full"] and not widths and over:  # (a size with no model failed in its subprocess)
            raise CLIError(f"full attention stops at --full-max-nodes {args.full_max_nodes}, and no other model runs "
                           f"at {over[0]} nodes; add performer or exphormer to --attn-types or --pyg-head-channels, "
                           "or raise --full-max-nodes")
    check_device(args.device)


def run(args) -> dict:
    """Run the benchmark described by parsed ``args``; prints a table and returns the result."""
    check_args(args)
    args.command_line = _command_line(args)  # as given: the defaults filled in below were recorded as given flags
    large = args.scaling_large
    args.sizes = _ints(args.sizes) if args.sizes else list(LARGE_SIZES if large else SCALING_SIZES)
    args.repeats = args.repeats if args.repeats is not None else (3 if large else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if large else 3)
    if large:
        args.attn_types, args.pyg_head_channels = large_variants(args)
        args.threads = args.threads or 1
        args.layers, args.dim = args.layers or LARGE_LAYERS, args.dim or LARGE_DIM
        args.progress = progress_enabled(args)
    threads = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        return _run(args)
    finally:
        torch.set_num_threads(threads)


#: --scaling-large's model where --layers and --dim are not given
LARGE_LAYERS, LARGE_DIM = 4, 64


def large_variants(args) -> tuple[list[str], list[int]]:
    """``--scaling-large``'s siggate attention types and PyG head widths from ``--attn-types`` and
    ``--pyg-head-channels``; at least one model in all.

    Raises:
        CLIError: an unknown type, a width that is not a whole number >= 1, or no model at all (each
            failed as a traceback, or in the first size's subprocess)."""
    types = [t.strip() for t in str(args.attn_types).split(",") if t.strip()]
    bad = [t for t in types if t not in ATTN_TYPES]
    if bad:
        raise CLIError(f"--attn-types: unknown {', '.join(map(repr, bad))}; choose from {','.join(ATTN_TYPES)}")
    try:
        widths = _ints(args.pyg_head_channels)
    except ValueError:
        widths = None
    if widths is None or any(w < 1 for w in widths):
        raise CLIError(f"--pyg-head-channels {args.pyg_head_channels!r}: give whole numbers >= 1 separated by commas "
                       "(e.g. 64,16), or nothing for no PyG model")
    if not types and not widths:
        raise CLIError("--attn-types and --pyg-head-channels name no model: give at least one")
    return types, widths


def _ints(text) -> list[int]:
    return [int(s) for s in str(text).split(",") if s.strip()]


def _loadavg() -> list | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _run(args) -> dict:
    load_start = _loadavg()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: CUDA is not available")
    device = torch.device(args.device)
    out = Path(args.out) if args.out else None
    if out:
        check_out_folder(out, "the benchmark")
        written = "scaling_large.json" if args.scaling_large else "scaling.json" if args.scaling else "bench.json"
        if (out / written).exists():  # an earlier measurement, replaced without a word before
            raise CLIError(f"--out {out} holds {written} from an earlier benchmark; choose another --out, or move "
                           "it away first (its numbers would be lost)")
        out.mkdir(parents=True, exist_ok=True)
    command = getattr(args, "command_line", None) or _command_line(args)
    if args.scaling_large:
        return _run_scaling_large(args, device, out, command, load_start)
    if args.scaling:
        res = run_scaling(args, device)
        res["machine"] = dict(machine_info(device), loadavg_start=load_start, loadavg_end=_loadavg())
        res.update({"note": args.note} if args.note else {})
        res["command"] = command
        if out:
            (out / "scaling.json").write_text(json.dumps(res, indent=2) + "\n")
            plot_scaling(res, out / "scaling.png")
            print(f"siggate bench: wrote {out / 'scaling.json'} and {out / 'scaling.png'}")
        return res
    configs = ["zinc", "peptides"] if args.config == "both" else [args.config]
    results = {}
    for c in configs:
        results[c] = bench_config(c, args, device)
        print_table(results[c])
    res: dict = {}
    if "zinc" in results:
        res.update(_top_level(results["zinc"]))
    res["machine"] = dict(machine_info(device), loadavg_start=load_start, loadavg_end=_loadavg())
    res.update({"note": args.note} if args.note else {})
    res["command"] = command
    res["configs"] = results
    if out:
        (out / "bench.json").write_text(json.dumps(res, indent=2) + "\n")
        print(f"siggate bench: wrote {out / 'bench.json'}")
    return res


def _run_scaling_large(args, device: torch.device, out: Path | None, command: str, load_start) -> dict:
    from .scaling_large import plot_scaling_large, run_scaling_large

    if device.type != "cpu":
        raise ValueError("--scaling-large measures the CPU (RSS); run it without --device cuda")
    res = run_scaling_large(args)
    res["model"] = {"dim": args.dim, "layers": args.layers, "heads": args.heads, "gate": args.gate, "local": "gine",
                    "dropout": 0.0, "attn_dropout": 0.0, "optimizer": "AdamW (lr 1e-3)", "loss": "cross-entropy, "
                    "training nodes", "attn_kwargs": "siggate defaults: performer 64 features, exphormer expander "
                    "degree 4 and 1 virtual node"}
    res["graph"] = "siggate.data.sbm.sbm_large_graph(n, seed): 10 blocks, average degree 10, p_ratio 4, 16 features"
    res["memory"] = ("RSS high-water mark of the first (warm-up) step above the RSS before it, in a fresh process per "
                     "size (malloc_trim, then /proc/self/clear_refs resets VmHWM)")
    res["timing"] = (f"median wall-clock seconds of {args.repeats} steps per model after {args.warmup} warm-up "
                     "step(s), models alternating with rotating order; cpu_s: median process CPU time")
    res["machine"] = dict(machine_info(device), threads=args.threads, loadavg_start=load_start,
                          loadavg_end=_loadavg())
    if args.note:
        res["note"] = args.note
    res["command"] = command
    for r in res["rows"]:
        print(f"  n={r['nodes']:>8d} {r['attn']:10s} {r['impl']:8s} {r.get('pyg_head_channels', ''):>3} "
              f"train {r['train_s']:8.3f} s  peak {r['peak_bytes'] / 2**20:8.0f} MiB")
    print(f"  exponents 10^4 -> 10^5: {res['exponent']}")
    if out:
        (out / "scaling_large.json").write_text(json.dumps(res, indent=2) + "\n")
        plot_scaling_large(res, out / "scaling_large.png")
        print(f"siggate bench: wrote {out / 'scaling_large.json'} and {out / 'scaling_large.png'}")
    return res


def _cmd(args) -> int:
    run(args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``benchmarks/throughput.py``: ``siggate bench`` as a script, its refusals in one line with
    exit 2 in the command's words (they were tracebacks, exit 1)."""
    from ..config import ConfigError
    from ..data.base import DataError

    try:
        return _cmd(build_parser().parse_args(argv))
    except (CLIError, ConfigError, DataError) as exc:  # (the command's refusals; a missing data root was a traceback)
        print(f"siggate bench: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
