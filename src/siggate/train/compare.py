"""``siggate compare``: train every (gate, seed) pair and compare the gates across seeds.

Each pair is one ``python -m siggate train`` process writing to
``OUT/runs/<gate>/seed<seed>``; up to ``--jobs`` run at a time. Runs of one seed differ only
in the gate: the training loop draws the data order from ``(seed, epoch)`` and initialises
the gate parameters last, so every other initial weight is shared (tested in
``tests/test_engine.py``). The first gate listed is the baseline; every other gate is
compared with it on the seeds both finished (paired t-test, Wilcoxon signed-rank, Welch).

A rerun skips pairs whose ``metrics.json`` exists and resumes interrupted pairs from their
``last.pt``. Outputs: ``OUT/results.json``, ``OUT/results.md`` and ``OUT/val_curves.png``.
Failed pairs are listed in all three and make the command exit with status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import shlex
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..config_args import add_command, add_set_flag, flag_key_clash
from ..files import atomic_write_bytes, out_dir_problem
from ..options import (
    GATE_KINDS,
    GATE_POSITIONS,
    add_cache_dir_flag,
    add_data_root_flag,
    add_progress_flag,
    init_is_none,
    parse_gate_spec,
    progress_enabled,
)
from .executor import ExecutorError, add_executor_args, failure_line, task_threads
from .runfiles import CONFIG

log = logging.getLogger("siggate.compare")



def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> ``[0, 1, 2, 3, 4]``; ``"0,3,7-8"`` -> ``[0, 3, 7, 8]`` (order kept). A seed
    listed twice, or an empty entry, is refused (``0,0`` ran one seed where two were asked)."""
    seeds: list[int] = []
    parts = [part.strip() for part in str(text).split(",")]
    if not any(parts):
        raise ValueError("--seeds: no seed given")
    for part in parts:
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"--seeds: cannot read {part!r} in {text!r}; use e.g. 0-9 or 0,2,5 (seeds >= 0)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if len(seeds) + hi - lo + 1 > MAX_SEEDS:  # (counted before a range is walked: 0-99999999999 hung)
            raise ValueError(f"--seeds: {text!r} names more than {MAX_SEEDS:,} seeds, one run per arm each; give a "
                             "range such as 0-9")
        twice = min(set(seeds) & set(range(lo, hi + 1)), default=None)
        if twice is not None:
            raise ValueError(f"--seeds: seed {twice} is listed twice in {text!r}; list each seed once")
        seeds += range(lo, hi + 1)
    return seeds


#: the most seeds ``--seeds`` takes: a comparison of more runs than this per arm is a mistyped range
MAX_SEEDS = 10_000


#: ``--gates`` suffixes that make a parameter-matched ungated control, and the
#: ``model.param_match`` rule each stands for (``none@matched`` is short for ``none@matched-ffn``)
MATCH_RULES = {"matched-ffn": "ffn", "matched": "ffn"}


@dataclass(frozen=True)
class GateSpec:
    """An arm: gate kind and, optionally, its position (``elementwise@value``), or an
    ungated control matched in parameters to the elementwise gate (``none@matched-ffn``,
    see :func:`siggate.nn.model.matched_ffn_dim`)."""

    label: str
    gate: str
    position: str | None = None
    match: str | None = None

    @classmethod
    def parse(cls, text: str, recorded: tuple[str, ...] = ()) -> "GateSpec":
        """The arm ``text`` names; ``recorded``: the arms of the comparison already in the folder,
        an earlier siggate's spelling among them (``elementwise@``) kept as its own label."""
        text = text.strip()
        gate, pos = parse_gate_spec(text)
        if gate not in GATE_KINDS:
            raise ValueError(f"--gates: unknown gate {gate!r} in {text!r}; gates: {', '.join(GATE_KINDS)}")
        if text == f"{gate}@" and text not in recorded:  # (it ran as an arm of its own beside the plain gate)
            others = "none@matched-ffn, the parameter-matched control" if gate == "none" else \
                f"{gate}@POSITION ({', '.join(GATE_POSITIONS)})"
            raise ValueError(f"--gates: {text!r} names no position after '@'; give {gate}, or {others}")
        if text == f"{gate}@":
            return cls(text, gate, None)
        if gate == "none" and pos in MATCH_RULES:
            rule = MATCH_RULES[pos]
            return cls(f"none@matched-{rule}", "none", None, rule)
        if pos and pos not in GATE_POSITIONS:
            raise ValueError(f"--gates: unknown position {pos!r} in {text!r}; positions: {', '.join(GATE_POSITIONS)}"
                             + (" (or none@matched-ffn for the parameter-matched control)" if gate == "none" else ""))
        if pos and gate == "none":
            raise ValueError(f"--gates: {text!r}: the baseline without gate has no position; "
                             "none@matched-ffn is the parameter-matched control")
        return cls(text, gate, pos or None)

    def overrides(self) -> list[str]:
        out = [f"model.gate={self.gate}"]
        if self.position:
            out.append(f"model.gate_position={self.position}")
        if self.match:
            out.append(f"model.param_match={self.match}")
        return out


def parse_gates(text: str, recorded: tuple[str, ...] = ()) -> list[GateSpec]:
    """The arms of ``--gates`` (the first is the baseline); an empty entry is refused (``,elementwise``
    made elementwise the baseline of a one-arm comparison). ``recorded``: see :meth:`GateSpec.parse`."""
    items = [t.strip() for t in str(text).split(",")]
    if any(items) and not all(items):
        raise ValueError(f"--gates: {text!r} has an empty entry; list the gates with one comma between each, e.g. "
                         "none,elementwise")
    specs = [GateSpec.parse(t, recorded) for t in items if t]
    labels = [s.label for s in specs]
    if len(specs) < 1:
        raise ValueError("--gates: give at least one gate, e.g. none,elementwise")
    if len(set(labels)) != len(labels):
        raise ValueError(f"--gates: a gate is listed twice: {text!r}")
    return specs


class CompareError(RuntimeError):
    """A comparison that cannot start (bad arguments or config)."""


