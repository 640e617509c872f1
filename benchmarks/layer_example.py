"""Per-layer time of the README's "use the layer in your own model" example against
SigGateGT's own layers; prints JSON.

Both stacks use the same GPS layer (dim 64, 4 heads, GINE, elementwise gate, attention
dropout 0.1) on the same ZINC-sized random molecules (32 graphs of 10-38 nodes per batch).
Per-layer time = (time with 10 layers - time with 2 layers) / 8, so that the encoders,
pooling and heads, which differ, cancel. Training step = forward, loss, backward (no
optimizer); inference = eval() + inference_mode. Times are CPU time
(``time.process_time``), which a busy neighbour on a shared machine does not inflate as it
does wall clock. Rounds interleave the four models in rotating order; medians (and quartiles) over rounds; the ratio is of the medians.

    python benchmarks/layer_example.py [--rounds 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Batch, Data
from torch_geometric.nn import global_mean_pool

from siggate.nn import GPSLayer, PackedLayout, SigGateGT


class MyModel(torch.nn.Module):  # the README example, verbatim
    def __init__(self, in_dim, edge_dim, dim=64, layers=4, out_dim=1):
        super().__init__()
        self.lin_in = torch.nn.Linear(in_dim, dim)
        self.edge_in = torch.nn.Linear(edge_dim, dim)
        self.layers = torch.nn.ModuleList(
            GPSLayer(dim, heads=4, local="gine", gate="elementwise", attn_dropout=0.1)
            for _ in range(layers))
        self.out = torch.nn.Linear(dim, out_dim)

    def forward(self, data):
        x, e = self.lin_in(data.x), self.edge_in(data.edge_attr)
        layout = PackedLayout.from_batch(data.batch, data.num_graphs)  # once, shared by all layers
        for layer in self.layers:
            x, e = layer(x, data.edge_index, e, data.batch, layout)
        return self.out(global_mean_pool(x, data.batch))


def molecules(num: int, seed: int, typed: bool) -> Batch:
    """ZINC-sized random molecules: OGB integer features (``typed``) or float features."""
    g = torch.Generator().manual_seed(seed)
    graphs = []
    for _ in range(num):
        n = int(torch.randint(10, 39, (1,), generator=g))
        src = torch.arange(n - 1)
        ei = torch.cat([torch.stack([src, src + 1]), torch.randint(0, n, (2, n // 8), generator=g)], 1)
        ei = ei[:, ei[0] != ei[1]]
        ei = torch.cat([ei, ei.flip(0)], 1)
        x = torch.stack([torch.randint(0, k, (n,), generator=g) for k in get_atom_feature_dims()], 1)
        ea = torch.stack([torch.randint(0, k, (ei.size(1),), generator=g) for k in get_bond_feature_dims()], 1)
        if not typed:
            x, ea = x.float(), ea.float()
        graphs.append(Data(x=x, edge_index=ei, edge_attr=ea))
    return Batch.from_data_list(graphs)


def step_time(model, batch, train: bool) -> float:
    """CPU time of one step (``process_time``: robust to a busy neighbour on a shared machine)."""
    t0 = time.process_time()
    if train:
        model.train()
        model(batch).sum().backward()
    else:
        model.eval()
        with torch.inference_mode():
            model(batch)
    return time.process_time() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    lo, hi = 2, 10
    models = {}
    for layers in (lo, hi):
        torch.manual_seed(0)
        models[("readme", layers)] = MyModel(9, 3, dim=64, layers=layers)
        torch.manual_seed(0)
        models[("siggate", layers)] = SigGateGT(1, dim=64, layers=layers, heads=4, local="gine",
                                                gate="elementwise", attn_dropout=0.1)
    data = {"readme": [molecules(32, s, typed=False) for s in range(args.batches)],
            "siggate": [molecules(32, s, typed=True) for s in range(args.batches)]}
    keys = list(models)
    times = {(k, mode): [] for k in keys for mode in ("train", "infer")}
    for r in range(args.rounds + 2):  # two warm-up rounds
        for mode in ("train", "infer"):
            order = keys[r % len(keys):] + keys[: r % len(keys)]  # rotate the order each round
            for k in order:
                t = sum(step_time(models[k], b, mode == "train") for b in data[k[0]]) / args.batches
                if r >= 2:
                    times[(k, mode)].append(t)
    out = {"clock": "process_time", "rounds": args.rounds, "threads": args.threads, "layers": [lo, hi], "graphs_per_batch": 32}
    for mode in ("train", "infer"):
        med = {}
        for name in ("readme", "siggate"):
            per_layer = [(a - b) / (hi - lo) for a, b in zip(times[((name, hi), mode)], times[((name, lo), mode)])]
            q1, med[name], q3 = statistics.quantiles(per_layer, n=4)
            out[f"{mode}_ms_per_layer_{name}"] = round(1e3 * med[name], 3)
            out[f"{mode}_ms_per_layer_{name}_iqr"] = [round(1e3 * q1, 3), round(1e3 * q3, 3)]
        out[f"{mode}_ratio_readme_vs_siggate"] = round(med["readme"] / med["siggate"], 3)
    out["command"] = " ".join(["python benchmarks/layer_example.py", *(sys.argv[1:] if argv is None else argv)])
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
