"""Cost of the gate: extra parameters and forward+backward wall-clock time per gate kind.

Parameters are counted on the model the config builds for the dataset. Time is measured
in one process on real training batches: every model runs the same batches, the variants
are interleaved (each round runs every variant once on the same batch, the starting
variant rotating from round to round so that no variant always runs first), after warm-up
rounds; one measurement is ``zero_grad + forward + loss + backward`` (no optimizer step).
The overhead of a variant is ``median(t_variant) / median(t_none) - 1``, with a paired
bootstrap 95% interval (measurements resampled together across variants); the median of
the per-measurement paired ratios is reported too.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from ..options import gate_width, parse_gate_spec
from ..perf.timer import interleaved_round
from .common import (
    CLIError,
    batches,
    config_from,
    fmt,
    load_dataset,
    meta,
    parse_gates,
    start,
    table,
    variant,
    write_outputs,
)
from .plots import color, save, subplots


def parse_variant(spec: str) -> dict:
    """``"elementwise"`` or ``"elementwise@value"`` -> config changes."""
    gate, pos = parse_gate_spec(spec)
    out = {"model__gate": gate}
    if pos:
        out["model__gate_position"] = pos
    return out


def expected_gate_params(gate: str, dim: int, heads: int, layers: int) -> int:
    """The paper's count: elementwise ``d*d + d`` and headwise ``d*H + H`` per attention layer
    (:func:`~siggate.options.gate_width` logits, each with ``d`` weights and a bias)."""
    return (dim + 1) * gate_width(gate, dim, heads) * layers


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def time_variants(models: dict, data, reps: int, warmup: int, criterion, progress: bool = True) -> dict:
    """Interleaved timing (:func:`siggate.perf.timer.interleaved_round`, the order rotating
    from round to round); returns ``{name: [seconds per measurement]}`` in matching order."""
    names = list(models)
    for m in models.values():
        m.train()

    def measure(name, batch) -> None:
        model = models[name]
        model.zero_grad(set_to_none=True)
        pred = model(batch)
        criterion(pred, batch.y.view(pred.shape)).backward()

    times = {n: [] for n in names}
    for r in tqdm(range(warmup + reps), desc="timing rounds", disable=not progress, leave=False):
        per_batch = interleaved_round(names, data, measure, first=r, rotate_per_job=False)
        if r >= warmup:
            for per in per_batch:
                for n in names:
                    times[n].append(per[n][0])
    return times


def bootstrap_ratio_ci(t: np.ndarray, t_base: np.ndarray, n: int = 2000, seed: int = 0) -> list[float]:
    """95% interval of ``median(t) / median(t_base)``, resampling measurement indices
    (pairs stay together: same round, same batch)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(t), size=(n, len(t)))
    r = np.median(t[idx], axis=1) / np.median(t_base[idx], axis=1)
    return [float(np.quantile(r, 0.025)), float(np.quantile(r, 0.975))]


def plot(res: dict, path: Path) -> Path:
    fig, ax = subplots(1, 2, size=(4.4, 3.4))
    names = list(res["param_overhead"])
    a = ax[0, 0]
    a.bar(names, [100 * res["param_overhead"][n] for n in names], color=[color(n, i) for i, n in enumerate(names)])
    a.axhline(1.0, color="k", ls=":", lw=0.8)
    a.set_ylabel("extra parameters vs none (%)")
    a.set_title("parameter overhead (paper: ~1%)")
    a.tick_params(axis="x", rotation=20)
    a = ax[0, 1]
    ys = [100 * res["time_overhead"][n] for n in names]
    lo = [100 * (res["time_ratio_ci95"][n][0] - 1) for n in names]
    hi = [100 * (res["time_ratio_ci95"][n][1] - 1) for n in names]
    a.bar(names, ys, color=[color(n, i) for i, n in enumerate(names)],
          yerr=[np.maximum(0, np.array(ys) - lo), np.maximum(0, np.array(hi) - ys)], capsize=4)
    a.axhline(3.0, color="k", ls=":", lw=0.8)
    a.set_ylabel("forward+backward time vs none (%)")
    a.set_title("time overhead (paper: < 3%)")
    a.tick_params(axis="x", rotation=20)
    return save(fig, path)



