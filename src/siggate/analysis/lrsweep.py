"""Learning-rate sweep: best validation metric, divergence and seed spread per learning
rate, and the widest learning-rate range in which each variant stays near its best.

Every point is an ordinary :func:`siggate.train.pipeline.train` run with ``train.lr``,
``model.gate``, ``train.seed`` set and ``train.on_nan=skip`` (a non-finite loss or gradient
skips the batch and is counted), under ``OUT/runs/lr<lr>-<gate>-s<seed>``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..config_args import CLIError
from .common import (
    config_from,
    fmt,
    load_dataset,
    meta,
    parse_gates,
    parse_list,
    parse_seeds,
    start,
    table,
    train_many,
    variant,
    write_outputs,
)
from .plots import color, save, subplots

EXPLODE_FACTOR = 2.0

DEFINITIONS = {
    "score": "best validation metric of a run (the epoch selected by validation); mean over seeds",
    "diverged": "a run diverged if any batch had a non-finite loss or gradient (train.on_nan=skip counts them), "
                f"its validation metric is non-finite, or an epoch's train loss exceeds {EXPLODE_FACTOR}x the "
                "lowest train loss of the epochs before it; a learning rate is unstable if any seed diverged",
    "within_tolerance": "score within X of the variant's own best score over the swept learning rates: "
                        "score <= best * (1 + X) for metrics where lower is better, score >= best * (1 - X) "
                        "where higher is better, and not diverged",
    "stable_range": "max_lr / min_lr of the widest contiguous run (in sorted order; widest = largest max_lr / "
                    "min_lr, not the most rates) of swept learning rates that are within tolerance (1.0 when only "
                    "one is); 'common' variant: tolerance measured "
                    "against the best score over all variants",
    "no_divergence_range": "max_lr / min_lr of the widest contiguous run of swept learning rates where no seed "
                           "diverged (whatever the score)",
    "loss_spread": "std over seeds of the train loss, averaged over epochs (null for one seed)",
}


def diverged(m: dict) -> bool:
    if m.get("diverged") or m.get("skipped_batches", 0) > 0:
        return True
    v = m.get("val")
    if v is None or not math.isfinite(float(v)):
        return True
    losses = [h.get("train_loss") for h in m.get("history", [])]
    best = math.inf
    for loss in losses:
        if loss is None or not math.isfinite(loss):
            return True
        if loss > EXPLODE_FACTOR * best:
            return True
        best = min(best, loss)
    return False


def within(score, best, tol: float, higher_is_better: bool) -> bool:
    if score is None or best is None or not math.isfinite(score):
        return False
    return score >= best * (1 - tol) if higher_is_better else score <= best * (1 + tol)


def widest_range(lrs: list[float], ok: list[bool]) -> dict:
    """Widest contiguous run of ``ok`` learning rates -> range: the run of the largest ``max_lr /
    min_lr`` (two rates 10x apart beat three within 1.5x; ties: the lower one)."""
    best = None
    i = 0
    while i < len(lrs):
        if not ok[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(lrs) and ok[j + 1]:
            j += 1
        ratio = round(lrs[j] / lrs[i], 9)  # 3e-4 / 3e-5 is 10x, not 9.999999999999998x
        if best is None or ratio > best["ratio"]:
            best = {"ratio": ratio, "min_lr": lrs[i], "max_lr": lrs[j],
                    "at_sweep_edge": i == 0 or j == len(lrs) - 1}
        i = j + 1
    return best or {"ratio": 0.0, "min_lr": None, "max_lr": None, "at_sweep_edge": False}


def analyse(runs: dict, lrs, gates, seeds, tol: float, higher_is_better: bool) -> dict:
    per_lr = {g: [] for g in gates}
    for g in gates:
        for lr in lrs:
            ms = [runs[(lr, g, s)] for s in seeds]
            vals = [m.get("val") for m in ms]
            fin = [float(v) for v in vals if v is not None and math.isfinite(float(v))]
            div = [diverged(m) for m in ms]
            curves = [[h["train_loss"] for h in m.get("history", [])] for m in ms]
            spread = None
            if len(seeds) > 1 and all(len(c) == len(curves[0]) and c for c in curves):
                spread = float(np.mean(np.std(np.asarray(curves, dtype=np.float64), axis=0, ddof=1)))
            per_lr[g].append({
                "lr": lr, "score": float(np.mean(fin)) if len(fin) == len(vals) else None,
                "score_std": float(np.std(fin, ddof=1)) if len(fin) > 1 else None,
                "scores": vals, "diverged": div, "n_diverged": int(sum(div)),
                "skipped_batches": [int(m.get("skipped_batches", 0)) for m in ms],
                "final_train_loss": [c[-1] if c else None for c in curves],
                "loss_spread": spread, "curves": curves,
            })
    pick = max if higher_is_better else min

    def ranges(ref_of):
        out = {}
        for g in gates:
            ok = [not any(p["diverged"]) and within(p["score"], ref_of(g), tol, higher_is_better) for p in per_lr[g]]
            out[g] = {**widest_range(list(lrs), ok), "within": ok, "reference": ref_of(g)}
        return out

    own_best = {}
    for g in gates:
        sc = [p["score"] for p in per_lr[g] if p["score"] is not None and not any(p["diverged"])]
        own_best[g] = pick(sc) if sc else None
    allsc = [v for v in own_best.values() if v is not None]
    common = pick(allsc) if allsc else None
    no_div = {}
    for g in gates:
        ok = [not any(p["diverged"]) for p in per_lr[g]]
        no_div[g] = {**widest_range(list(lrs), ok), "within": ok}
    return {"per_lr": per_lr, "best_score": own_best, "stable_range": ranges(lambda g: own_best[g]),
            "stable_range_common": ranges(lambda g: common), "no_divergence_range": no_div}


def plot(res: dict, path: Path) -> Path:
    fig, ax = subplots(1, 2, size=(4.8, 3.6))
    a = ax[0, 0]
    for i, (g, pts) in enumerate(res["per_lr"].items()):
        xs = [p["lr"] for p in pts if p["score"] is not None]
        ys = [p["score"] for p in pts if p["score"] is not None]
        es = [p["score_std"] or 0.0 for p in pts if p["score"] is not None]
        a.errorbar(xs, ys, yerr=es, marker="o", capsize=3, color=color(g, i), label=g)
        for p in pts:
            if any(p["diverged"]):
                a.scatter([p["lr"]], [p["score"] if p["score"] is not None else (max(ys) if ys else 0)],
                          marker="x", s=60, color=color(g, i))
        r = res["stable_range"][g]
        if r["min_lr"]:
            a.axvspan(r["min_lr"], r["max_lr"], color=color(g, i), alpha=0.08)
    a.set_xscale("log")
    a.set_xlabel("learning rate")
    a.set_ylabel(f"best val {res['metric']}")
    a.set_title(f"x = diverged; band = within {fmt(100 * res['tolerance'], 3)}% of best")
    a.legend(fontsize=7)
    a = ax[0, 1]
    for i, (g, pts) in enumerate(res["per_lr"].items()):
        for k, p in enumerate(pts):
            for c in p["curves"]:
                if c:
                    a.plot(range(1, len(c) + 1), c, color=f"C{k}", ls="-" if i == 0 else "--", alpha=0.8,
                           label=f"{g} lr={p['lr']:g}" if c is p["curves"][0] else None)
    a.set_yscale("log")
    a.set_xlabel("epoch")
    a.set_ylabel("train loss")
    a.set_title(f"loss curves ({', '.join(res['per_lr'])}: -, --)")
    a.legend(fontsize=6, ncol=2)
    return save(fig, path)



def rate_text(lr: float) -> str:
    """A learning rate as a run folder's name carries it: ``{lr:g}`` (``0.001``, ``3e-05``) with
    the digits that read back as the rate (``{lr:g}`` named 0.0010000001 and 0.001 alike, and the
    second rate's runs were refused as the first's folder)."""
    digits = 6
    while float(f"{lr:.{digits}g}") != lr and digits < 17:
        digits += 1
    return f"{lr:.{digits}g}"


def main(args) -> int:
    if not 0 < args.tolerance < 1:  # (NaN too) a share of the best score: nan or -0.1 kept no rate, and 1 every one
        raise CLIError(f"--tolerance: {args.tolerance} is no relative tolerance; give a share of the best score in "
                       "(0, 1), e.g. 0.1")
    out, progress = start(args, min_epochs=1)
    cfg = config_from(args, owned={"train.epochs": "from --epochs", "train.lr": "from --lrs", "model.gate": "from --gates",
                                   "train.seed": "from --seeds",
                                   "train.on_nan": "to skip (a diverging rate must not stop the sweep)"})
    lrs = sorted(parse_list(args.lrs, float, "--lrs", positive=True))
    gates, seeds = parse_gates(args.gates), parse_seeds(args.seeds)
    ds = load_dataset(cfg, progress)
    todo = {(lr, g, s): (variant(cfg, epochs=args.epochs, train__lr=lr, model__gate=g, train__seed=s,
                                 train__on_nan="skip"), out / "runs" / f"lr{rate_text(lr)}-{g}-s{s}")
            for lr in lrs for g in gates for s in seeds}
    runs = train_many(todo, ds, args, progress, desc="lr sweep")
    hib = ds.info.higher_is_better
    res = analyse(runs, lrs, gates, seeds, args.tolerance, hib)
    rng = res["stable_range"]
    base = "none" if "none" in gates else None
    widening = {g: (rng[g]["ratio"] / rng[base]["ratio"] if base and rng[base]["ratio"] > 0 else None)
                for g in gates if g != base}
    res.update({
        "analysis": "lr-sweep", "dataset": ds.info.name, "metric": ds.info.metric, "higher_is_better": hib,
        "lrs": lrs, "gates": gates, "seeds": seeds, "epochs": args.epochs, "tolerance": args.tolerance,
        "protocol_epochs": cfg.train.epochs,
        "range_widening": widening,
        "paper_claim": "training stays stable across a 10x learning-rate range; the gate widens the stable range",
        "definitions": DEFINITIONS, "meta": meta(args, cfg),
    })
    path = write_outputs(res, out, "lrsweep", plot)
    rows = []
    for g in gates:
        for p in res["per_lr"][g]:
            rows.append([g, f"{p['lr']:g}", p["score"], p["score_std"], f"{p['n_diverged']}/{len(seeds)}",
                         sum(p["skipped_batches"]), p["loss_spread"]])
    print(table(["gate", "lr", f"best val {ds.info.metric}", "std", "diverged", "skipped", "loss spread"], rows))
    for g in gates:
        r, nd = rng[g], res["no_divergence_range"][g]
        print(f"{g}: no divergence over lr {fmt(nd['min_lr'])}..{fmt(nd['max_lr'])} = {fmt(nd['ratio'])}x")
        print(f"{g}: within {fmt(100 * args.tolerance, 3)}% of its best over lr {fmt(r['min_lr'])}..{fmt(r['max_lr'])} "
              f"= {fmt(r['ratio'])}x" + (" (reaches the sweep edge)" if r["at_sweep_edge"] else ""))
    print(f"wrote {path}")
    return 0