def _absolute_paths(args) -> None:
    """The paths a comparison names, in place, absolute with ``~`` expanded (as ``siggate train``
    records them, :func:`~siggate.config_args.absolute_paths`): a ``--config`` file (a built-in
    name stays a name), ``--data-root``, ``--cache-dir`` and the ``--set`` items of ``data.csv``,
    ``data.root``, ``data.cache_dir`` and ``train.init``, each value read as the config reads it
    (YAML's nulls stay null). The command the results record reproduces the comparison from any
    folder (``--aggregate-only`` from another one looked for 'myz.yaml' there, and read a
    data.csv or an init of another folder as another config; helper-183, helper-188). Malformed
    items are left to the refusals of the config."""
    from ..config import CONFIG_DIR, ConfigError, parse_override, resolve_config_path, text_if_text
    from ..config_args import DATA_PATH_KEYS, absolute_path, init_source

    if args.config:
        try:
            path = resolve_config_path(args.config)
        except ConfigError:
            path = None
        if path is not None and not (path.parent == CONFIG_DIR and path.stem == args.config):
            args.config = absolute_path(args.config)
    for flag in ("data_root", "cache_dir"):
        if getattr(args, flag, None):
            setattr(args, flag, absolute_path(getattr(args, flag)))
    paths = {f"data.{k}": absolute_path for k in DATA_PATH_KEYS} | {"train.init": init_source}
    items = []
    for item in args.overrides:
        try:
            parts, parsed = parse_override(item)
            value = text_if_text(parts, item.partition("=")[2], parsed)
        except ConfigError:
            parts, value = [], None
        make = paths.get(".".join(parts))
        made = make(value) if make and isinstance(value, str) and value else value
        items.append(f"{'.'.join(parts)}={json.dumps(made)}" if made != value else item)  # (a name or null as given)
    args.overrides = items


def _config_name(args) -> str:
    """The config a comparison's runs train with (``--config ""`` is passed on, to be refused)."""
    return "nci5k" if args.config is None else args.config


def _config_args(args, spec: GateSpec, seed: int) -> list[str]:
    """The config part of a pair's ``siggate train`` arguments."""
    return ["--config", _config_name(args), "--seed", str(seed)] + _shared_flags(args, spec.overrides())


def _shared_flags(args, overrides=()) -> list[str]:
    """The flags ``siggate compare`` hands on to each run as given: ``--set`` (its own, then
    ``overrides``), ``--epochs``, ``--budget``, ``--data-root`` and ``--cache-dir``."""
    out = []
    for o in list(args.overrides) + list(overrides):
        out += ["--set", o]
    for flag, value in (("--epochs", args.epochs), ("--budget", getattr(args, "budget", None)),
                        ("--data-root", args.data_root or None), ("--cache-dir", args.cache_dir or None)):
        if value is not None:
            out += [flag, str(value)]
    return out


def config_for(args, spec: GateSpec, seed: int):
    """The config a pair's ``siggate train`` process resolves (validated), read by the
    same code as ``siggate train``."""
    from ..config_args import add_config_args, config_from_args

    parser = argparse.ArgumentParser()
    add_config_args(parser)
    return config_from_args(parser.parse_args(_config_args(args, spec, seed)))


def run_pairs(pairs: list, args, progress: bool = True) -> None:
    """Run the pending pairs (:class:`~.study.StudyRun` tagged ``(arm, seed)``) on the executor
    chosen by ``--backend`` (``--jobs`` local processes, or Ray tasks), each a ``siggate train``
    process in its own run folder."""
    from tqdm.auto import tqdm

    from .executor import executor_from_args
    from .study import execute

    def report(r) -> None:
        if r.state == "failed":
            spec, seed = r.tag
            tqdm.write(f"siggate compare: FAILED {spec.label} seed {seed} ({failure_line(r.error)})", file=sys.stderr)

    execute(pairs, executor_from_args(args), desc="compare", progress=progress, on_result=report)


