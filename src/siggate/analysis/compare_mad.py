"""The last-layer diversity (MAD) of every trained model of a ``siggate compare`` folder.

``siggate analyze mad DIR`` reads ``DIR/results.json`` (written by ``siggate compare``), and
for every run it lists (``per_seed``: arm x seed, in the run's folder
:func:`siggate.train.compare.run_folder`) loads the best-validation weights (``best.pt``) and
measures the MAD of the node representations after the last GPS layer on the run's own
validation split, with the smoothing analysis's code (:func:`.smoothing.representation_stats`,
the definition in :data:`.smoothing.DEFINITIONS`: the same measure and the same evaluation
graphs as ``siggate analyze smoothing``). Higher MAD is more diverse.

The code that measures may be newer than the code that trained (a campaign pins its commit):
each model must score the validation metric its run recorded (:data:`VAL_RTOL`), or nothing
is written. The result goes into ``DIR/results.json`` under ``"mad"`` (:func:`summarize`:
per run, per arm mean and std, the paired comparisons of the arms and the relative gain over
the baseline with the smoothing analysis's gain tests) and into a section of ``DIR/results.md``.

Each run's measurement is also kept beside its ``metrics.json`` (:data:`KEPT`), which a
campaign's snapshot commits: a run whose checkpoints are gone (a fresh clone resumes a campaign
from its committed runs, without their ``.pt`` files) counts with its kept measurement, when it
was made with this definition on the validation metric the run recorded.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from ..config_args import CLIError
from ..files import atomic_write_bytes, read_json
from ..options import progress_enabled
from ..stats import p_text
from ..train.compare import MAD_END, MAD_START, run_folder, with_mad_section
from ..train.runfiles import BEST
from .common import check_counts, finite, fmt, load_dataset, meta, set_threads, write_json
from .smoothing import DEFINITIONS, gain_tests, representation_stats

#: relative tolerance between the validation metric a run recorded for its best epoch and the
#: metric of its ``best.pt`` recomputed here; beyond it the measured model is not the trained one
VAL_RTOL = 1e-4

#: the markers of the MAD section of ``results.md`` (replaced on every run)
MD_START, MD_END = MAD_START, MAD_END

DEFINITION = (DEFINITIONS["mad"] + ". Measured on the node representations after the last GPS layer (the last "
              "entry of the smoothing analysis's per-layer list), with the weights of best.pt (the epoch of best "
              "validation metric) in eval mode, on the run's validation split")


def dataset_key(cfg) -> str:
    """What :func:`.common.load_dataset` reads from a config: its data section, the
    encodings the model reads and the seed (runs of one comparison share the dataset)."""
    from ..train.dataprep import Encodings

    return json.dumps([cfg.to_dict()["data"], repr(Encodings.of(cfg.model)), cfg.train.seed], sort_keys=True)


def _scores_recorded(val: float, recorded_val: float | None) -> bool:
    """Whether a model's validation metric ``val`` is the one its run recorded (:data:`VAL_RTOL`)."""
    return recorded_val is None or math.isclose(val, recorded_val, rel_tol=VAL_RTOL, abs_tol=1e-9)


def measure_run(run_dir: Path, recorded_val: float | None, datasets: dict, batch_size: int = 64) -> dict:
    """The last-layer MAD of the ``best.pt`` of ``run_dir``: ``mad``, ``per_layer`` (index 0 the
    encoder's output, as the smoothing analysis), ``n_graphs`` (its validation graphs),
    ``epoch`` (the weights' epoch) and ``val`` (its validation metric, recomputed here).
    ``datasets`` caches the datasets by :func:`dataset_key`.

    Raises:
        CLIError: no ``best.pt``; its validation metric differs from ``recorded_val``.
    """
    from ..train.modelprep import load_trained
    from ..train.scoring import evaluate_splits

    path = Path(run_dir) / BEST
    if not path.is_file():
        raise CLIError(f"{path} does not exist: give the comparison's own folder, which holds the runs' "
                       "checkpoints (a campaign's committed snapshot has none)")
    model, ckpt, cfg, _ = load_trained(path)
    key = dataset_key(cfg)
    if key not in datasets:
        datasets[key] = load_dataset(cfg, progress=False)
    ds = datasets[key]
    val = evaluate_splits(model, ds, ["val"], ckpt["target_mean"], ckpt["target_std"])["val"]
    if not _scores_recorded(val, recorded_val):
        raise CLIError(f"{path} scores validation {ds.info.metric} {val:.6g} here, its run recorded {recorded_val:.6g}: "
                       "this checkout computes another model than the run's commit trained (its model code changed), "
                       "so its MAD would not be the trained model's; nothing was written")
    stats = representation_stats(model, ds.val, batch_size, measures=("mad",))
    return {"mad": stats["mad"][-1], "per_layer": stats["mad"], "n_graphs": stats["n_graphs"],
            "epoch": ckpt.get("state", {}).get("epoch"), "val": val}


#: a run's measurement (:func:`measure_run`'s fields and the :data:`DEFINITION`), in its folder
KEPT = "mad.json"
_FIELDS = ("mad", "per_layer", "n_graphs", "epoch", "val")


