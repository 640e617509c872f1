"""Stable rank of every head's output, before and after the gate, on a dataset split.

For each graph ``g`` of the split, each layer ``l`` and head ``k``, the head output
``O_k`` restricted to the graph's nodes (``[n_g, d_head]``, the padding rows removed) has
stable rank ``||O_k||_F^2 / ||O_k||_2^2``; it is computed before the gate (``head_out``)
and after it (``head_out_gated``; equal for ``gate=none`` and for a gate on the values or after
the projection, which acts on both or neither). Pooling: per graph, then the
mean over the graphs with at least two nodes (a one-node graph has stable rank 1 at most).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config_args import CLIError
from ..data.base import DataError
from ..train.runfiles import LAST
from .common import (
    add_gate_sum,
    batches,
    config_from,
    fmt,
    load_dataset,
    measurable,
    meta,
    parse_seeds,
    require_attention,
    start,
    table,
    train_many,
    variant,
    write_outputs,
)
from .metrics import stable_rank_batched
from .plots import save, subplots
from .report import models_text

POOLING = "per graph (head output over the graph's own nodes), then mean over graphs with >= 2 nodes"


@torch.no_grad()
def head_ranks(model, graphs, batch_size: int = 64, progress: bool = False) -> dict:
    """Per-layer, per-head mean stable rank before/after the gate and the mean gate value.

    Returns ``{"before": [L][H], "after": [L][H], "ratio": [L][H] (mean over graphs of
    after/before), "frac_graphs_higher": [L][H], "gate_mean": [L] or None, "n_graphs": int}``:
    ranks over the graphs of two or more nodes (``n_graphs``), the gate mean over every node of
    every graph (:func:`~.common.add_gate_sum`).

    Raises:
        DataError: no graph of two or more nodes.
    """
    model.eval()
    sums = None
    n = 0
    gate_sum, gate_cnt = None, 0
    for batch in tqdm(batches(graphs, batch_size), desc="rank", disable=not progress, leave=False):
        _, det = model(batch, return_details=True)
        mask = det["mask"]  # B, N
        gate_sum, gate_cnt = add_gate_sum(det, mask, gate_sum, gate_cnt)
        keep = mask.sum(1) >= 2
        if not bool(keep.any()):
            continue
        m = mask[keep][:, :, None, None].double()  # B', N, 1, 1
        per = []
        for a in det["attn"]:
            before = (a["head_out"][keep].double() * m).transpose(1, 2)  # B', H, N, dh
            after = (a["head_out_gated"][keep].double() * m).transpose(1, 2)
            sb, sa = stable_rank_batched(before), stable_rank_batched(after)  # B', H
            ratio = torch.where(sb > 0, sa / sb.clamp_min(1e-300), torch.ones_like(sb))
            higher = (sa - sb > 1e-9 * sb).double()
            per.append(torch.stack([sb.sum(0), sa.sum(0), ratio.sum(0), higher.sum(0)]))  # 4, H
        per = torch.stack(per)  # L, 4, H
        sums = per if sums is None else sums + per
        n += int(keep.sum())
    if sums is None:
        raise DataError("no graph with at least two nodes among the graphs analysed: attention over one node says "
                        "nothing; analyse a set with graphs of two or more nodes (a larger --max-graphs, or another "
                        "split)")
    mean = (sums / n).tolist()
    return {
        "before": [r[0] for r in mean], "after": [r[1] for r in mean], "ratio": [r[2] for r in mean],
        "frac_graphs_higher": [r[3] for r in mean],
        "gate_mean": None if gate_sum is None else (gate_sum / gate_cnt).tolist(),
        "n_graphs": n,
    }


def obtain_models(args, cfg, ds, out: Path, progress: bool):
    """``[(seed, model, source text)]`` for ``--checkpoint`` or ``--config`` (+ training)."""
    from ..train.modelprep import build_model, load_trained

    if args.checkpoint:
        model, ckpt, _, _ = load_trained(args.checkpoint)
        st = ckpt.get("state", {})
        return [(ckpt["config"]["train"]["seed"], model,
                 f"checkpoint {args.checkpoint} (after epoch {st.get('epoch')}, best epoch {st.get('best_epoch', -1) + 1})")]
    seeds = parse_seeds(args.seeds)
    if args.epochs == 0:
        return [(seed, build_model(cfg.model, ds.info, seed, ds.train),
                 f"untrained (initialisation of seed {seed})") for seed in seeds]
    todo = {}
    for seed in seeds:
        c = variant(cfg, epochs=args.epochs, train__seed=seed)
        todo[seed] = (c, out / "runs" / f"{c.model.gate}-L{c.model.layers}-s{seed}")
    measurable(train_many(todo, ds, args, progress, desc="rank runs"), "stable rank")
    return [(seed, load_trained(run / LAST)[0], f"trained {c.train.epochs} epochs ({run}/last.pt, final weights)")
            for seed, (c, run) in todo.items()]


def plot(res: dict, path: Path) -> Path:
    fig, ax = subplots(1, 2, size=(4.8, 3.6))
    L = len(res["before"])
    H = len(res["before"][0]) if L else 0
    x = np.arange(1, L + 1)
    a = ax[0, 0]
    for h in range(H):
        a.plot(x, [res["before"][l][h] for l in range(L)], ls="--", marker="o", color=f"C{h}", alpha=0.8,
               label=f"head {h} before")
        a.plot(x, [res["after"][l][h] for l in range(L)], ls="-", marker="s", color=f"C{h}",
               label=f"head {h} after")
    a.set_xticks(x)
    a.set_xlabel("layer")
    a.set_ylabel("stable rank of head output")
    a.set_title(f"gate={res['gate']}: before (--) / after (-) gate")
    a.legend(fontsize=6, ncol=2)
    a = ax[0, 1]
    for h in range(H):
        a.plot(x, [res["ratio"][l][h] for l in range(L)], marker="o", color=f"C{h}", label=f"head {h}")
    a.axhline(1.0, color="k", lw=0.8)
    a.set_xticks(x)
    a.set_xlabel("layer")
    a.set_ylabel("mean over graphs of after / before")
    a.set_title(f"{res['split']} split, {res['n_graphs']} graphs")
    a.legend(fontsize=7)
    return save(fig, path)



def main(args) -> int:
    out, progress = start(args, min_epochs=0)
    if args.checkpoint and Path(args.checkpoint).is_dir():  # a run folder, as predict and evaluate take it
        from ..train.members import run_checkpoint_name

        name = run_checkpoint_name(args.checkpoint)
        if name is None:
            raise CLIError(f"--checkpoint {args.checkpoint} holds no GNN run of its own (a run of members, or no run): "
                           "give a GNN member's folder (e.g. RUN/member0) or its best.pt")
        args.checkpoint = str(Path(args.checkpoint) / name)
    if args.checkpoint:
        given = [f"--{'set' if k == 'overrides' else k}" for k, v in args.model_defaults.items() if getattr(args, k) != v]
        if given:  # they were ignored: the checkpoint's own model, config and seed were measured
            raise CLIError(f"{', '.join(given)} with --checkpoint: the checkpoint is measured as it was trained "
                           f"(its config, seed and epochs); drop {', '.join(given)}, or drop --checkpoint to train "
                           "models by them")
        from ..config import from_dict
        from ..train.checkpoint import load_checkpoint

        cfg = from_dict(load_checkpoint(args.checkpoint)["config"])
        if args.data_root:
            cfg.data.root = args.data_root
        if args.cache_dir:
            cfg.data.cache_dir = args.cache_dir
        if args.max_graphs:  # (load_dataset cuts as the config says: the flag was ignored with --checkpoint)
            cfg.data.max_graphs = args.max_graphs
    else:
        cfg = config_from(args, owned={"train.epochs": "from --epochs", "train.seed": "from --seeds"})
    require_attention(cfg, "rank")
    if not args.checkpoint:
        parse_seeds(args.seeds)  # (refused before the data is read)
    ds = load_dataset(cfg, progress)
    if args.split not in ds.splits:
        raise CLIError(f"--split: unknown split {args.split!r}; available: {', '.join(ds.splits)}")
    models = obtain_models(args, cfg, ds, out, progress)
    per_seed = {}
    for seed, model, source in models:
        r = head_ranks(model, ds.splits[args.split], args.batch_size, progress)
        r["model_source"] = source
        per_seed[str(seed)] = r
    keys = ("before", "after", "ratio", "frac_graphs_higher")
    mean = {k: np.mean([np.asarray(r[k]) for r in per_seed.values()], axis=0).tolist() for k in keys}
    gm = [r["gate_mean"] for r in per_seed.values() if r["gate_mean"] is not None]
    res = {
        "analysis": "rank",
        "gate": cfg.model.gate, "gate_position": cfg.model.gate_position, "dataset": ds.info.name,
        "split": args.split, "n_graphs": next(iter(per_seed.values()))["n_graphs"],
        "layers": cfg.model.layers, "heads": cfg.model.heads,
        "model_source": [r["model_source"] for r in per_seed.values()],
        "trained": not (args.checkpoint is None and args.epochs == 0),
        "pooling": POOLING,
        "definition": "stable rank ||O_k||_F^2 / ||O_k||_2^2 of head k's output O_k [n_graph_nodes, d_head]; "
                      "'before' = attention output, 'after' = after the gate (gate_position=output). With "
                      "gate_position value both are the attention output of the gated values, with post both "
                      "are the heads' outputs before the gate (it acts after the projection): before equals after.",
        **mean,
        "gate_mean": np.mean(gm, axis=0).tolist() if gm else None,
        "frac_heads_higher": float(np.mean(np.asarray(mean["after"]) > np.asarray(mean["before"]) * (1 + 1e-9))),
        "mean_before": float(np.mean(mean["before"])), "mean_after": float(np.mean(mean["after"])),
        "per_seed": per_seed,
        "meta": meta(args, cfg),
    }
    path = write_outputs(res, out, "rank", plot)
    rows = []
    for l in range(len(res["before"])):
        rows.append([l + 1, " ".join(fmt(v, 3) for v in res["before"][l]), " ".join(fmt(v, 3) for v in res["after"][l]),
                     float(np.mean(res["ratio"][l])), None if res["gate_mean"] is None else res["gate_mean"][l]])
    print(table(["layer", "SR before (per head)", "SR after (per head)", "mean ratio", "gate mean"], rows))
    print(f"{models_text(res['model_source'])}; {res['split']} split, {res['n_graphs']} graphs; "
          f"after > before in {fmt(100 * res['frac_heads_higher'], 3)}% of (layer, head); wrote {path}")
    return 0
