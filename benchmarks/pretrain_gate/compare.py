"""Does the output gate help pretraining? Two (or more) ``siggate pretrain`` runs that differ only
in ``model.gate``, side by side (issue 28, item 2).

    python benchmarks/pretrain_gate/compare.py --run elementwise=PT_GATE --run none=PT_NONE

Each ``PT`` is a ``siggate pretrain --out PT`` folder (``corpus/corpus.csv`` and ``meta.json``;
``model/``, an ordinary ``siggate train`` run folder). Before anything is scored the runs are
checked to share one corpus (the SHA-256 of ``corpus.csv``) and one config apart from
``model.gate`` (:data:`FREE_KEYS` may differ: where the files lie and the thread count); any
other difference is refused with a one-line error naming it (exit 2).

For each run: the gate, attention, parameters, the per-epoch validation MAE (``model/log.csv``,
column ``val``), the best epoch, the training seconds (``model/metrics.json``'s ``seconds``), and
the best epoch's validation MAE per descriptor, recomputed from ``model/best.pt`` by
:func:`siggate.train.evaluate.evaluate` on the corpus's ``val`` split (the path of ``siggate
evaluate``). Every MAE is in the units the pretraining regresses: descriptors standardized with
the corpus's training rows and clipped to +-CLIP_Z (:mod:`siggate.train.pretrain`).

Each gated run is compared with the ``gate=none`` run, paired over the descriptors
(:func:`siggate.stats.compared_pairs`: difference gate minus none, its mean, 95% t and bootstrap
intervals, the two-sided Wilcoxon signed-rank p, Holm over the gated runs). The verdict of "the
gate lowers the validation MAE" is ``holds`` only when the Wilcoxon test rejects at p < 0.05 with
a lower mean, else ``not shown``.

Writes ``OUT/results.json`` (the command and this checkout's commit included) and
``OUT/val_curves.png``; ``OUT`` defaults to ``benchmarks/results/pretrain_gate``.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import sys
from pathlib import Path

import yaml

# at the top: a module that moves breaks tests/test_benchmarks_import.py, not the next run
from siggate.analysis.claims import ALPHA, PRETRAIN_GATE, rejects_lower
from siggate.analysis.common import meta, write_json
from siggate.files import file_digest
from siggate.stats import compared_pairs, p_text
from siggate.train.plots import save_figure

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "pretrain_gate"
#: the config key the runs are meant to differ in, and the ``gate`` of the baseline
ARM_KEY, BASELINE_GATE = "model.gate", "none"
#: config keys that may differ between the runs: where each run's files lie, and the thread count
FREE_KEYS = ("data.csv", "data.cache_dir", "data.root", "train.threads")
UNITS = ("standardized descriptor units: each descriptor minus its corpus-training-rows mean, over their "
         "standard deviation, clipped to +-CLIP_Z (siggate.train.pretrain)")


class CompareError(ValueError):
    """Runs that cannot be compared (the message names the cause and the fix)."""


def parse_run(text: str) -> tuple[str, Path]:
    """``LABEL=FOLDER`` -> ``(label, folder)``."""
    label, sep, folder = text.partition("=")
    if not sep or not label or not folder:
        raise CompareError(f"--run {text!r}: give LABEL=FOLDER (e.g. --run none=PT_NONE)")
    return label, Path(folder)


def _flat(cfg: dict, prefix: str = "") -> dict:
    """``{"model.gate": ..., "model.attention.performer.kernel": ...}`` of a nested config dict."""
    out = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        out.update(_flat(v, key + ".") if isinstance(v, dict) else {key: v})
    return out


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise CompareError(f"{path}: not found; {what}")
    return path


def read_run(label: str, folder: Path) -> dict:
    """What a pretraining folder records (no model is loaded): config, curve, sizes, timing."""
    model = folder / "model"
    unfinished = "is the pretraining finished? (siggate pretrain --out FOLDER --resume completes it)"
    corpus_csv = _need(folder / "corpus" / "corpus.csv", "give a siggate pretrain --out folder")
    corpus = json.loads(_need(folder / "corpus" / "meta.json", "give a siggate pretrain --out folder").read_text())
    metrics = json.loads(_need(model / "metrics.json", unfinished).read_text())
    _need(model / "best.pt", unfinished)
    config = yaml.safe_load(_need(model / "config.yaml", unfinished).read_text())
    run_meta = config.pop("_meta", {}) or {}
    with open(_need(model / "log.csv", unfinished), newline="") as fh:
        log = list(csv.DictReader(fh))
    flat = _flat(config)
    return {
        "label": label, "folder": str(folder), "gate": flat["model.gate"], "attn": flat["model.attn"],
        "attn_type": flat.get("model.attn_type"), "params": metrics["params"], "gate_params": metrics["gate_params"],
        "epochs": metrics["epochs"], "seed": metrics["seed"], "best_epoch": metrics["best_epoch"],
        "val_mae_logged": metrics["val"], "train_seconds": metrics["seconds"],
        "epoch": [int(r["epoch"]) for r in log], "val_curve": [float(r["val"]) for r in log],
        "epoch_seconds": [float(r["seconds"]) for r in log], "run_commit": run_meta.get("git_commit"),
        "siggate_version": run_meta.get("siggate_version"), "resolved": run_meta.get("resolved"),
        "corpus_sha256": file_digest(corpus_csv), "corpus_meta": corpus, "config": flat,
    }


def check_comparable(runs: list[dict]) -> str:
    """Refuse runs that differ in anything but the gate (:data:`FREE_KEYS` aside) or the corpus;
    returns the label of the ``gate=none`` run, the baseline."""
    if len(runs) < 2:
        raise CompareError(f"give two or more --run LABEL=FOLDER (got {len(runs)}): one with gate=none and the gated ones")
    labels = [r["label"] for r in runs]
    if len(set(labels)) < len(labels):
        raise CompareError(f"--run labels must differ; got {', '.join(labels)}")
    first = runs[0]
    for run in runs[1:]:
        if run["corpus_sha256"] != first["corpus_sha256"]:
            raise CompareError(f"{run['label']} and {first['label']} pretrained on different corpora (corpus.csv sha256 "
                               f"{run['corpus_sha256'][:12]} vs {first['corpus_sha256'][:12]}); pretrain both with the "
                               "same --smiles, --molecules and --seed")
        keys = sorted(set(run["config"]) | set(first["config"]))
        differ = [k for k in keys if k != ARM_KEY and k not in FREE_KEYS
                  and run["config"].get(k, "<missing>") != first["config"].get(k, "<missing>")]
        if differ:
            k = differ[0]
            more = f" (and {len(differ) - 1} more: {', '.join(differ[1:4])})" if len(differ) > 1 else ""
            raise CompareError(f"{run['label']} and {first['label']} differ in {k} ({run['config'].get(k, '<missing>')!r} vs "
                               f"{first['config'].get(k, '<missing>')!r}){more}; only {ARM_KEY} may differ")
    gates = [r["gate"] for r in runs]
    if len(set(gates)) < len(gates):
        named = ", ".join(f"{r['label']}={r['gate']}" for r in runs)
        raise CompareError(f"two runs have the same gate ({named}); give one run per gate")
    if not all(r["attn"] for r in runs):
        off = next(r["label"] for r in runs if not r["attn"])
        raise CompareError(f"{off}: model.attn is off, so it has no gate to compare; pretrain with --set model.attn=true")
    base = [r["label"] for r in runs if r["gate"] == BASELINE_GATE]
    if not base:
        raise CompareError(f"no run has gate={BASELINE_GATE} (gates: {', '.join(gates)}); add the ungated run as the baseline")
    return base[0]


def score_val(run: dict, cache_dir: str | None) -> dict:
    """The best epoch's validation MAE per descriptor of ``run`` (``siggate evaluate``'s path)."""
    from siggate.train.evaluate import EvaluationError, evaluate

    ckpt = Path(run["folder"]) / "model" / "best.pt"
    try:
        res = evaluate(ckpt, split="val", cache_dir=cache_dir)
    except EvaluationError as exc:
        raise CompareError(str(exc)) from None
    if res["metric"] != "mae":
        raise CompareError(f"{ckpt}: its metric is {res['metric']!r}, not the pretraining's mae; is it a siggate "
                           "pretrain run?")
    return {"val_mae": res["val"], "val_mae_per_descriptor": res["per_target"]["val"], "n_val": res["n"]["val"]}


def verdict(c: dict) -> str:
    """``holds`` when the Wilcoxon test (Holm over the gated runs) rejects at p < ALPHA and the gate's mean
    MAE is lower (the claims table's rule, :func:`siggate.analysis.claims.rejects_lower`); else ``not shown``."""
    return "holds" if rejects_lower(c, "p_holm_wilcoxon") else "not shown"


def compare_runs(runs: list[dict], base: str) -> list[dict]:
    """Each gated run against ``base``, paired over the descriptors (diff = gate - none)."""
    per = {r["label"]: r["val_mae_per_descriptor"] for r in runs}
    pairs = [(base, r["label"]) for r in runs if r["label"] != base]
    out = []
    for c in compared_pairs(per, pairs, higher_is_better=False):
        c["descriptors"] = c.pop("seeds")
        c["diff_per_descriptor"] = {d: per[c["b"]][d] - per[c["a"]][d] for d in c["descriptors"]}
        c.update(verdict=verdict(c), claim=f"gate={c['b']} lowers the pretraining validation MAE against {c['a']}",
                 rule=f"holds only when the two-sided Wilcoxon signed-rank test over the descriptors (Holm over "
                      f"{len(pairs)} gated run(s)) rejects at p < {ALPHA} and the mean difference is negative; "
                      "else not shown")
        out.append(c)
    return out


def corpus_record(run: dict) -> dict:
    m = run["corpus_meta"]
    return {"csv_sha256": run["corpus_sha256"], "source": Path(str(m.get("source", ""))).name,
            "source_sha256": m.get("source_sha256"), "molecules": m.get("kept"), "seed": m.get("seed"),
            "descriptors": len(m.get("descriptors", [])), "split_sizes": m.get("split_sizes"),
            "in_test_set_removed": m.get("in_test_set"), "clip_z": m.get("clip_z")}


def plot(runs: list[dict], path: Path) -> Path:
    """The runs' validation curves in one PNG: every epoch (left; log scale when a curve spans more
    than 4x) and the second half of the epochs (right, where the curves are told apart); a star
    marks each run's best epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.2))
    for i, run in enumerate(runs):
        ep, val, color = run["epoch"], run["val_curve"], f"C{i % 10}"
        label = f"{run['label']} (gate={run['gate']}, {run['params']:,} parameters)"
        half = len(ep) // 2
        for ax, (e, v) in zip(axes, ((ep, val), (ep[half:], val[half:]))):
            ax.plot(e, v, color=color, marker="." if len(e) < 60 else None, label=label)
            if run["best_epoch"] in e:
                ax.plot([run["best_epoch"]], [val[ep.index(run["best_epoch"])]], color=color, marker="*", ms=11)
    vals = [v for r in runs for v in r["val_curve"]]
    if vals and min(vals) > 0 and max(vals) > 4 * min(vals):
        axes[0].set_yscale("log")
    axes[0].set_title("every epoch", fontsize=10)
    axes[1].set_title("second half of the epochs", fontsize=10)
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("validation MAE (standardized descriptors)")
    axes[1].legend(fontsize=8)
    fig.suptitle("descriptor pretraining, validation MAE per epoch (* best epoch)", fontsize=11)
    return save_figure(fig, path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", default=[], metavar="LABEL=FOLDER",
                   help="a siggate pretrain --out folder (repeat; one must have gate=none)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder of results.json and val_curves.png")
    p.add_argument("--cache-dir", default=None,
                   help="where the corpus's featurized graphs are cached (default: each folder's own cache/, "
                        "which its pretraining wrote)")
    args = p.parse_args(argv)
    command = "python benchmarks/pretrain_gate/compare.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    try:
        runs = [read_run(*parse_run(text)) for text in args.run]
        base = check_comparable(runs)
        for run in runs:
            own = Path(run["folder"]) / "cache"
            run.update(score_val(run, args.cache_dir or (str(own) if own.is_dir() else None)))
    except CompareError as exc:
        print(f"compare.py: error: {exc}", file=sys.stderr)
        return 2
    comparisons = compare_runs(runs, base)
    provenance, corpus = meta(), corpus_record(runs[0])
    for run in runs:
        del run["corpus_meta"], run["config"]
    res = {
        "kind": PRETRAIN_GATE,
        "question": "does the output gate lower the validation MAE of descriptor pretraining (issue 28, item 2)?",
        "command": command, "git_commit": provenance["git_commit"], "meta": provenance,
        "metric": {"name": "mae", "units": UNITS,
                   "val_curve": "model/log.csv column 'val': the mean over descriptors of each descriptor's MAE on "
                                "the corpus's val split, with that epoch's weights",
                   "val_mae_per_descriptor": "model/best.pt (the best validation epoch) scored on the val split by "
                                             "siggate.train.evaluate.evaluate; val_mae is their mean",
                   "train_seconds": "model/metrics.json 'seconds': wall-clock seconds of the training loop (resumed "
                                    "epochs included; data preparation excluded); epoch_seconds: log.csv per epoch"},
        "corpus": corpus, "free_keys": list(FREE_KEYS), "arm_key": ARM_KEY, "baseline": base,
        "runs": runs, "comparisons": comparisons,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(res, args.out / "results.json")
    plot(runs, args.out / "val_curves.png")
    for run in runs:
        print(f"{run['label']:>12s}: gate {run['gate']}, {run['params']:,} parameters, best epoch {run['best_epoch']}"
              f"/{run['epochs']}, val MAE {run['val_mae']:.4f}, {run['train_seconds']:.0f} s")
    for c in comparisons:
        print(f"{c['b']} - {c['a']}: {c['diff_mean']:+.4f} (95% CI {c['ci95'][0]:+.4f} to {c['ci95'][1]:+.4f}), "
              f"Wilcoxon p {p_text(c['p_wilcoxon'])} over {c['n_pairs']} descriptors: {c['verdict']}")
    print(f"wrote {args.out / 'results.json'} and {args.out / 'val_curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