def kept_measure(run_dir: Path, recorded_val: float | None) -> dict:
    """The measurement kept in ``run_dir`` (:data:`KEPT`), for a run whose ``best.pt`` is gone.

    Raises:
        CLIError: none is kept, or it is not one of this definition on the validation metric the
            run recorded (``recorded_val``).
    """
    path = Path(run_dir) / KEPT
    if not path.is_file():
        raise CLIError(f"{Path(run_dir) / BEST} does not exist and no measurement of it is kept ({KEPT}): give "
                       "the comparison's own folder, which holds the runs' checkpoints")
    try:
        kept = read_json(path)
        m = {k: kept[k] for k in _FIELDS}
        ok = (kept.get("definition") == DEFINITION and isinstance(m["mad"], (int, float))
              and math.isfinite(m["mad"]) and isinstance(m["val"], (int, float)) and isinstance(m["per_layer"], list)
              and m["per_layer"][-1] == m["mad"] and isinstance(m["n_graphs"], int))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        ok = False
    if not ok:
        raise CLIError(f"{path} is not a MAD measurement of this definition (fields {', '.join(_FIELDS)} and the "
                       f"definition), and {Path(run_dir) / BEST} is gone: remove it and measure the run where "
                       "its checkpoints are")
    if not _scores_recorded(m["val"], recorded_val):
        raise CLIError(f"{path} measured a model of validation {m['val']:.6g}, the run records {recorded_val:.6g}: "
                       "it is another model's measurement; remove it and measure the run where its checkpoints are")
    return m


def summarize(measured: dict, labels: list[str], seeds: list) -> dict:
    """The ``"mad"`` block of ``results.json`` from ``measured`` (``{arm: {seed: measure_run(...)}}``;
    ``labels`` the arms, baseline first; ``seeds`` their order): ``per_seed`` (the last-layer MAD
    of each run), ``per_layer``, ``n_graphs``, ``epoch``, ``val`` (each ``{arm: {seed: ...}}``),
    ``mean``/``std``/``n`` per arm, ``comparisons`` (:func:`siggate.stats.all_pairs`, higher is
    better: ``b - a`` over the common seeds, intervals, Holm), ``relative_gain`` (``(mean_arm -
    mean_baseline) / mean_baseline``) and ``gain_tests`` (per arm, the per-seed relative gains
    over the baseline with :func:`.smoothing.gain_tests`: sign test, t-test of a mean gain of 0.30)."""
    from ..stats import all_pairs, mean_std

    def field(name):
        return {lab: {s: measured[lab][s][name] for s in seeds if s in measured.get(lab, {})} for lab in labels}

    per_seed = field("mad")
    base = labels[0]
    mean = {lab: mean_std(per_seed[lab])[0] for lab in labels}
    out = {
        "definition": DEFINITION,
        "checkpoint": BEST,
        "split": "val",
        "higher_is_better": True,
        "baseline": base,
        "per_seed": per_seed,
        "per_layer": field("per_layer"),
        "n_graphs": field("n_graphs"),
        "epoch": field("epoch"),
        "val": field("val"),
        "mean": mean,
        "std": {lab: mean_std(per_seed[lab])[1] for lab in labels},
        "n": {lab: len(per_seed[lab]) for lab in labels},
        "comparisons": all_pairs(per_seed, labels, True),
        "relative_gain": {},
        "gain_tests": {},
    }
    for lab in labels[1:]:
        b = mean[base]
        out["relative_gain"][lab] = (mean[lab] - b) / b if b and math.isfinite(b) and math.isfinite(mean[lab]) else None
        gains = [(per_seed[lab][s] - per_seed[base][s]) / per_seed[base][s] for s in seeds
                 if s in per_seed[lab] and s in per_seed[base] and per_seed[base][s] > 0]
        out["gain_tests"][lab] = gain_tests(np.asarray(gains, dtype=np.float64))
    return out