def _finite(x):
    """JSON-safe number: NaN/inf -> None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return _finite(obj)


def aggregate(pairs: list, specs: list[GateSpec], seeds: list[int]) -> dict:
    """Per-seed scores, mean ± std, the paired comparisons of every arm with the baseline
    (first gate; ``vs_baseline``, with today's top-level p-values) and of every pair of arms
    (``comparisons``: intervals, effect size, Holm-adjusted p-values over the list)."""
    from ..stats import all_pairs, mean_std, summarize
    from .metrics import higher_is_better

    labels = [s.label for s in specs]
    finished = [p for p in pairs if p.state == "done"]
    metric = finished[0].metrics.get("metric") if finished else None
    hib = higher_is_better(metric) if metric else None
    per_seed = {lab: {} for lab in labels}
    per_seed_val, best_epoch, seconds, curves = ({lab: {} for lab in labels} for _ in range(4))
    params, gate_params = {}, {}
    for p in finished:
        m, (spec, seed) = p.metrics, p.tag
        # a score a run could not record (null: a split without a label, a record made elsewhere) is not a number
        per_seed[spec.label][seed] = float("nan") if m.get("test") is None else m["test"]
        per_seed_val[spec.label][seed] = float("nan") if m.get("val") is None else m["val"]
        best_epoch[spec.label][seed] = m.get("best_epoch")
        seconds[spec.label][seed] = m.get("seconds")
        curves[spec.label][seed] = [h["val"] for h in m.get("history", [])]
        params[spec.label] = m.get("params")
        gate_params[spec.label] = m.get("gate_params")
    summary = summarize(per_seed, labels[0], bool(hib)) if metric else None
    res = {
        "dataset": finished[0].metrics.get("dataset") if finished else None,
        "metric": metric,
        "higher_is_better": hib,
        "baseline": labels[0],
        "gates": labels,
        "seeds": seeds,
        "per_seed": per_seed,
        "per_seed_val": per_seed_val,
        "mean": {lab: mean_std(per_seed[lab])[0] for lab in labels},
        "std": {lab: mean_std(per_seed[lab])[1] for lab in labels},
        "n": {lab: len(per_seed[lab]) for lab in labels},
        "val_mean": {lab: mean_std(per_seed_val[lab])[0] for lab in labels},
        "val_std": {lab: mean_std(per_seed_val[lab])[1] for lab in labels},
        "best_epoch": best_epoch,
        "seconds": seconds,
        "params": params,
        "gate_params": gate_params,
        "val_curves": curves,
        "vs_baseline": summary["comparisons"] if summary else {},
        "comparisons": all_pairs(per_seed, labels, bool(hib)) if metric else [],
        "failed": [{"gate": p.tag[0].label, "seed": p.tag[1], "returncode": p.returncode, "error": p.error}
                   for p in pairs if p.state in ("failed", "conflict")],
        "missing": [{"gate": p.tag[0].label, "seed": p.tag[1]} for p in pairs if p.state in ("new", "resume")],
    }
    comps = res["vs_baseline"]
    for key in ("p_paired_t", "p_wilcoxon", "p_welch"):
        if len(labels) == 2:
            res[key] = comps[labels[1]][key] if labels[1] in comps else float("nan")
        else:
            res[key] = {lab: c[key] for lab, c in comps.items()}
    return res


def _ffn_width(model_cfg: dict) -> int:
    from ..nn.model import resolve_ffn_dim

    return resolve_ffn_dim(model_cfg) or 2 * int(model_cfg["dim"])


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.{digits}f}"


def _fmt_p(p) -> str:
    from ..stats import p_text

    return p_text(p)


#: how ``results.md`` names each metric
METRIC_NAMES = {"mae": "MAE", "ap": "AP", "rocauc": "ROC-AUC", "accuracy": "accuracy (%)",
                "weighted_accuracy": "weighted accuracy (%)"}


def _spread(std, n: int) -> str:
    """`` ± std`` of an arm's ``n`` runs; one run has no spread (its std is recorded as 0), and
    none no score (it read "n/a ± n/a")."""
    return {0: " (no run scored)", 1: " (1 run, no spread)"}.get(n, f" ± {_fmt(std)}")


def _scored_epoch(res: dict, name: str) -> str:
    """Which epoch of each run the scores are taken at: its best validation epoch, or its
    schedule's last (``train.select`` of the runs' config, :func:`~siggate.options.resolve_select`)."""
    from ..options import keeps_last

    select = ((res.get("config") or {}).get("train") or {}).get("select") or "best"
    if keeps_last(select):
        return f"at the schedule's last epoch (train.select={select}: validation chose no epoch)"
    return f"at the epoch of best validation {name}"


def render_markdown(res: dict) -> str:
    """``results.md``: mean ± std per variant, paired differences by seed and the tests."""
    import numpy as np

    from ..stats import rounded_difference  # (numpy: the pair's two scores as float64)

    metric = res["metric"] or "metric"
    hib = res["higher_is_better"]
    # (no run scored, every one failed: no metric and no direction, which read "lower is better")
    direction = {True: "higher is better", False: "lower is better"}.get(hib)
    base = res["baseline"]
    name = METRIC_NAMES.get(metric, metric)
    lines = [f"# siggate compare: {res.get('dataset') or 'no run scored'}, test {name}"
             + (f" ({direction})" if direction else ""), ""]
    lines += [f"Command: `{res['command']}`", ""]
    lines += [f"Seeds: {', '.join(map(str, res['seeds']))}; baseline: `{base}`; epochs: {res.get('epochs')}; "
              f"{' or '.join(map(str, res['threads'])) if isinstance(res.get('threads'), list) else res.get('threads')} "
              f"thread(s) per run; score = test {name} {_scored_epoch(res, name)}.", ""]
    lines += [f"| variant | runs | test {name} (mean ± std) | val {name} (mean ± std) | params | gate params | "
              "train s/run |",
              "|---|---|---|---|---|---|---|"]
    for lab in res["gates"]:
        secs = [s for s in res["seconds"][lab].values() if s is not None]
        lines.append(
            f"| `{lab}` | {res['n'][lab]} | {_fmt(res['mean'][lab])}{_spread(res['std'][lab], res['n'][lab])} | "
            f"{_fmt(res['val_mean'][lab])}{_spread(res['val_std'][lab], res['n'][lab])} | {res['params'].get(lab, 'n/a')} | "
            f"{res['gate_params'].get(lab, 'n/a')} | {f'{sum(secs) / len(secs):.3g}' if secs else 'n/a'} |")
    lines.append("")
    for lab, arm in (res.get("arms") or {}).items():
        if arm.get("rule"):
            lines.append(f"- `{lab}`: {arm['rule']}.")
    lines.append("")
    lines += render_pairs_table(res, name)
    for lab, c in res["vs_baseline"].items():
        lines += [f"## `{lab}` vs `{base}`: paired differences by seed (test {name}, Δ = `{lab}` − `{base}`)", ""]
        lines += [f"| seed | `{base}` | `{lab}` | Δ | better |", "|---|---|---|---|---|"]
        a, b = res["per_seed"][base], res["per_seed"][lab]
        for seed in res["seeds"]:
            scored = [v for v in (a.get(seed), b.get(seed)) if isinstance(v, (int, float)) and math.isfinite(v)]
            if len(scored) == 2:
                d = b[seed] - a[seed]
                tied = rounded_difference(np.float64(a[seed]), np.float64(b[seed])) == 0  # as the tests read it
                better = "tie" if tied else (lab if (d > 0) == bool(hib) else base)
                lines.append(f"| {seed} | {_fmt(a[seed])} | {_fmt(b[seed])} | {d:+.4f} | `{better}` |")
            elif seed in a and seed in b:  # a run that finished without a score (NaN): no pair, no winner
                lines.append(f"| {seed} | {_fmt(a[seed])} | {_fmt(b[seed])} | n/a | (no score) |")
            else:
                lines.append(f"| {seed} | {_fmt(a.get(seed))} | {_fmt(b.get(seed))} | n/a | (missing run) |")
        lines += ["", f"- pairs: {c['n_pairs']}; mean Δ = {_fmt(c['mean_diff'])} ± {_fmt(c['std_diff'])} (std over seeds); "
                  f"`{lab}` better on {c['wins']} seed(s), worse on {c['losses']}, tied on {c['ties']}.",
                  f"- p-values (two-sided): paired t = {_fmt_p(c['p_paired_t'])}, Wilcoxon signed-rank = "
                  f"{_fmt_p(c['p_wilcoxon'])}, Welch = {_fmt_p(c['p_welch'])}."]
        verdict = {"b": f"`{lab}` has the better mean", "a": f"`{base}` has the better mean", "tie": "the means are equal"}
        p = c["p_paired_t"]
        sig = (p is not None and isinstance(p, float) and math.isfinite(p) and p < 0.05)
        # the test's means, over the seeds both arms scored; the table above averages each arm's own runs
        lines.append(f"- Verdict ({direction}): on the {c['n_pairs']} seed(s) both scored ({_fmt(c['mean_b'])} against "
                     f"{_fmt(c['mean_a'])}), {verdict[c['better']]}; the difference is "
                     f"{'' if sig else 'not '}significant at p < 0.05 (paired t, unadjusted; the all-pairs table "
                     "above gives the Holm-adjusted p).")
        for note in c.get("notes", []):
            lines.append(f"- note: {note}")
        lines.append("")
    if res.get("missing"):
        lines += ["## Runs not finished yet", "",
                  ", ".join(f"`{m['gate']}` seed {m['seed']}" for m in res["missing"]), ""]
    if res["failed"]:
        lines += ["## Failed runs", ""]
        for f in res["failed"]:
            lines.append(f"- `{f['gate']}` seed {f['seed']}: {failure_line(f['error'])}")
        lines.append("")
    return "\n".join(lines)


def _fmt_ci(ci) -> str:
    lo, hi = (ci or [None, None])[:2]
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def wilcoxon_warnings(res: dict) -> list[str]:
    """One line per distinct count of non-zero pairs too small for the exact Wilcoxon test
    to reach 0.05 (pairs with a zero difference do not count: the test drops them)."""
    seen, out = set(), []
    for c in res["comparisons"]:
        n, floor = c.get("n_nonzero", c["n_pairs"]), c.get("wilcoxon_min_p", 0.0)
        if n and floor >= 0.05 and n not in seen:
            seen.add(n)
            out.append(f"with {n} pair(s) of non-zero difference the exact two-sided Wilcoxon p-value cannot go "
                       f"below {floor:.4g} (2/2^{n}), so the Wilcoxon test cannot reach p < 0.05; 6 are the minimum")
    return out


def render_pairs_table(res: dict, name: str) -> list[str]:
    """The all-pairs table of ``results.md``: difference, intervals, effect size and p-values."""
    if not res["comparisons"]:
        return []
    lines = [f"## All pairs of arms (Δ = b − a, test {name}; Holm over the {len(res['comparisons'])} pair(s))", "",
             "| a | b | pairs | mean Δ | 95% CI (t) | 95% CI (bootstrap) | Cohen's d_z | p paired t | p Wilcoxon "
             "| p Holm (t) | p Holm (Wilcoxon) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in res["comparisons"]:
        lines.append(
            f"| `{c['a']}` | `{c['b']}` | {c['n_pairs']} | {_fmt(c['diff_mean'])} | {_fmt_ci(c['ci95'])} | "
            f"{_fmt_ci(c['ci95_bootstrap'])} | {_fmt(c['cohen_dz'], 2)} | {_fmt_p(c['p_paired_t'])} | "
            f"{_fmt_p(c['p_wilcoxon'])} | {_fmt_p(c['p_holm'])} | {_fmt_p(c['p_holm_wilcoxon'])} |")
    lines += ["", f"The bootstrap interval is the percentile interval of "
              f"{_bootstrap_resamples()} paired resamples (seed 0); with a handful of seeds it is too narrow (it "
              "covers less than 95%: with 2 pairs it is their range), so the t interval is the one to read. Holm adjusts the p-values over all the "
              "pairs above, so a pair counts as significant when its Holm p-value is below 0.05."]
    lines += [f"- **Note:** {w}." for w in wilcoxon_warnings(res)]
    return lines + [""]


def _bootstrap_resamples() -> str:
    from ..stats import BOOTSTRAP_RESAMPLES

    return f"{BOOTSTRAP_RESAMPLES:,}"


def plot_val_curves(res: dict, path: Path) -> None:
    """Validation metric per epoch: mean ± std over seeds, one band per variant. The left
    panel shows every epoch (log scale when the curves span more than 4x, as a loss falling
    from its first epoch does); the right one the second half of the budget, where the arms
    are told apart, on a linear scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FormatStrFormatter, LogLocator, MaxNLocator, NullFormatter

    from .plots import save_figure

    bands = {}
    for lab in res["gates"]:
        curves = [c for c in res["val_curves"][lab].values() if c]
        if curves:  # each epoch over the seeds that reached it (a seed stopped early was cut from every epoch's mean)
            n = max(len(c) for c in curves)
            arr = np.array([[np.nan if v is None else v for v in c] + [np.nan] * (n - len(c)) for c in curves],
                           dtype=float)
            arr[~np.isfinite(arr)] = np.nan  # (a diverged epoch's score: left out of that epoch's mean, and counted)
            have = (~np.isnan(arr)).sum(0)
            with np.errstate(invalid="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # an epoch no seed scored: NaN, not a warning
                mean = np.nanmean(arr, 0)
                std = np.sqrt(np.nansum((arr - mean) ** 2, 0) / np.maximum(have - 1, 1))  # ddof 1; 0 where one seed
            short = sum(len(c) < n for c in curves)
            bad = sum(not all(v is not None and math.isfinite(v) for v in c) for c in curves)
            said = (f"n={len(arr)}" + (f"; {short} ended before epoch {n}" if short else "")
                    + (f"; {bad} with non-finite epochs, left out there" if bad else ""))
            bands[lab] = (mean, std, said)
    fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.2))
    metric = res["metric"] or "metric"
    for k, ax in enumerate(axes):
        for lab, (mean, std, said) in bands.items():
            ep = np.arange(1, len(mean) + 1)
            keep = ep > len(mean) // 2 if k else ep > 0
            # a marker per epoch: a line alone drew nothing for one epoch, or one finite epoch between two
            # non-finite ones (an --epochs 1 comparison gave two empty panels; helper-183)
            ax.plot(ep[keep], mean[keep], marker="o", markersize=3, label=f"{lab} ({said})")
            ax.fill_between(ep[keep], (mean - std)[keep], (mean + std)[keep], alpha=0.25)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    low = [m.min() for m, _, _ in bands.values()]
    if bands and min(low) > 0 and max(m.max() for m, _, _ in bands.values()) > 4 * min(low):
        axes[0].set_yscale("log")
        axes[0].yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 0.1, 0.2, 0.5, 1, 2, ...
        axes[0].yaxis.set_major_formatter(FormatStrFormatter("%g"))
        axes[0].yaxis.set_minor_formatter(NullFormatter())
    axes[0].set_ylabel(f"validation {metric} ({'higher' if res['higher_is_better'] else 'lower'} is better)")
    axes[0].set_title("every epoch")
    axes[1].set_title("second half of the budget")
    if bands:
        axes[1].legend()
    save_figure(fig, path, dpi=120, title=f"{res.get('dataset') or ''}: validation {metric}, mean ± std over seeds")


