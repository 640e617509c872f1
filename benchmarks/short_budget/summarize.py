"""Summarize the short-budget CPU runs into results.json and results.md (no number typed by hand).

Reads benchmarks/results/short_budget/runs/DATASET/runs/GATE/seedS/{metrics.json,config.yaml,
train.log} (the `siggate compare` of run.sh) and runs/timing/*/ (the one-epoch timing runs).
Deviations from the protocol config (any resolved config key that differs from the built-in
config, other than seed, gate, epochs/warmup and data paths) are detected from each run's
config.yaml and labelled in the output.

Only what has runs here is recomputed: a dataset (or the timing section) without run folders
keeps what the committed results.json holds, and with no runs at all nothing is written (exit 2).
The committed result set was made with an earlier run.sh, one `siggate train` per run, whose
folders also held command.txt, wall.txt, rc.txt and src_state.txt; they are still read when present.

    python benchmarks/short_budget/summarize.py
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import yaml

from siggate.config import load_config
from siggate.stats import compare_paired, mean_std

# the result set this script writes (benchmarks/results/short_budget/), apart from the script
HERE = Path(__file__).resolve().parents[1] / "results" / "short_budget"
RUNS = HERE / "runs"
DATASETS = ["molhiv", "peptides-func"]
GATES = ["none", "elementwise"]  # baseline (GraphGPS) first
SEEDS = [0, 1, 2]
# keys allowed to differ from the built-in protocol config without being a deviation
EXPECTED_DIFFS = {"train.seed", "model.gate", "train.epochs", "train.warmup_epochs", "data.root", "data.cache_dir"}
# execution settings that do not change the protocol (listed separately)
EXECUTION_KEYS = {"train.threads"}

# Published full-protocol numbers, for context only (not comparable with short-budget runs).
PUBLISHED = {
    "molhiv": {
        "GraphGPS (Rampasek et al. 2022), full protocol, 100 epochs": "ROC-AUC 0.7880 ± 0.0101",
        "SigGate-GT paper claim": "ROC-AUC 0.8247",
    },
    "peptides-func": {
        "GraphGPS (Rampasek et al. 2022), full protocol, 200 epochs": "AP 0.6535 ± 0.0041",
        "SigGate-GT paper claim": "\"competitive\" on LRGB, significant gains over GraphGPS (no number in the summary)",
    },
}


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if k.startswith("_"):
            continue
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def deviations(dataset: str, cfg: dict) -> dict:
    proto = flatten(load_config(dataset).to_dict())
    run = flatten(cfg)
    return {k: {"protocol": proto.get(k), "used": run.get(k)}
            for k in sorted(set(proto) | set(run))
            if k not in EXPECTED_DIFFS | EXECUTION_KEYS and proto.get(k) != run.get(k)}


def read_text(p: Path) -> str | None:
    return p.read_text().strip() if p.exists() else None


def finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def timing() -> dict:
    """One-epoch timing runs (full protocol config, gated, seed 0)."""
    out = {}
    base = RUNS / "timing"
    if not base.exists():
        return out
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        entry: dict = {"command": read_text(d / "command.txt"), "wall_seconds": finite(read_text(d / "wall.txt")),
                       "note": read_text(d / "note.txt")}
        if (d / "log.csv").exists():
            with open(d / "log.csv") as f:
                entry["epoch_seconds"] = [float(r["seconds"]) for r in csv.DictReader(f)]
        if (d / "metrics.json").exists():
            m = json.loads((d / "metrics.json").read_text())
            entry.update(train_seconds=m["seconds"], layers=None, params=m["params"], val=m["val"], test=m["test"])
        if (d / "config.yaml").exists():
            entry["layers"] = yaml.safe_load((d / "config.yaml").read_text())["model"]["layers"]
        out[d.name] = entry
    return out


def run_command(d: Path) -> str | None:
    """A run's command: ``command.txt`` (earlier run.sh), else the first ``$ `` line of its
    ``train.log`` (written by siggate compare's executor)."""
    cmd = read_text(d / "command.txt")
    if cmd is None and (d / "train.log").exists():
        cmd = next((line[2:] for line in (d / "train.log").read_text(errors="replace").splitlines()
                    if line.startswith("$ ")), None)
    return cmd


def dataset_summary(name: str) -> dict | None:
    base = RUNS / name / "runs"
    if not base.exists():
        return None
    res: dict = {"dataset": name, "per_seed": {}, "val_per_seed": {}, "best_epoch": {}, "seconds": {},
                 "wall_seconds": {}, "params": {}, "commands": {}, "failed": [], "deviations": {}}
    metric = hib = epochs = protocol_epochs = None
    for gate in GATES:
        for key in ("per_seed", "val_per_seed", "best_epoch", "seconds", "wall_seconds", "commands"):
            res[key][gate] = {}
        for seed in SEEDS:
            d = base / gate / f"seed{seed}"
            cmd = run_command(d)
            if cmd is not None:
                res["commands"][gate][seed] = cmd
            if not (d / "metrics.json").exists():
                if d.exists():
                    res["failed"].append({"gate": gate, "seed": seed, "rc": read_text(d / "rc.txt"),
                                          "tail": (read_text(d / "stdout.txt") or read_text(d / "train.log") or "")[-800:]})
                continue
            m = json.loads((d / "metrics.json").read_text())
            cfg = yaml.safe_load((d / "config.yaml").read_text())
            metric, hib, epochs = m["metric"], bool(m.get("higher_is_better", True)), m["epochs"]
            protocol_epochs = load_config(name).train.epochs
            res["per_seed"][gate][seed] = m["test"]
            res["val_per_seed"][gate][seed] = m["val"]
            res["best_epoch"][gate][seed] = m["best_epoch"]
            res["seconds"][gate][seed] = round(m["seconds"], 1)
            res["wall_seconds"][gate][seed] = finite(read_text(d / "wall.txt"))
            res["params"][gate] = m["params"]
            res["threads"] = cfg["train"].get("threads")
            res.setdefault("epoch_seconds", {}).setdefault(gate, {})[seed] = [round(h["seconds"], 1) for h in m["history"]]
            res["git_commit"] = cfg.get("_meta", {}).get("git_commit")
            state = (read_text(d / "src_state.txt") or "").splitlines()
            res.setdefault("src_state_at_run", {}).setdefault(gate, {})[seed] = state
            for k, v in deviations(name, cfg).items():
                res["deviations"][k] = v
    res.update(metric=metric, higher_is_better=hib, epochs=epochs, protocol_epochs=protocol_epochs)
    res["mean_std"] = {g: dict(zip(("mean", "std"), mean_std(res["per_seed"][g]))) if res["per_seed"][g] else None
                       for g in GATES}
    res["val_mean_std"] = {g: dict(zip(("mean", "std"), mean_std(res["val_per_seed"][g]))) if res["val_per_seed"][g] else None
                           for g in GATES}
    if res["per_seed"]["none"] and res["per_seed"]["elementwise"]:
        res["compare_elementwise_vs_none"] = compare_paired(res["per_seed"]["none"], res["per_seed"]["elementwise"],
                                                            higher_is_better=hib if hib is not None else True)
    res["published_full_protocol_for_context"] = PUBLISHED[name]
    return res


def fmt(x, nd=4):
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def fmt_p(x):
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{float(x):.3g}"


def markdown(results: dict) -> str:
    L = ["# Short-budget CPU benchmark: GraphGPS (gate none) vs SigGate-GT (gate elementwise)", ""]
    L.append("Issue \"Benchmark datasets\", item 7. Generated by `summarize.py` from the runs of `run.sh`; "
             "nothing here is typed by hand. Runs ran one after the other on a shared 2-core CPU machine "
             "(other engineers' jobs running at the same time), no GPU.")
    L.append("")
    for name in DATASETS:
        r = results["datasets"].get(name)
        if r is None:
            L += [f"## {name}", "", "Not run.", ""]
            continue
        ep, pep = r["epochs"], r["protocol_epochs"]
        L += [f"## {name} ({r['metric']}, {'higher' if r['higher_is_better'] else 'lower'} is better)", ""]
        L.append(f"**These are short-budget CPU numbers: {ep} epoch(s) of the protocol's {pep}"
                 + (", with a reduced model (see deviations below)" if r["deviations"] else "")
                 + ". They are NOT comparable to the full-protocol numbers in the last column, which are "
                   "given for context only.**")
        L.append("")
        if r["deviations"]:
            L.append("**Deviation from the GraphGPS protocol config** (beyond the epoch budget):")
            for k, v in r["deviations"].items():
                L.append(f"- `{k}`: protocol {v['protocol']}, used **{v['used']}**")
            L.append("")
        if r.get("threads"):
            L.append(f"Execution setting (not a protocol change): `train.threads={r['threads']}` (torch intra-op "
                     f"threads; see the timing section for why).")
            L.append("")
        c = r.get("compare_elementwise_vs_none") or {}
        pub = "<br>".join(f"{k}: {v}" for k, v in r["published_full_protocol_for_context"].items())
        L.append(f"| gate | test {r['metric']} mean ± std (n seeds) | val {r['metric']} mean ± std | "
                 f"per-seed test (seed: value) | params | epoch s per run (seed: s) | wall s per run (mean) | paired t p | Wilcoxon p | "
                 f"published full-protocol numbers (context only, not comparable) |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for i, g in enumerate(GATES):
            ms, vs = r["mean_std"][g], r["val_mean_std"][g]
            n = len(r["per_seed"][g])
            label = "none (GraphGPS)" if g == "none" else "elementwise (SigGate-GT)"
            per = ", ".join(f"{s}: {fmt(v)}" for s, v in sorted(r["per_seed"][g].items()))
            secs = ", ".join(f"{s}: {v:.0f}" for s, v in sorted(r["seconds"][g].items())) or "n/a"
            walls = [v for v in r["wall_seconds"][g].values() if v is not None]
            msec = f"{secs} | {sum(walls) / len(walls):.0f}" if walls else f"{secs} | n/a"
            pt = "baseline" if i == 0 else fmt_p(c.get("p_paired_t"))
            pw = "baseline" if i == 0 else fmt_p(c.get("p_wilcoxon"))
            L.append(f"| {label} | {fmt(ms and ms['mean'])} ± {fmt(ms and ms['std'])} ({n}) | "
                     f"{fmt(vs and vs['mean'])} ± {fmt(vs and vs['std'])} | {per} | {r['params'].get(g, 'n/a')} | "
                     f"{msec} | {pt} | {pw} | {pub if i == 0 else ''} |")
        L.append("")
        if r["epochs"] == 1:
            L.append("With a budget of 1 epoch the best-validation epoch is that epoch: the test value is the "
                     "test metric after the single epoch. 'epoch s' is the training loop's time (metrics.json "
                     "`seconds`, the epoch incl. val/test evaluation and checkpointing); 'wall s' adds process "
                     "start-up and loading the cached dataset.")
            L.append("")
        if c:
            L.append(f"Paired over seeds {c['seeds']}: mean difference (elementwise − none) {fmt(c['mean_diff'])} "
                     f"± {fmt(c['std_diff'])}; elementwise better on {c['wins']} seed(s), worse on {c['losses']}, "
                     f"tied on {c['ties']}. With 3 seeds the Wilcoxon signed-rank test cannot go below p = 0.25 "
                     f"(two-sided), so it can never show significance here."
                     + (f" Notes: {'; '.join(c['notes'])}." if c.get("notes") else ""))
            L.append("")
        if r["failed"]:
            L.append("**Failed runs:**")
            for f in r["failed"]:
                L.append(f"- gate {f['gate']} seed {f['seed']}: rc={f['rc']}")
            L.append("")
        L.append("Exact commands (from the repository root):")
        L.append("")
        L.append("```bash")
        for g in GATES:
            for s, cmd in sorted(r["commands"][g].items()):
                L.append(cmd)
        L.append("```")
        L.append("")
    t = results.get("timing") or {}
    if t:
        L += ["## One-epoch timing (full protocol model, gated, seed 0)", ""]
        L.append("| run | layers | epoch seconds (log.csv) | train seconds (metrics.json) | wall seconds | note |")
        L.append("|---|---|---|---|---|---|")
        for k, v in t.items():
            eps = ", ".join(f"{x:.0f}" for x in v.get("epoch_seconds", [])) or "n/a"
            L.append(f"| {k} | {v.get('layers', 'n/a')} | {eps} | {fmt(v.get('train_seconds'), 0)} | "
                     f"{fmt(v.get('wall_seconds'), 0)} | {v.get('note') or ''} |")
        L.append("")
        L.append("Commands:")
        L.append("")
        L.append("```bash")
        for k, v in t.items():
            if v.get("command"):
                L.append(v["command"])
        L.append("```")
        L.append("")
    if (HERE / "timing_probe.txt").exists():
        L += ["## Per-batch timing probe (timing_probe.py), used to choose the budget", "", "```",
              (HERE / "timing_probe.txt").read_text().strip(), "```", ""]
    tw = results.get("total_wall_seconds")
    if tw:
        L.append(f"Total wall time of the {results['n_runs']} benchmark runs (one after the other): "
                 f"{tw / 60:.1f} min.")
        L.append("")
    states = results.get("src_states") or {}
    if len(states) > 1:
        L.append(f"**Code drift during the runs:** the package is installed editable and other engineers committed "
                 f"and edited `src/` while these runs ran; the runs imported {len(states)} different source states "
                 f"(commit + hash of the uncommitted `src/` diff, recorded per run in results.json "
                 f"`src_state_at_run`):")
        L.append("")
        for st, runs in states.items():
            L.append(f"- `{st}`: {', '.join(runs)}")
        L.append("")
    L.append(f"Code: git commit `{results.get('git_commit')}`"
             + (" with uncommitted changes by other engineers in src/ at run time (editable install), listed in "
                "results.json `src_dirty_at_summary`." if results.get("src_dirty_at_summary") else "."))
    L.append("")
    return "\n".join(L)


def main() -> int:
    committed = json.loads((HERE / "results.json").read_text()) if (HERE / "results.json").exists() else {}
    fresh = {name: r for name in DATASETS if (r := dataset_summary(name)) is not None}
    timing_now = timing()
    if not fresh and not timing_now:
        print(f"summarize: no runs under {RUNS}: run benchmarks/short_budget/run.sh first "
              "(the committed results are kept as they are)", file=sys.stderr)
        return 2
    results = {"description": "short-budget CPU runs, gate none (GraphGPS) vs elementwise (SigGate-GT), seeds 0-2; "
                              "test metric at the best-validation epoch",
               "datasets": {}, "timing": timing_now or committed.get("timing", {})}
    for name in DATASETS:
        r = fresh.get(name) or committed.get("datasets", {}).get(name)
        if r is not None:
            results["datasets"][name] = r
            results["git_commit"] = r.get("git_commit")
    walls, states = [], {}
    for name, r in results["datasets"].items():
        for g in GATES:
            walls += [v for v in r["wall_seconds"][g].values() if v is not None]
            for seed, st in (r.get("src_state_at_run", {}).get(g) or {}).items():
                key = f"{st[0][:10] if st else '?'} / {st[-1].split()[-1][:10] if st else '?'}"
                states.setdefault(key, []).append(f"{name} {g} seed{seed}")
    results["total_wall_seconds"] = round(sum(walls), 1)
    results["n_runs"] = len(walls)
    results["src_states"] = states
    try:
        root = HERE.parents[2]
        st = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True)
        results["src_dirty_at_summary"] = [l for l in st.stdout.splitlines() if l.strip()]
    except OSError:
        results["src_dirty_at_summary"] = None
    if (HERE / "notes.txt").exists():
        results["notes"] = (HERE / "notes.txt").read_text().strip().splitlines()
    (HERE / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = markdown(results)
    if results.get("notes"):
        md += "\n## Notes\n\n" + "\n".join(f"- {n}" for n in results["notes"]) + "\n"
    (HERE / "results.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