def main(args) -> int:
    from ..train.losses import loss_fn
    from ..train.modelprep import build_model

    if args.epochs is not None:  # (accepted and ignored)
        raise CLIError("--epochs: analyze overhead trains nothing (it times forward and backward passes of untrained "
                       "models); drop it")
    if str(args.seeds).strip() != "0":
        raise CLIError("--seeds: analyze overhead builds one model per gate, initialised with train.seed; drop "
                       "--seeds (--set train.seed=N picks another)")
    out, progress = start(args)
    cfg = config_from(args, owned={"model.gate": "from --gates", "model.gate_position": "from --gates (GATE@POSITION)"})
    specs = parse_gates(args.gates, positions=True)
    ds = load_dataset(cfg, progress)
    info = ds.info
    models, params, gate_params, expected = {}, {}, {}, {}
    for spec in specs:
        c = variant(cfg, **parse_variant(spec))
        m = build_model(c.model, info, c.train.seed, ds.train)
        models[spec] = m
        params[spec] = count_params(m)
        gate_params[spec] = m.gate_parameter_count()
        n_attn = len(m.attention_modules())
        expected[spec] = expected_gate_params(c.model.gate, c.model.dim, c.model.heads, n_attn)
    base = specs[0]
    bs = cfg.train.batch_size
    data = []
    for b in batches(ds.train, bs):
        data.append(b)
        if len(data) >= args.batches:
            break
    crit = loss_fn(cfg.train.loss, info.task)
    torch.manual_seed(0)
    times = time_variants(models, data, args.reps, args.warmup, crit, progress)
    t_base = np.asarray(times[base])
    med = {n: float(np.median(t)) for n, t in times.items()}
    ratio = {n: np.asarray(times[n]) / t_base for n in specs}
    res = {
        "analysis": "overhead", "dataset": info.name, "baseline": base, "variants": specs,
        "model": {k: getattr(cfg.model, k) for k in ("dim", "layers", "heads", "local", "pe", "impl")},
        "batch_size": bs, "batches": len(data), "reps": args.reps, "warmup": args.warmup,
        "threads": torch.get_num_threads(),
        "params": params, "gate_params": gate_params, "expected_gate_params": expected,
        "formula_ok": {n: gate_params[n] == expected[n] for n in specs},
        "param_overhead_abs": {n: params[n] - params[base] for n in specs},
        "param_overhead": {n: (params[n] - params[base]) / params[base] for n in specs},
        "median_seconds": med,
        "time_overhead": {n: med[n] / med[base] - 1.0 for n in specs},
        "time_ratio_median_paired": {n: float(np.median(ratio[n])) for n in specs},
        "time_ratio_ci95": {n: bootstrap_ratio_ci(np.asarray(times[n]), t_base) for n in specs},
        "n_measurements": {n: len(t) for n, t in times.items()},
        "method": __doc__.split("\n\n", 1)[1].strip(),
        "paper_claim": "about 1% extra parameters (OGB) and under 3% extra wall-clock time",
        "meta": meta(args, cfg),
    }
    path = write_outputs(res, out, "overhead", plot)
    rows = [[n, params[n], res["param_overhead_abs"][n], 100 * res["param_overhead"][n], 1000 * med[n],
             100 * res["time_overhead"][n],
             f"[{fmt(100 * (res['time_ratio_ci95'][n][0] - 1), 3)}, {fmt(100 * (res['time_ratio_ci95'][n][1] - 1), 3)}]"]
            for n in specs]
    print(table(["variant", "params", "extra", "extra %", "median ms", "time +%", "95% CI %"], rows))
    print(f"{len(data)} batches of {bs} graphs x {args.reps} rounds, {torch.get_num_threads()} thread(s); "
          f"wrote {path}")
    return 0