def command_line(args) -> str:
    """The ``siggate compare`` command that reproduces this comparison."""
    parts = ["siggate", "compare", "--config", _config_name(args), "--seeds", args.seeds, "--gates", args.gates]
    parts += _shared_flags(args) + ["--jobs", str(args.jobs)]
    if getattr(args, "backend", "local") != "local":
        parts += ["--backend", args.backend]
    if args.threads:
        parts += ["--threads", str(args.threads)]
    parts += ["--out", str(args.out)]
    return shlex.join(parts)


def _set_keys(args) -> set[str]:
    """The config keys the comparison's ``--set`` items give (``{"train.threads", ...}``); a
    malformed item is refused by its own words."""
    from ..config import ConfigError
    from ..config_args import set_keys

    try:
        return set_keys(args)
    except ConfigError as exc:
        raise CompareError(str(exc)) from None


def _check_args(args) -> None:
    """Refuse options that contradict the comparison (``CompareError``)."""
    if _set_keys(args) & {"model.gate", "model.gate_position", "model.param_match", "train.seed"}:
        raise CompareError("--set model.gate/model.gate_position/model.param_match/train.seed: these come from "
                           "--gates and --seeds")
    if args.epochs is not None and getattr(args, "budget", None) is not None:
        raise CompareError("--epochs and --budget both set the number of epochs; give one (--budget also scales "
                           "the warmup)")
    if args.jobs < 1:
        raise CompareError(f"--jobs must be >= 1, got {args.jobs}")
    if args.threads is not None and args.threads < 1:  # (0 ran each run at CPU cores / jobs without a word, where
        # 0 is torch's choice elsewhere; a negative reached every run, which refused it after the comparison began)
        raise CompareError(f"--threads {args.threads}: a comparison gives each run its threads; give 1 or more, or "
                           "leave --threads out for CPU cores / jobs")


