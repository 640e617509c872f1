"""Per-layer time of the README's "use the layer in your own model" example against
SigGateGT's own layers; prints JSON.

Both stacks use the same GPS layer (dim 64, 4 heads, GINE, elementwise gate, attention
dropout 0.1) on the same ZINC-sized random molecules (32 graphs of 10-38 nodes per batch).
Per-layer time = (time with 10 layers - time with 2 layers) / 8, so that the encoders,
pooling and heads, which differ, cancel. Training step = forward, loss, backward (no
optimizer); inference = eval() + inference_mode. Times are CPU time
(``time.process_time``), which a busy neighbour on a shared machine does not inflate as it
does wall clock. The README example is run from the README's own text. Rounds interleave the four models in rotating order; medians (and quartiles) over rounds; the ratio is of the medians.

    python benchmarks/layer_example.py [--rounds 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from ogb.utils.features import get_atom_feature_dims, get_bond_feature_dims
from torch_geometric.data import Batch, Data

from siggate.nn import SigGateGT

#: the README's section whose first Python block this script times
SECTION = "### Use the layer in your own model"


def readme_model():
    """The README's ``MyModel``, run from its text (a copy here drifted from it: the README's
    example took ``attn_type`` and built its layout with ``make_layout`` while the copy kept
    ``PackedLayout.from_batch``)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = text.split(SECTION, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(block, f"README.md: {SECTION}", "exec"), scope)  # noqa: S102 - the project's own README
    return scope["MyModel"]


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
    for flag, value, low in (("--rounds", args.rounds, 2), ("--batches", args.batches, 1), ("--threads", args.threads, 1)):
        if value < low:  # (--rounds 1: a traceback from the quartiles, which need two rounds)
            print(f"layer_example.py: error: {flag} {value}: give a whole number >= {low}", file=sys.stderr)
            return 2
    torch.set_num_threads(args.threads)
    MyModel = readme_model()
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