def render_markdown(block: dict) -> str:
    """The MAD section of ``results.md``, between :data:`MD_START` and :data:`MD_END`."""
    labels, base = list(block["per_seed"]), block["baseline"]
    seeds = sorted({s for d in block["per_seed"].values() for s in d}, key=lambda s: int(s))
    lines = [MD_START, "## Last-layer diversity (MAD) at the best epoch", "",
             f"{block['definition']}. Higher is more diverse. Measured by `{block['command']}` "
             f"(siggate {block['siggate_version']}, commit {block['git_commit'] or 'unknown'}).", "",
             "| variant | runs | MAD (mean ± std) | relative to `" + base + "` |", "|---|---|---|---|"]
    for lab in labels:
        rel = block["relative_gain"].get(lab)
        lines.append(f"| `{lab}` | {block['n'][lab]} | {fmt(block['mean'][lab])} ± {fmt(block['std'][lab])} | "
                     f"{'-' if rel is None else f'{rel:+.1%}'} |")
    lines += ["", "| seed | " + " | ".join(f"`{lab}`" for lab in labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for s in seeds:
        lines.append(f"| {s} | " + " | ".join(fmt(block["per_seed"][lab].get(s)) for lab in labels) + " |")
    lines.append("")
    for c in block["comparisons"]:
        lines.append(f"- `{c['b']}` − `{c['a']}`: mean Δ {fmt(finite(c['diff_mean']))} over {c['n_pairs']} seed(s), "
                     f"95% CI [{fmt(finite(c['ci95'][0]))}, {fmt(finite(c['ci95'][1]))}], p paired t "
                     f"{p_text(c['p_paired_t'], missing='nan')}, Holm {p_text(c['p_holm'], missing='nan')}.")
    for lab, t in block["gain_tests"].items():
        lines.append(f"- `{lab}` over `{base}`, per-seed relative gain: > 0 on {t['n_positive']} of {t['n_pairs']} "
                     f"(sign test p {p_text(t['p_sign'], missing='nan')}); t-test of a mean gain of "
                     f"{t['target']:+.0%}: p {p_text(t['p_t_vs_target'], missing='nan')}.")
    return "\n".join(lines + [MD_END, ""])


def add_mad(folder: Path, batch_size: int = 64, command: str | None = None, progress: bool = False) -> dict:
    """Measure every run of the comparison ``folder`` (:func:`measure_run`) and write the
    :func:`summarize` block into its ``results.json`` (key ``"mad"``, with ``command``, the
    measuring code's version and commit, and the seconds) and :func:`render_markdown` into its
    ``results.md``, and each measured run's measurement into its folder (:data:`KEPT`); returns
    the block. The folder's lock is held from the read to the write (a live comparison's folder is
    refused).

    Raises:
        CLIError: no ``results.json``, a run without ``best.pt`` and without a kept measurement
            (:func:`kept_measure`), or a model that does not score what its run recorded (nothing
            is written).
    """
    folder = Path(folder)
    path = folder / "results.json"
    if not path.is_file():
        raise CLIError(f"{path} does not exist: give a folder written by 'siggate compare --out DIR'")
    from ..files import claim_folder

    # held from the read to the write: a comparison finishing meanwhile had its results replaced by the older ones
    lock = claim_folder(folder, CLIError, "siggate analyze mad", "a comparison writes into it: wait for it to end, "
                        "then measure its runs", "the comparison")
    try:
        return _add_mad(folder, path, batch_size, command, progress)
    finally:
        lock.release()


def _add_mad(folder: Path, path: Path, batch_size: int, command: str | None, progress: bool) -> dict:
    try:
        res = read_json(path)
        labels, seeds = list(res["gates"]), [str(s) for s in res["seeds"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CLIError(f"{path}: not the results of 'siggate compare' ({type(exc).__name__}: {exc}); give a folder "
                       "written by 'siggate compare --out DIR'") from None
    t0, datasets, measured = time.time(), {}, {}
    new = {}  # the runs measured now: their measurements are kept once every run has one
    for lab in labels:
        for s in seeds:
            if s not in res["per_seed"].get(lab, {}):
                continue  # not finished: compare lists it as missing or failed
            run, recorded = run_folder(folder, lab, int(s)), res["per_seed_val"].get(lab, {}).get(s)
            if (run / BEST).is_file():
                m = new[run] = measure_run(run, recorded, datasets, batch_size)
            else:  # its checkpoints are gone (a campaign's committed run): the measurement kept then
                m = kept_measure(run, recorded)
            measured.setdefault(lab, {})[s] = m
            if progress:
                print(f"  {lab} seed {s}: MAD {m['mad']:.4f} (epoch {m['epoch']}, val {m['val']:.4g})", flush=True)
    for run, m in new.items():
        write_json({**m, "definition": DEFINITION}, run / KEPT)
    block = summarize(measured, labels, seeds)
    info = meta()
    block.update({"command": command or f"siggate analyze mad {folder}", "siggate_version": info["siggate_version"],
                  "git_commit": info["git_commit"], "seconds": time.time() - t0})
    res["mad"] = block
    write_json(res, path)
    md = folder / "results.md"
    atomic_write_bytes(md, with_mad_section(md.read_text() if md.is_file() else "", render_markdown(block)).encode())
    return block


def main(args) -> int:
    check_counts(args)  # (no --out: not common.start)
    set_threads(args.threads)
    folder = Path(args.dir)
    command = f"siggate analyze mad {folder}" + (f" --batch-size {args.batch_size}" if args.batch_size != 64 else "")
    block = add_mad(folder, args.batch_size, command, progress=progress_enabled(args))
    for lab in block["per_seed"]:
        print(f"  {lab:24s} last-layer MAD {fmt(block['mean'][lab])} ± {fmt(block['std'][lab])} (n={block['n'][lab]})")
    for c in block["comparisons"]:
        print(f"  {c['b']} - {c['a']}: mean diff {fmt(finite(c['diff_mean']))}, p paired t {p_text(c['p_paired_t'], missing='nan')}")
    print(f"siggate analyze mad: wrote the MAD of {sum(block['n'].values())} run(s) into {folder / 'results.json'}, "
          f"{folder / 'results.md'}")
    return 0
