"""Which BatchNorm statistics should an evaluation use? (issue 30, item 4)

One training run of ``siggate train --data`` (the csv recipe, a peer task's split), scored
after every epoch in several ways on the very same weights. The running statistics never
enter a training step (BatchNorm normalises a training batch with its own statistics), so
every way shares one training trajectory, and one run compares them all:

* ``running``: what ``siggate train`` scored until now (PyTorch's running averages,
  momentum 0.1: in effect the last 10-20 batches of the epoch); the run's own ``val``/``test``;
* ``train``: the statistics recomputed on the whole training set first
  (:func:`siggate.train.bn_stats.recompute_bn_stats`, ``train.eval_norm: train``);
* ``epoch``: the cumulative average of every batch's statistics over the epoch (BatchNorm
  with ``momentum=None`` reset at each epoch's start), recorded here by hooks;
* ``ema<H>``: an exponential moving average of the weights over about ``H`` epochs
  (per step ``w_avg <- d w_avg + (1 - d) w`` with ``d = 1 - 1 / (H * steps per epoch)``),
  with the statistics recomputed on the training set for those weights;
* ``ema<H>b``: the same average taken of the BatchNorm running statistics too (as timm's
  ``ModelEmaV2`` averages the whole state), no extra pass: free.

``--ways`` picks them (default: all of the above with ``H`` = 3 and 10). For each way: the
validation curve, its best epoch (the first best, as ``fit`` selects) and the test metric
there, the last epoch's test metric, and the time the extra pass costs. With
``--test-at-best`` a way's test metric is computed only at the epochs where its validation
metric improves and at the last one (the rest are ``null``): the same selection and scores for
a third of the scoring. Writes one JSON (``--out``) with the command, commit, seed and every
epoch's scores.

    python benchmarks/stable_eval/probe.py --task zincmr4k --seed 0 \\
        --out benchmarks/results/stable_eval/probe_zincmr4k_seed0.json
    python benchmarks/stable_eval/probe.py --task nci5k --seed 1 --ways running,train,ema3,ema3b \\
        --test-at-best --out benchmarks/results/stable_eval/probe_nci5k_seed1.json
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks" / "peers"))



class EpochAverage:
    """Per BatchNorm layer, the cumulative average of the training batches' means and unbiased
    variances since the last :meth:`reset` (what ``momentum=None`` keeps in ``running_*``)."""

    def __init__(self, norms) -> None:
        self.norms = norms
        self.hooks = [bn.register_forward_pre_hook(self._record) for bn in norms]
        self.reset()

    def reset(self) -> None:
        self.sums = {bn: [0.0, 0.0, 0] for bn in self.norms}

    def _record(self, bn, inputs) -> None:
        if not bn.training:
            return
        x = inputs[0].detach()
        s = self.sums[bn]
        s[0] = s[0] + x.mean(0)
        s[1] = s[1] + x.var(0, unbiased=True)
        s[2] += 1

    def apply_to(self, model) -> None:
        """Copy the averages into the BatchNorm layers of ``model`` (a deep copy of the
        trained model: its layers correspond to :attr:`norms` in module order)."""
        from siggate.train.bn_stats import batch_norms

        for bn, target in zip(self.norms, batch_norms(model)):
            mean, var, n = self.sums[bn]
            if n:
                target.running_mean.copy_(mean / n)
                target.running_var.copy_(var / n)


def parse_args(argv=None):
    import tasks as T

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", required=True, choices=sorted(T.TASKS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs (a quick look)")
    p.add_argument("--ways", default="running,train,epoch,ema3,ema10,ema3b,ema10b",
                   help="ways of scoring: running, train, epoch, ema<H> and ema<H>b (H epochs; default: all, H = 3, 10)")
    p.add_argument("--test-at-best", action="store_true",
                   help="score a way's test split only where its val improves and at the last epoch")
    p.add_argument("--data-dir", type=Path, default=T.DEFAULT_DATA_DIR)
    p.add_argument("--cache-dir", type=Path, default=Path("/tmp/siggate-stable-eval-cache"))
    p.add_argument("--siggate-args", default="", help="extra siggate train flags, e.g. \"--set train.lr=0.001\"")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    args.ways = args.ways.split(",")
    bad = [w for w in args.ways if w not in ("running", "train", "epoch") and parse_ema(w) is None]
    if bad or "running" not in args.ways:
        p.error(f"--ways: {', '.join(bad) or 'running is missing'}: give running (the run's own scores) and any "
                "of train, epoch, ema<H>, ema<H>b")
    return args


def parse_ema(way: str) -> float | None:
    """The horizon ``H`` of an ``ema<H>`` or ``ema<H>b`` way, None for another name."""
    if not way.startswith("ema"):
        return None
    try:
        h = float(way[3:].removesuffix("b"))
    except ValueError:
        return None
    return h if h > 0 else None


def build_config(args):
    """The config ``siggate train --data`` builds for the task (the peer benchmark's flags);
    the run itself scores with the running statistics (the ``running`` way), whatever the
    recipe's default, so that no evaluation touches the model being trained."""
    import tasks as T

    from siggate.cli import build_parser
    from siggate.config_args import CLIError, config_from_args

    task = T.TASKS[args.task]
    folder = args.data_dir / args.task
    if not (folder / "data.csv").is_file():
        raise SystemExit(f"{folder / 'data.csv'} is missing; build it: python benchmarks/peers/tasks.py --build {args.task}")
    from siggate.config import ConfigError

    if "train.eval_norm=" in args.siggate_args.replace(" ", ""):  # (the probe sets it; siggate refuses a key twice)
        print("probe: error: --siggate-args sets train.eval_norm; the probe scores with the running statistics "
              "itself: drop it", file=sys.stderr)
        raise SystemExit(2)
    argv = ["train", "--data", str(folder / "data.csv"), "--smiles-col", "smiles", "--target-col", "y",
            "--task", task.task, "--split", "column:split", "--seed", str(args.seed),
            "--cache-dir", str(args.cache_dir / args.task), "--set", "train.eval_norm=running",
            *shlex.split(args.siggate_args)]
    if args.epochs:
        argv += ["--epochs", str(args.epochs)]
    try:
        return config_from_args(build_parser().parse_args(argv)), argv
    except (CLIError, ConfigError) as e:  # e.g. --epochs with a --siggate-args "--set train.epochs=N"
        print(f"probe: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def best_epoch(vals: list[float], higher: bool) -> int:
    """0-based index of the first best finite value (``fit``'s rule)."""
    best = None
    for i, v in enumerate(vals):
        if best is None or (math.isfinite(v) and (v > vals[best] if higher else v < vals[best])):
            best = i
    return best


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from siggate.train.bn_stats import batch_norms, graph_batches, recompute_bn_stats
    from siggate.train.dataprep import prepare_data
    from siggate.train.loop import fit, setup_run
    from siggate.train.record import git_commit
    from siggate.train.scoring import evaluate_splits

    commit = git_commit()  # the code this process runs (read before the checkout can move)
    cfg, train_argv = build_config(args)
    torch.set_num_threads(cfg.train.threads or 1)
    ds = prepare_data(cfg.data, cfg.model, cfg.train.seed, progress=False)
    run = setup_run(cfg.model, cfg.train, ds)
    model, bs = run.model, cfg.train.eval_batch_size
    scratch = copy.deepcopy(model)  # scored in each way; copied before any hook is registered
    average = EpochAverage(batch_norms(model)) if "epoch" in args.ways else None
    steps = math.ceil(len(ds.train) / cfg.train.batch_size)
    horizons = sorted({parse_ema(w) for w in args.ways if w.startswith("ema")})
    decays = {f"ema{h:g}": 1 - 1 / (h * steps) for h in horizons}
    emas = {name: [p.detach().clone() for p in model.parameters()] for name in decays}
    stats = [b for bn in batch_norms(model) for b in (bn.running_mean, bn.running_var)]
    ema_stats = {name: [b.clone() for b in stats] for name in decays}

    def ema_step(*_):
        with torch.no_grad():
            for name, decay in decays.items():
                for e, p in zip(emas[name] + ema_stats[name], list(model.parameters()) + stats):
                    e.mul_(decay).add_(p.detach(), alpha=1 - decay)

    if decays:
        run.optimizer.register_step_post_hook(ema_step)
    higher = run.info.higher_is_better
    rows = []
    best_val: dict[str, float] = {}

    def score(way: str, m, last: bool) -> list:
        """``[val, test]`` of ``m``; with --test-at-best the test only where val improves or at the end."""
        val = evaluate_splits(m, ds, ["val"], run.mean, run.std, bs)["val"]
        b = best_val.get(way)
        improved = b is None or (math.isfinite(val) and (val > b if higher else val < b))
        if improved:
            best_val[way] = val
        if args.test_at_best and not (improved or last):
            return [val, None]
        return [val, evaluate_splits(m, ds, ["test"], run.mean, run.std, bs)["test"]]

    def on_epoch_end(run, end):
        last = end.row["epoch"] == cfg.train.epochs
        row = {"epoch": end.row["epoch"], "lr": end.row["lr"], "train_loss": end.row["train_loss"],
               "seconds_epoch": end.row["seconds"], "running": [end.row["val"], end.row["test"]]}
        m = scratch
        if "train" in args.ways:
            m.load_state_dict(model.state_dict())
            t0 = time.process_time()
            recompute_bn_stats(m, graph_batches(ds.train))
            row["seconds_recompute"] = time.process_time() - t0
            row["train"] = score("train", m, last)
        if average is not None:
            m.load_state_dict(model.state_dict())
            average.apply_to(m)
            row["epoch_avg"] = score("epoch", m, last)
            average.reset()
        for name, ema in emas.items():
            with torch.no_grad():
                for p, e in zip(m.parameters(), ema):
                    p.copy_(e)
                for b, e in zip([b for bn in batch_norms(m) for b in (bn.running_mean, bn.running_var)],
                                ema_stats[name]):
                    b.copy_(e)
            if name + "b" in args.ways:
                row[name + "b"] = score(name + "b", m, last)
            if name in args.ways:
                recompute_bn_stats(m, graph_batches(ds.train))
                row[name] = score(name, m, last)
        rows.append(row)
        print(json.dumps({k: (v if not isinstance(v, float) else round(v, 4)) for k, v in row.items()}), flush=True)

    t0 = time.time()
    fit(run, progress=False, on_epoch_end=on_epoch_end)
    summary = {}
    # the schedule's floor (train.warmup_start of the base rate): the epochs where the weights barely move
    floor_lr = min(r["lr"] for r in rows if r["epoch"] > cfg.train.warmup_epochs)
    for way in args.ways:
        key = "epoch_avg" if way == "epoch" else way
        vals = [r[key][0] for r in rows]
        b = best_epoch(vals, higher)
        tail = vals[-20:]
        floor = [v for v, r in zip(vals, rows) if r["epoch"] > cfg.train.warmup_epochs and r["lr"] <= floor_lr * 1.0001]
        summary[way] = {"best_epoch": b + 1, "val": vals[b], "test": rows[b][key][1],
                        "last_val": vals[-1], "last_test": rows[-1][key][1],
                        "tail20_mean_abs_step": sum(abs(a - c) for a, c in zip(tail, tail[1:])) / max(len(tail) - 1, 1),
                        "tail20_range": max(tail) - min(tail),
                        "floor_epochs": len(floor), "floor_min": min(floor, default=None),
                        "floor_max": max(floor, default=None)}
    result = {
        "what": "val/test per epoch of one csv-recipe run scored with several kinds of BatchNorm statistics "
                "and weight averages (benchmarks/stable_eval/probe.py)",
        "command": " ".join(["python", "benchmarks/stable_eval/probe.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]),
        "siggate_train_equivalent": "siggate " + " ".join(map(shlex.quote, train_argv)),
        "git_commit": commit, "task": args.task, "seed": args.seed, "metric": run.info.metric,
        "higher_is_better": higher, "ema_decay_per_step": decays, "steps_per_epoch": steps, "epochs": cfg.train.epochs, "lr": cfg.train.lr,
        "python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "wall_seconds": time.time() - t0, "summary": summary, "history": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