def run_folder(out: Path, label: str, seed: int) -> Path:
    """The folder of the run of arm ``label`` and ``seed`` in the comparison ``out``:
    ``OUT/runs/<label>/seed<seed>`` (its ``metrics.json``, ``best.pt``, ``last.pt``, ...)."""
    return Path(out) / "runs" / label / f"seed{seed}"


def _same_arms(expected: dict) -> tuple[str, str] | None:
    """The first two arms (labels) whose resolved model configs are equal, or None."""
    labels = list(expected)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if expected[a]["model"] == expected[b]["model"]:
                return a, b
    return None


def _finished_threads(pairs) -> list[int]:
    """The torch threads the finished runs trained with (each run's ``config.yaml``), sorted and
    distinct: a comparison resumed with another ``--threads`` reuses runs of the first."""
    from .rundir import read_saved_config

    seen = set()
    for p in pairs:
        if p.metrics is None:
            continue
        try:
            seen.add(int(read_saved_config(p.run_dir / CONFIG)["train"]["threads"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(seen)


def _plan_pairs(args, specs: list[GateSpec], seeds: list[int], out: Path, threads: int) -> list:
    """Every (arm, seed) run in its :func:`run_folder`, planned
    (:func:`siggate.train.study.plan`: done, to resume, new, or a conflict when its folder holds
    a run of another config)."""
    from .executor import RunRequest
    from .rundir import MEMBERS_RECORD
    from .study import StudyRun, plan

    runs = []
    for seed in seeds:
        for spec in specs:
            key, run_dir = f"{spec.label}/seed{seed}", run_folder(out, spec.label, seed)
            blocked = next((p for p in (run_dir, *run_dir.parents) if p != out and out in p.parents
                            and p.exists() and not p.is_dir()), None)
            if blocked is not None:  # (its mkdir ended the whole compare in a traceback, the running runs with it)
                raise CompareError(f"{blocked} is a file where the run folder {run_dir} goes; move it away, or choose "
                                   "another --out")
            if (run_dir / MEMBERS_RECORD).is_file():  # an arm trained as a combination before --members gnn
                raise CompareError(f"{run_dir} holds a run of several members (the csv recipe's combination, as "
                                   "siggate compare trained arms before it trained the GNN alone): its scores are "
                                   "not the GNN's; move that folder away, or choose another --out")
            # the GNN alone: on the csv recipe the run was its combination with svr and rf, whose
            # validation weights could give the GNN 0, and both arms then scored the same
            request = RunRequest(key, [*_config_args(args, spec, seed), "--members", "gnn"], run_dir, threads)
            runs.append(StudyRun(key, run_dir, config_for(args, spec, seed).to_dict(), request, tag=(spec, seed)))
    return plan(runs)


def _print_summary(res: dict) -> None:
    """Per arm mean ± std, every pair's statistics and the Wilcoxon notes, on stdout."""
    for lab in res["gates"]:
        print(f"  {lab:24s} test {res['metric'] or 'metric'} {_fmt(res['mean'][lab])}{_spread(res['std'][lab], res['n'][lab])}  "
              f"(n={res['n'][lab]})")
    for c in res["comparisons"]:
        print(f"  {c['b']} - {c['a']}: mean diff {_fmt(c['diff_mean'])} 95% CI {_fmt_ci(c['ci95'])}, "
              f"d_z {_fmt(c['cohen_dz'], 2)}, p paired t {_fmt_p(c['p_paired_t'])}, Wilcoxon {_fmt_p(c['p_wilcoxon'])}, "
              f"Holm {_fmt_p(c['p_holm'])}")
    for w in wilcoxon_warnings(res):
        print(f"  note: {w}")


#: what ``siggate compare`` assumes of a flag that defines the comparison when it is not given
#: (with ``--aggregate-only``, the comparison already in ``--out`` gives it first, :func:`_defaults`)
DEFINING = {"config": None, "seeds": "0-4", "gates": "none,elementwise", "overrides": [], "epochs": None,
            "budget": None, "data_root": None, "cache_dir": None}
#: the MAD section that ``siggate analyze mad`` (:mod:`siggate.analysis.compare_mad`) adds to ``results.md``
MAD_START, MAD_END = "<!-- mad:start -->", "<!-- mad:end -->"
_MAD_SECTION = re.compile(re.escape(MAD_START) + ".*?" + re.escape(MAD_END) + r"\n?", re.S)


def with_mad_section(markdown: str, section: str) -> str:
    """``markdown`` with its MAD section replaced by ``section`` (appended when it has none)."""
    if _MAD_SECTION.search(markdown):
        return _MAD_SECTION.sub(lambda _: section, markdown, count=1)
    return markdown.rstrip("\n") + "\n\n" + section


class _Refusal(argparse.ArgumentParser):
    """A parser that raises ``ValueError`` where argparse would print and exit."""

    def error(self, message):
        raise ValueError(message)


def _left_out(old: dict, specs: list, seeds: list[int]) -> list[str]:
    """The arms and seeds of the finished runs the results ``old`` hold (its ``per_seed``) that a
    comparison of ``specs`` and ``seeds`` would leave out of them: ``["arm headwise", "seed 1"]``
    (an arm whose runs all failed holds none)."""
    per_seed = old.get("per_seed") if isinstance(old.get("per_seed"), dict) else {}
    labels = {spec.label for spec in specs}
    held = sorted({str(s) for d in per_seed.values() if isinstance(d, dict) for s in d} - {str(s) for s in seeds},
                  key=lambda s: (len(s), s))
    return [f"arm {lab}" for lab, d in per_seed.items() if d and lab not in labels] + [f"seed {s}" for s in held]


def _stored(out: Path, flags: bool) -> tuple[dict, argparse.Namespace | None, str]:
    """The results of the comparison already in ``out``, with ``flags`` also its flags (parsed from
    the ``command`` it records) and why they could not be read (``""`` when they were, or there is
    no results.json)."""
    path, old = out / "results.json", {}
    if not path.is_file():
        return {}, None, ""
    try:
        old = json.loads(path.read_text())
        if not flags:
            return old if isinstance(old, dict) else {}, None, ""
        command = shlex.split(old["command"])
        if command[:2] != ["siggate", "compare"]:
            raise ValueError(f"not a siggate compare command: {old['command']!r}")
        parser = _Refusal(add_help=False)
        register(parser.add_subparsers(parser_class=_Refusal))
        return old, parser.parse_args(command[1:]), ""
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return old if isinstance(old, dict) else {}, None, (f"{path} records no command this siggate reads "
                                                            f"({type(exc).__name__}: {exc})")


def _defaults(args, stored: argparse.Namespace | None) -> None:
    """Fill each flag of :data:`DEFINING` not given: from ``stored`` (the comparison in
    ``--out``, for ``--aggregate-only``), else its default. ``--epochs`` and ``--budget`` are one
    choice: either one given, neither is taken from ``stored``."""
    given = {name for name in DEFINING if getattr(args, name, None) not in (None, [])}
    if given & {"epochs", "budget"}:
        given |= {"epochs", "budget"}
    for name, default in DEFINING.items():
        if name not in given:
            setattr(args, name, getattr(stored, name) if stored is not None else default)


def _carry_mad(old: dict, res: dict, old_md: str, out: Path) -> str:
    """Keep the MAD block of the results being replaced (``old``, and its section of ``old_md``)
    when it measured exactly the runs finished now, and each of them records the validation
    score it recorded then: put it into ``res`` and return the section. Otherwise say on stdout
    why it was dropped; return ``""``."""
    mad = old.get("mad")
    if not mad:
        return ""
    measured = {(lab, str(s)) for lab, d in (mad.get("val") or {}).items() for s in d}
    then = {(lab, str(s)): v for lab, d in (old.get("per_seed_val") or {}).items() for s, v in d.items()}
    now = {(lab, str(s)): v for lab, d in res["per_seed_val"].items() for s, v in d.items()}
    found = _MAD_SECTION.search(old_md)
    if measured == set(now) and all(then.get(k) == now[k] for k in now):
        if found:
            res["mad"] = mad
            return found.group(0)
        why = "results.md no longer holds its section"
    else:
        why = f"it measured {len(measured)} run(s), and {len(now)} are finished now, or their scores changed"
    print(f"siggate compare: the MAD block of the earlier results was dropped ({why}): run 'siggate analyze mad "
          f"{shlex.quote(str(out))}' again", flush=True)
    return ""


def _digest(path: Path) -> str | None:
    """``path``'s SHA-256, None when there is no such file."""
    from ..files import file_digest

    return file_digest(path) if path.is_file() else None


@contextlib.contextmanager
def _claimed(out: Path, aggregate_only: bool):
    """Hold ``out``'s :class:`~siggate.files.FolderLock` while the comparison trains and writes its
    results, so that a second ``siggate compare`` into the same folder is refused instead of
    launching the same runs (each then failing on its run folder's lock) and writing results over
    the first's. ``--aggregate-only`` trains nothing, so it runs beside a live comparison: it holds
    the lock where no comparison does (none starts and finishes under it), else goes on without."""
    from ..files import claim_folder

    if aggregate_only:
        lock = claim_folder(out, CompareError, "--out", "", "the comparison", busy_ok=True) if out.is_dir() else None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()
        return

    lock = claim_folder(out, CompareError, "--out", "two comparisons must not write into one folder: wait for it to "
                        "end (or read its runs so far with --aggregate-only), or choose another --out", "the comparison")
    try:
        yield
    finally:
        lock.release()


def compare(args) -> int:
    """Run the comparison described by the parsed ``siggate compare`` arguments."""
    aggregate_only = getattr(args, "aggregate_only", False)
    if not str(args.out).strip():  # ('' is the current folder: its runs/ and results.json went there)
        raise CompareError("--out '': give the comparison's folder, e.g. --out runs/cmp")
    read = _digest(Path(args.out) / "results.json")  # a snapshot never replaces results written since
    old, stored, unread = _stored(Path(args.out), aggregate_only)  # its MAD block is kept while the runs are the same
    named = {n for n in DEFINING if getattr(args, n, None) not in (None, [])}
    if aggregate_only and unread and not ({"config", "gates", "seeds"} <= named):
        raise CompareError(f"--aggregate-only: {unread}; give --config, --gates and --seeds (and any --set, "
                           "--epochs or --budget) as the comparison was run")
    if aggregate_only and stored is None and not old and not named - {"data_root", "cache_dir"} \
            and (Path(args.out) / "runs").is_dir():
        # a first comparison still running has written no results.json to take its flags from
        raise CompareError(f"--aggregate-only: {args.out} has no results.json yet (its first comparison is still "
                           "running, or stopped before aggregating); give its --config, --gates and --seeds (and any "
                           "--set, --epochs or --budget) as it was started")
    if aggregate_only and stored is not None:  # it reads no data: another place was written into the record
        for flag, name in (("--data-root", "data_root"), ("--cache-dir", "cache_dir")):  # (the same one is fine:
            given, then = getattr(args, name), getattr(stored, name, None)              # the command run again)
            if given and (not then or Path(given).absolute() != Path(then).absolute()):
                raise CompareError(f"{flag} {given}: --aggregate-only reads no data, and the comparison in {args.out} "
                                   f"records {f'{flag} {then}' if then else f'no {flag}'}; drop {flag}")
    _defaults(args, stored)
    _absolute_paths(args)
    clash = flag_key_clash(args)  # before stored threads are taken (every run would refuse both)
    if clash:
        raise CompareError(clash)
    if stored is not None and args.threads is None and "train.threads" not in _set_keys(args):
        # the results describe the runs' threads, not this call's (a --set train.threads gives them itself)
        args.threads = stored.threads
    if stored is not None and aggregate_only:  # nothing runs now: the results say how the runs were run
        for name in ("jobs", "backend", "cpus_per_run"):
            setattr(args, name, getattr(stored, name, getattr(args, name, None)))
    def parsed(flag: str, parse):
        try:
            return parse(getattr(args, flag))
        except ValueError as exc:  # a value taken from the record is named as such (an older siggate accepted it)
            if flag in named or stored is None:
                raise CompareError(str(exc)) from None
            raise CompareError(f"the comparison in {args.out} records this --{flag}: {exc}; give --{flag} as it should "
                               "be") from None

    # the arms the folder holds: its results' and its runs' (a comparison stopped before aggregating)
    runs = Path(args.out) / "runs"
    arms_there = tuple(old["per_seed"] if isinstance(old.get("per_seed"), dict) else ()) + tuple(
        p.name for p in (runs.iterdir() if runs.is_dir() else ()) if p.is_dir())
    seeds, specs = parsed("seeds", parse_seeds), parsed("gates", lambda text: parse_gates(text, arms_there))
    _check_args(args)
    dropped = _left_out(old, specs, seeds)
    if dropped:  # its results.json was replaced by a smaller comparison's, without a word
        raise CompareError(f"{args.out} holds the results of a comparison with {', '.join(dropped)}, which these "
                           "flags leave out; give them too (a comparison in a folder grows, it is not cut), or "
                           f"another --out (or move {Path(args.out) / 'results.json'} away to keep the smaller one)")
    out = Path(args.out)
    problem = out_dir_problem(out)
    if problem:
        raise CompareError(f"--out {problem} for the comparison")
    with _claimed(out, aggregate_only):  # one comparison writes into a folder at a time
        t0 = time.time()
        expected = {spec.label: config_for(args, spec, seeds[0]).to_dict() for spec in specs}  # validates
        same = None if aggregate_only else _same_arms(expected)  # (an earlier siggate's such arms still aggregate)
        if same:  # (elementwise@output beside elementwise, where output is the config's position)
            raise CompareError(f"--gates: arms {same[0]} and {same[1]} train the same model (their model configs "
                               "are equal); list each arm once")
        if args.threads:
            threads = args.threads
        elif "train.threads" in _set_keys(args) and next(iter(expected.values()))["train"]["threads"]:
            threads = next(iter(expected.values()))["train"]["threads"]  # the runs' own, as the results report
        elif getattr(args, "backend", "local") == "ray":  # each Ray task owns --cpus-per-run cores
            threads = task_threads(args)
        else:
            threads = max(1, (os.cpu_count() or 1) // args.jobs)
        if not all(c["model"].get("attn", True) for c in expected.values()):
            raise CompareError("the arms differ only in the gate, and this config's model has no attention branch "
                               "(model.attn: false, the csv recipe's GNN): every arm would be the same model; add "
                               "--set model.attn=true" + ("" if all(init_is_none(c["train"].get("init") or "")
                                                                    for c in expected.values()) else
                                                          " --set train.init=none (the pretrained weights have no "
                                                          "attention)"))
        from .members import GNN, run_refusal

        pairs = _plan_pairs(args, specs, seeds, out, threads)
        starting = {p.tag[0].label for p in pairs if p.state == "new"}  # (done and resumed runs hold their weights)
        for spec in specs:  # what training would refuse (weights an arm cannot start from, ...): before any run
            why = run_refusal(config_for(args, spec, seeds[0]), [GNN], 1, several=False,
                              started=spec.label not in starting)
            if why:
                raise CompareError(f"arm {spec.label}: {why}")
        n_done = sum(p.state == "done" for p in pairs)
        n_resume = sum(p.state == "resume" for p in pairs)
        print(f"siggate compare: {len(specs)} gate(s) x {len(seeds)} seed(s) = {len(pairs)} runs "
              f"({n_done} already done, {n_resume} to resume), "
              + ("as Ray schedules them" if getattr(args, "backend", "local") == "ray" else f"{args.jobs} at a time")
              + f", {threads} thread(s) each -> {out}",
              flush=True)
        from .rundir import READ_OTHERWISE
        from .study import DATA_CHANGED

        conflict = next((p for p in pairs if p.state == "conflict"), None)
        recorded = f" (it records: {old['command']})" if old.get("command") else ""
        if conflict is not None and not aggregate_only:  # refused before any run: the folder's results stay whole
            if READ_OTHERWISE in conflict.error:  # the same flags and file, read otherwise by this siggate
                raise CompareError(f"{conflict.error}: compare into another --out, or go on with the siggate version "
                                   "that started the comparison; nothing was trained")
            if DATA_CHANGED in conflict.error:  # the same flags; the CSV changed under the runs
                raise CompareError(f"{conflict.error}: restore the file as it was, or compare on the new one with "
                                   "another --out; nothing was trained")
            raise CompareError(f"{conflict.error}: these flags describe another comparison than the one in {out}"
                               f"{recorded}; nothing was trained")
        if aggregate_only:
            if conflict is not None and DATA_CHANGED in conflict.error:
                raise CompareError(f"--aggregate-only: {conflict.error}: restore the file as it was to read these "
                                   "runs' results")
            if conflict is not None:  # nothing of it would count: the comparison in OUT is not these flags'
                raise CompareError(f"--aggregate-only: {conflict.run_dir} holds a run of another config than these "
                                   f"flags give: they describe another comparison than the one in {out}{recorded}; give "
                                   "its flags, or none of --config/--gates/--seeds/--set/--epochs/--budget to take them "
                                   "from its results.json")
            if n_done == 0 and not old and not any(p.state == "resume" for p in pairs):  # a folder of no comparison
                raise CompareError(f"--aggregate-only: {out} holds no comparison (no results.json, no run of these "
                                   "flags): give the --out of a siggate compare")
            unstarted = [spec.label for spec in specs
                         if not any(Path(p.run_dir).exists() for p in pairs if p.tag[0].label == spec.label)]
            if unstarted and (n_done or old):  # an arm of n 0 written into the comparison's record
                raise CompareError(f"--aggregate-only: the comparison in {out} never started the arm(s) "
                                   f"{', '.join(unstarted)}{recorded}; give the gates it was run with (or none, to take "
                                   "them from its results.json), or run the comparison with them to train them")
            if n_done == 0 and sum((old.get("n") or {}).values()):  # finished runs' results replaced by nothing
                raise CompareError(f"--aggregate-only: none of these flags' {len(pairs)} runs is finished in {out}, whose "
                                   f"results.json counts finished runs{recorded}; give the comparison's seeds and gates, "
                                   "or none to take them from its results.json")
            print("siggate compare: --aggregate-only: nothing is trained; unfinished runs are listed as missing",
                  flush=True)
        else:
            run_pairs(pairs, args, progress=progress_enabled(args))

        run_threads = _finished_threads(pairs)
        if len(run_threads) == 1:  # the runs' own, not this call's: the results and their command describe them
            threads = run_threads[0]
            if "train.threads" not in _set_keys(args):  # (a --set train.threads names them itself)
                args.threads = threads
        res = aggregate(pairs, specs, seeds)
        res.update({
            "command": command_line(args),
            "epochs": expected[specs[0].label]["train"]["epochs"],
            "warmup_epochs": expected[specs[0].label]["train"]["warmup_epochs"],
            "arms": {spec.label: {"overrides": spec.overrides(),
                                  "rule": (f"no gate; FFN widened to match the elementwise gate's parameters "
                                           f"(model.param_match={spec.match}, FFN hidden width "
                                           f"{_ffn_width(expected[spec.label]['model'])})") if spec.match else None}
                     for spec in specs},
            "config": expected[specs[0].label],
            "jobs": args.jobs,
            "threads": threads if len(run_threads) <= 1 else run_threads,
            # (--aggregate-only trains nothing: the comparison's own time stays, not this call's)
            "wall_seconds": old["wall_seconds"] if aggregate_only and old.get("wall_seconds") else time.time() - t0,
        })
        from ..version import __version__
        from .record import git_commit

        res["siggate_version"], res["git_commit"] = __version__, git_commit()
        out.mkdir(parents=True, exist_ok=True)
        if aggregate_only and _digest(out / "results.json") != read:  # the live comparison finished meanwhile
            print(f"siggate compare: --aggregate-only: {out / 'results.json'} was written by the comparison while "
                  "this snapshot was made; it is newer and is kept (run --aggregate-only again to read it)", flush=True)
            return 0
        md = out / "results.md"
        section = _carry_mad(old, res, md.read_text() if md.is_file() else "", out)
        try:  # atomic: a full disk leaves the earlier results whole
            atomic_write_bytes(out / "results.json", (json.dumps(_jsonable(res), indent=2, allow_nan=False) + "\n").encode())
            atomic_write_bytes(md, (with_mad_section(render_markdown(res), section) if section
                                    else render_markdown(res)).encode())
            if any(res["val_curves"][lab] for lab in res["gates"]):
                plot_val_curves(res, out / "val_curves.png")
        except OSError as exc:
            raise CompareError(f"cannot write the comparison's results into {out} ({exc.strerror or exc}); its runs are "
                               "kept: free space (or choose a writable --out), then run the command again") from None
        _print_summary(res)
        print(f"siggate compare: wrote {out / 'results.json'}, {out / 'results.md'}", flush=True)
        if res["failed"]:
            print(f"siggate compare: {len(res['failed'])} run(s) FAILED:", file=sys.stderr)
            for f in res["failed"]:
                print(f"  {f['gate']} seed {f['seed']}: {f['error']}", file=sys.stderr)
            return 1
        return 0


def _cmd(args) -> int:
    from ..config_args import CLIError

    try:
        return compare(args)
    except (CompareError, ExecutorError) as exc:
        raise CLIError(str(exc)) from None


def register(subparsers) -> None:
    p = add_command(
        subparsers, "compare", "train every (gate, seed) pair and compare the gates with paired tests", [
            "siggate compare --config nci5k --seeds 0-9 --gates none,elementwise --jobs 1 --threads 1 --out runs/cmp",
            "siggate compare --config zinc --gates none,headwise,elementwise,none@matched-ffn --budget 100 --out runs/z",
            "siggate compare --out runs/cmp --aggregate-only   # results from the runs finished so far",
        ],
        description="Train each gate on each seed (one process per run) and compare every gate with the "
                    "first one listed (the baseline): mean ± std, paired t, Wilcoxon and Welch p-values.")

    p.add_argument("--config", default=None, help="built-in config name or YAML path (default: nci5k)")
    p.add_argument("--seeds", default=None, help="seeds, e.g. 0-9 or 0,2,5 (default: 0-4)")
    p.add_argument("--gates", default=None,
                   help="comma-separated gates, baseline first; a position may follow @, e.g. "
                        "none,elementwise,headwise,elementwise@value (default: none,elementwise)")
    add_set_flag(p, "train.lr=0.001", "config override applied to every run")
    p.add_argument("--epochs", type=int, default=None, help="epochs of every run (train.epochs)")
    p.add_argument("--budget", type=int, default=None, metavar="EPOCHS",
                   help="short run of the config's protocol: EPOCHS epochs with the warmup scaled by "
                        "EPOCHS / train.epochs (the cosine decay then spans the budget)")
    p.add_argument("--jobs", type=int, default=1, help="local back-end: runs at a time (default: 1)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads per run, 1 or more (default: CPU cores / jobs)")
    add_data_root_flag(p)
    add_cache_dir_flag(p)
    p.add_argument("--out", required=True, help="output folder (runs/, results.json, results.md, val_curves.png)")
    add_executor_args(p)
    add_progress_flag(p)
    p.add_argument("--aggregate-only", action="store_true",
                   help="train nothing: write results from the runs already finished (a snapshot of a "
                        "comparison still under way; the others are listed as missing; nothing is written when the "
                        "comparison wrote its results meanwhile, those being newer). The flags that define "
                        "the comparison default to those recorded in OUT/results.json")
    p.set_defaults(func=_cmd)
