"""Attention entropy per layer and head, tracked over training, gated vs ungated.

The runs use the training loop of ``siggate train`` itself (:func:`siggate.train.loop.fit`),
with a measurement on the validation graphs before training (epoch 0) and after every
epoch (its epoch hook). They write no checkpoints.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import torch

from ..config_args import CLIError
from ..data.base import DataError
from .common import (
    add_gate_sum,
    config_from,
    forward_details,
    load_dataset,
    meta,
    parse_gates,
    parse_seeds,
    require_attention,
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
    "min_normalized_over_training": "the lowest normalized entropy of any (layer, head) of any seed's model at any "
                                    "epoch (0 = before training)",
    "collapsed_head": "a (layer, head) of one seed's model whose normalized entropy at the final epoch is below "
                      "--collapse (a head of each seed counts on its own)",
    "measured_on": "validation graphs, eval mode (no attention dropout), readable attention path",
}


@torch.no_grad()
def entropy_stats(model, graphs, batch_size: int = 64) -> dict:
    """``{"entropy": [L][H], "normalized_entropy": [L][H], "gate_mean": [L] | None, "n_graphs": int}``:
    entropies averaged over the graphs of two or more nodes (``n_graphs``), the gate mean over every
    node of every graph (:func:`~.common.add_gate_sum`).

    Raises:
        DataError: no graph of two or more nodes."""
    ent = nent = None
    n = 0
    gate_sum, gate_cnt = None, 0
    for batch, det in forward_details(model, graphs, batch_size):
        mask = det["mask"]
        gate_sum, gate_cnt = add_gate_sum(det, mask, gate_sum, gate_cnt)
        sizes = mask.sum(1)
        keep = sizes >= 2
        if not bool(keep.any()):
            continue
        if any(a["attn"] is None for a in det["attn"]):
            raise ValueError("attention entropy needs the attention probabilities, which only model.attn_type=full "
                             "forms (performer and exphormer never build them)")
        e = torch.stack([attention_entropy(a["attn"], mask).double() for a in det["attn"]])  # L, B, H
        e = e[:, keep]
        ne = e / torch.log(sizes[keep].double())[None, :, None]
        ent = e.sum(1) if ent is None else ent + e.sum(1)
        nent = ne.sum(1) if nent is None else nent + ne.sum(1)
        n += int(keep.sum())
    if ent is None:
        raise DataError("no graph with at least two nodes among the graphs analysed: attention over one node says "
                        "nothing; analyse a set with graphs of two or more nodes (a larger --max-graphs, or another "
                        "--config)")
    return {
        "entropy": (ent / n).tolist(), "normalized_entropy": (nent / n).tolist(),
        "gate_mean": None if gate_sum is None else (gate_sum / gate_cnt).tolist(), "n_graphs": n,
    }


def train_tracked(model_cfg, train_cfg, ds, eval_graphs, measure, progress: bool = True, desc: str = "") -> dict:
    """Train the model ``model_cfg`` on ``ds`` as ``train_cfg`` says, with the training loop of ``siggate train``
    (:func:`siggate.train.loop.setup_run` and :func:`~siggate.train.loop.fit`, skipping
    batches with a non-finite loss, writing no files) and call ``measure(model)`` before
    training and after every epoch (the epoch hook). Returns per-epoch lists."""
    from ..train.loop import fit, setup_run
    from ..train.scoring import evaluate_split

    run = setup_run(model_cfg, train_cfg, ds)
    run.on_nan = "skip"
    info, t = ds.info, train_cfg
    hist = {"epoch": [0], "train_loss": [None], "skipped_batches": [0],
            "val": [evaluate_split(run.model, ds.val, info, run.mean, run.std, t.eval_batch_size)],
            "stats": [measure(run.model)]}

    def record(run, end) -> None:
        row = end.row
        hist["epoch"].append(row["epoch"])
        hist["train_loss"].append(row["train_loss"] if end.train_graphs else math.nan)
        hist["skipped_batches"].append(end.skipped)
        hist["val"].append(row["val"])
        hist["stats"].append(measure(run.model))
        log.info("%s epoch %d/%d  loss %.4f  val %s %.4f", desc or "entropy", row["epoch"], t.epochs,
                 hist["train_loss"][-1], info.metric, row["val"])

    fit(run, progress, on_epoch_end=record, full_eval=False, stop_untrained=False)  # (a diverged run is recorded)
    return hist


def gate_entry(hs: list, seeds: list) -> dict:
    """One gate's curves over ``seeds`` (``hs``: each seed's :func:`train_tracked` history): the
    means over seeds per epoch, and each seed's own final normalized entropies
    (``final_normalized_per_seed``, ``[S, L, H]``), by which heads collapse: head k of two seeds
    are two heads, and a mean over seeds hid one of them that collapsed."""
    entry = {"epoch": hs[0]["epoch"]}
    for k in ("entropy", "normalized_entropy"):
        entry[k] = np.mean([[st[k] for st in h["stats"]] for h in hs], axis=0).tolist()
    entry["final_normalized_per_seed"] = [np.asarray(h["stats"][-1]["normalized_entropy"]).tolist() for h in hs]
    # each seed's lowest head over its epochs (a dip of one seed's head was averaged away by the other seeds)
    entry["min_normalized_per_seed"] = [float(np.min([st["normalized_entropy"] for st in h["stats"]])) for h in hs]
    gm = [[st["gate_mean"] for st in h["stats"]] for h in hs]
    entry["gate_mean"] = None if gm[0][0] is None else np.mean(gm, axis=0).tolist()
    entry["val"] = np.mean([h["val"] for h in hs], axis=0).tolist()
    entry["train_loss"] = [None] + np.mean([h["train_loss"][1:] for h in hs], axis=0).tolist()
    entry["skipped_batches"] = int(sum(sum(h["skipped_batches"]) for h in hs))
    entry["diverged_seeds"] = [s for s, h in zip(seeds, hs)  # its final entropies not numbers: weights gone NaN
                               if not np.isfinite(h["stats"][-1]["normalized_entropy"]).all()]
    return entry


def _collapsed(finals: np.ndarray, collapse: float) -> int | None:
    """Heads below ``collapse`` in the seeds whose final entropies are numbers (``finals``:
    ``[S, L, H]``, or ``[1, L, H]``); None when none is and a seed diverged (its heads unknown)."""
    finite = np.isfinite(finals.reshape(len(finals), -1)).all(axis=1)
    count = int((finals[finite] < collapse).sum())
    return count if count or finite.all() else None


def summarize(per_gate: dict, collapse: float) -> dict:
    """Each gate's summary. Collapsed heads and the lowest final head are counted over every seed's
    own heads (``heads_total`` = seeds x layers x heads); a result written before
    ``final_normalized_per_seed`` was kept counts its mean over seeds."""
    out = {}
    for g, h in per_gate.items():
        ne = np.asarray(h["normalized_entropy"])  # E+1, L, H
        e = np.asarray(h["entropy"])
        finals = np.asarray(h["final_normalized_per_seed"]) if h.get("final_normalized_per_seed") else ne[-1:]
        out[g] = {
            "initial_mean_entropy": float(e[0].mean()), "final_mean_entropy": float(e[-1].mean()),
            "initial_mean_normalized": float(ne[0].mean()), "final_mean_normalized": float(ne[-1].mean()),
            "final_min_normalized": float(finals.min()),
            "min_normalized_over_training": float(np.min(h["min_normalized_per_seed"])
                                                  if h.get("min_normalized_per_seed") else min(ne.min(), finals.min())),
            "final_over_initial": float(e[-1].mean() / e[0].mean()) if e[0].mean() > 0 else None,
            # NaN is below no threshold: a diverged seed's heads are not counted as not collapsed; a head
            # collapsed in a seed that did not diverge is counted all the same
            "collapsed_heads": _collapsed(finals, collapse),
            "heads_total": int(finals.size), "diverged_seeds": h.get("diverged_seeds", []),
            "final_val": h["val"][-1],
        }
    return out


def collapsed_text(s: dict) -> str:
    """A gate's collapsed heads as tables show them (``2/16``), or the seeds that diverged; a
    collapse counted beside a diverged seed names that seed too (its heads are of the total, unknown)."""
    diverged = ", ".join(map(str, s.get("diverged_seeds") or []))
    if s["collapsed_heads"] is None:
        return f"diverged (seed {diverged or '?'})"
    return f"{s['collapsed_heads']}/{s['heads_total']}" + (f" (seed {diverged} diverged)" if diverged else "")


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



def main(args) -> int:
    out, progress = start(args, min_epochs=1)
    if not 0 < args.collapse <= 1:  # (NaN too) a normalized entropy lies in [0, 1]: -1 counted no head, 5 every one
        raise CLIError(f"--collapse: {args.collapse} is no normalized entropy; give a threshold in (0, 1], e.g. 0.2")
    cfg = config_from(args, owned={"train.epochs": "from --epochs", "model.gate": "from --gates",
                                   "train.seed": "from --seeds"})
    require_attention(cfg, "entropy")
    if cfg.model.attn_type != "full":
        raise CLIError(f"attention entropy needs the attention probabilities, which only model.attn_type=full forms "
                       f"({cfg.model.attn_type} never builds them); pass --set model.attn_type=full")
    gates, seeds = parse_gates(args.gates), parse_seeds(args.seeds)
    ds = load_dataset(cfg, progress)
    per_seed = {}
    for g in gates:
        for s in seeds:
            c = variant(cfg, epochs=args.epochs, model__gate=g, train__seed=s)
            h = train_tracked(c.model, c.train, ds, ds.val, lambda m: entropy_stats(m, ds.val, args.batch_size),
                              progress, desc=f"entropy {g} seed {s}")
            per_seed[f"{g}-s{s}"] = h
    per_gate = {g: gate_entry([per_seed[f"{g}-s{s}"] for s in seeds], seeds) for g in gates}
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
             s["final_mean_normalized"], s["final_min_normalized"], collapsed_text(s), s["final_val"]]
            for g, s in res["summary"].items()]
    print(table(["gate", "H init", "H final", "H/log n init", "H/log n final", "min head final", "collapsed",
                 f"val {ds.info.metric}"], rows))
    print(f"wrote {path}")
    return 0
