"""Attention entropy per layer and head, tracked over training, gated vs ungated.

The training loop here is a plain copy of the protocol of :func:`siggate.train.loop.train`
built from the same parts (``prepare_data``, ``build_model``, AdamW, the warmup-cosine
schedule of :mod:`siggate.train.schedule`, ``loss_fn``, target normalisation, gradient
clipping, the ``(seed, epoch)`` data order), with a measurement on the validation graphs
before training (epoch 0) and after every epoch. It writes no checkpoints.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch
from torch_geometric.loader import DataLoader
from tqdm.auto import tqdm

from .common import (
    add_model_args,
    config_from,
    finish_parser,
    forward_details,
    load_dataset,
    meta,
    parse_list,
    start,
    table,
    variant,
    write_outputs,
)
from .metrics import attention_entropy
from .plots import color, save, subplots

log = logging.getLogger("siggate.analysis")

DEFINITIONS = {
    "entropy": "per graph: mean over its real nodes (query rows) of -sum_k p_qk log p_qk over its real "
               "nodes (keys), natural log, padding masked; then mean over graphs with >= 2 nodes",
    "normalized_entropy": "the same with each graph's value divided by log(n_g), the entropy of uniform "
                          "attention over the graph (1 = uniform, 0 = one-hot)",
    "collapsed_head": "a (layer, head) whose normalized entropy at the final epoch is below --collapse",
    "measured_on": "validation graphs, eval mode (no attention dropout), readable attention path",
}


@torch.no_grad()
def entropy_stats(model, graphs, batch_size: int = 64) -> dict:
    """``{"entropy": [L][H], "normalized_entropy": [L][H], "gate_mean": [L] | None}``."""
    ent = nent = None
    n = 0
    gate_sum, gate_cnt = None, 0
    for batch, det in forward_details(model, graphs, batch_size):
        mask = det["mask"]
        sizes = mask.sum(1)
        keep = sizes >= 2
        if not bool(keep.any()):
            continue
        e = torch.stack([attention_entropy(a["attn"], mask).double() for a in det["attn"]])  # L, B, H
        e = e[:, keep]
        ne = e / torch.log(sizes[keep].double())[None, :, None]
        ent = e.sum(1) if ent is None else ent + e.sum(1)
        nent = ne.sum(1) if nent is None else nent + ne.sum(1)
        n += int(keep.sum())
        if det["attn"] and det["attn"][0]["gate"] is not None:
            g = torch.stack([a["gate"][mask].double().mean() for a in det["attn"]]) * int(mask.sum())
            gate_sum = g if gate_sum is None else gate_sum + g
            gate_cnt += int(mask.sum())
    return {
        "entropy": (ent / n).tolist(), "normalized_entropy": (nent / n).tolist(),
        "gate_mean": None if gate_sum is None else (gate_sum / gate_cnt).tolist(), "n_graphs": n,
    }


def _epoch_loader(graphs, batch_size: int, seed: int, epoch: int):
    """The training loader of ``siggate train`` for ``epoch`` (data order from ``(seed, epoch)``)."""
    try:
        from ..train.loop import epoch_loader
    except ImportError:  # older loop: a shuffling loader seeded by (seed, epoch)
        g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        return DataLoader(graphs, batch_size=batch_size, shuffle=True, generator=g)
    return epoch_loader(graphs, batch_size, seed, epoch)


def train_tracked(cfg, ds, eval_graphs, measure, progress: bool = True, desc: str = "") -> dict:
    """Train ``cfg`` on ``ds`` with the protocol of ``siggate train`` and call
    ``measure(model)`` before training and after every epoch. Returns per-epoch lists."""
    from ..train.loop import build_model, evaluate_split, loss_fn, seed_everything, target_stats
    from ..train.schedule import make_scheduler

    t = cfg.train
    info = ds.info
    seed_everything(t.seed)
    model = build_model(cfg, info)
    # as in train(): the training random stream (dropout) restarts from a seed-only state
    torch.manual_seed(t.seed * 1_000_003 + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay)
    sched = make_scheduler(opt, t.warmup_epochs, t.epochs)
    if info.task == "regression" and t.normalize_targets:
        mean, std = target_stats(ds.train, info.num_tasks)
    else:
        mean, std = torch.zeros(info.num_tasks), torch.ones(info.num_tasks)
    crit = loss_fn(t.loss, info.task)
    hist = {"epoch": [0], "train_loss": [None], "skipped_batches": [0],
            "val": [evaluate_split(model, ds.val, info, mean, std, t.eval_batch_size)], "stats": [measure(model)]}
    for epoch in tqdm(range(t.epochs), desc=desc or "epochs", disable=not progress, leave=False):
        model.train()
        loader = _epoch_loader(ds.train, t.batch_size, t.seed, epoch)
        total = count = skipped = 0
        for batch in loader:
            opt.zero_grad(set_to_none=True)
            pred = model(batch)
            loss = crit(pred, (batch.y.view(pred.shape) - mean) / std)
            if not torch.isfinite(loss):
                skipped += 1
                continue
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), t.clip if t.clip > 0 else float("inf"))
            if not torch.isfinite(gn):
                opt.zero_grad(set_to_none=True)
                skipped += 1
                continue
            opt.step()
            total += loss.item() * batch.num_graphs
            count += batch.num_graphs
        sched.step()
        hist["epoch"].append(epoch + 1)
        hist["train_loss"].append(total / count if count else math.nan)
        hist["skipped_batches"].append(skipped)
        hist["val"].append(evaluate_split(model, ds.val, info, mean, std, t.eval_batch_size))
        hist["stats"].append(measure(model))
        log.info("%s epoch %d/%d  loss %.4f  val %s %.4f", desc or "entropy", epoch + 1, t.epochs,
                 hist["train_loss"][-1], info.metric, hist["val"][-1])
    return hist


def summarize(per_gate: dict, collapse: float) -> dict:
    out = {}
    for g, h in per_gate.items():
        ne = np.asarray(h["normalized_entropy"])  # E+1, L, H
        e = np.asarray(h["entropy"])
        out[g] = {
            "initial_mean_entropy": float(e[0].mean()), "final_mean_entropy": float(e[-1].mean()),
            "initial_mean_normalized": float(ne[0].mean()), "final_mean_normalized": float(ne[-1].mean()),
            "final_min_normalized": float(ne[-1].min()),
            "min_normalized_over_training": float(ne.min()),
            "final_over_initial": float(e[-1].mean() / e[0].mean()) if e[0].mean() > 0 else None,
            "collapsed_heads": int((ne[-1] < collapse).sum()), "heads_total": int(ne[-1].size),
            "final_val": h["val"][-1],
        }
    return out


def plot(res: dict, path: Path) -> Path:
    gates = list(res["per_gate"])
    fig, ax = subplots(1, len(gates) + 1, size=(4.2, 3.4))
    for j, g in enumerate(gates):
        h = res["per_gate"][g]
        ne = np.asarray(h["normalized_entropy"])  # E+1, L, H
        x = h["epoch"]
        for l in range(ne.shape[1]):
            ax[0, j].plot(x, ne[:, l].mean(1), marker="o", ms=3, color=f"C{l}", label=f"layer {l + 1}")
            ax[0, j].fill_between(x, ne[:, l].min(1), ne[:, l].max(1), color=f"C{l}", alpha=0.15)
        ax[0, j].axhline(res["collapse_threshold"], color="k", ls=":", lw=0.8)
        ax[0, j].set_ylim(0, 1.05)
        ax[0, j].set_title(f"gate={g} (band: min-max over heads)")
        ax[0, j].set_xlabel("epoch")
        ax[0, j].set_ylabel("normalized attention entropy")
        ax[0, j].legend(fontsize=7)
    a = ax[0, -1]
    for i, g in enumerate(gates):
        h = res["per_gate"][g]
        ne = np.asarray(h["normalized_entropy"])
        a.plot(h["epoch"], ne.reshape(len(h["epoch"]), -1).mean(1), marker="o", color=color(g, i), label=g)
    a.set_ylim(0, 1.05)
    a.set_xlabel("epoch")
    a.set_ylabel("mean normalized entropy (all heads)")
    a.set_title("gated vs ungated")
    a.legend(fontsize=7)
    return save(fig, path)


def register(sub) -> None:
    p = sub.add_parser("entropy", help="attention entropy per layer/head over training, gated vs ungated")
    add_model_args(p, default_epochs=5)
    p.add_argument("--gates", default="none,elementwise", help="gate kinds (default: none,elementwise)")
    p.add_argument("--collapse", type=float, default=0.2,
                   help="normalized entropy below which a head counts as collapsed (default: 0.2)")
    p.add_argument("--batch-size", type=int, default=64)
    finish_parser(p, main)


def main(args) -> int:
    out, progress = start(args)
    if args.epochs is None or args.epochs < 1:
        raise ValueError("--epochs must be >= 1")
    cfg = config_from(args)
    gates, seeds = parse_list(args.gates), parse_list(args.seeds, int)
    ds = load_dataset(cfg, args.max_graphs, progress)
    per_seed = {}
    for g in gates:
        for s in seeds:
            c = variant(cfg, epochs=args.epochs, model__gate=g, train__seed=s)
            h = train_tracked(c, ds, ds.val, lambda m: entropy_stats(m, ds.val, args.batch_size), progress,
                              desc=f"entropy {g} seed {s}")
            per_seed[f"{g}-s{s}"] = h
    per_gate = {}
    for g in gates:
        hs = [per_seed[f"{g}-s{s}"] for s in seeds]
        entry = {"epoch": hs[0]["epoch"]}
        for k in ("entropy", "normalized_entropy"):
            entry[k] = np.mean([[st[k] for st in h["stats"]] for h in hs], axis=0).tolist()
        gm = [[st["gate_mean"] for st in h["stats"]] for h in hs]
        entry["gate_mean"] = None if gm[0][0] is None else np.mean(gm, axis=0).tolist()
        entry["val"] = np.mean([h["val"] for h in hs], axis=0).tolist()
        entry["train_loss"] = [None] + np.mean([h["train_loss"][1:] for h in hs], axis=0).tolist()
        entry["skipped_batches"] = int(sum(sum(h["skipped_batches"]) for h in hs))
        per_gate[g] = entry
    res = {
        "analysis": "entropy", "dataset": ds.info.name, "metric": ds.info.metric, "split": "val",
        "gates": gates, "seeds": seeds, "epochs": args.epochs, "protocol_epochs": cfg.train.epochs,
        "collapse_threshold": args.collapse,
        "definitions": DEFINITIONS,
        "paper_claim": "attention entropy does not collapse (with the gate)",
        "per_gate": per_gate,
        "summary": summarize(per_gate, args.collapse),
        "per_seed": {k: {kk: vv for kk, vv in h.items()} for k, h in per_seed.items()},
        "meta": meta(args, cfg),
    }
    path = write_outputs(res, out, "entropy", plot)
    rows = [[g, s["initial_mean_entropy"], s["final_mean_entropy"], s["initial_mean_normalized"],
             s["final_mean_normalized"], s["final_min_normalized"], f"{s['collapsed_heads']}/{s['heads_total']}",
             s["final_val"]] for g, s in res["summary"].items()]
    print(table(["gate", "H init", "H final", "H/log n init", "H/log n final", "min head final", "collapsed",
                 f"val {ds.info.metric}"], rows))
    print(f"wrote {path}")
    return 0
