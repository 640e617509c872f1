"""``siggate analyze report DIR... --out FILE.md``: one Markdown report of the analysis
results found in the given folders, with a verdict for each of the paper's claims.

Each verdict is one of ``holds``, ``does not hold``, ``not supported`` or ``inconclusive at
this budget``, decided by the rule written next to it (the rules are fixed here, not tuned to
results). Where a claim has a statistical test (the smoothing claims), **holds** needs that
test to reject at p < 0.05 in the claimed direction over the claimed range.
"""

from __future__ import annotations

import json
import logging
import math
import os
from contextlib import contextmanager
from pathlib import Path

from ..config_args import CLIError, check_out_file
from ..options import RUN_LOCAL_KEYS
from ..stats import IDENTICAL_RTOL, compare_paired, p_text
from .common import fmt, table

log = logging.getLogger("siggate.analysis")

HOLDS, FAILS, INCONCLUSIVE, NOT_SUPPORTED = "holds", "does not hold", "inconclusive at this budget", "not supported"
RESULT_FILES = ("synthetic", "rank", "smoothing", "entropy", "lrsweep", "overhead")


#: the first line of every report (a file there that does not begin with it is not replaced)
HEADING = "# SigGate-GT mechanism analyses: what we measured"


def in_runs(path: Path, top: Path) -> bool:
    """Whether ``path``, found under the folder ``top``, is inside a ``runs/`` folder below it (a
    comparison's or analysis's own run folders, not results): ``top``'s own path does not count
    (a ``--out runs/cmp``, as the README's examples write, was skipped whole)."""
    return "runs" in path.relative_to(top).parts


def find_results(dirs) -> dict:
    """``{name: [(path, json)]}`` for the result files in ``dirs`` and the folders below them at
    any depth, not inside a ``runs/`` folder below them (:func:`in_runs`), plus ``"compare"`` for
    ``siggate compare`` ``results.json`` files."""
    found = {k: [] for k in RESULT_FILES + ("compare",)}
    seen = set()
    for d in dirs:
        d = Path(d)
        cands = [d] if d.is_file() else [d, *(p for p in sorted(d.rglob("*")) if p.is_dir() and not in_runs(p, d))]
        for folder in cands:
            files = [folder] if folder.is_file() else sorted(folder.glob("*.json"))
            for f in files:
                rp = f.resolve()
                if rp in seen:
                    continue
                seen.add(rp)
                try:
                    data = json.loads(f.read_text())
                except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:  # a damaged result: said, not skipped unseen
                    log.warning("%s cannot be read as JSON (%s), so it is left out: restore it, or run its analysis "
                                "again", f, getattr(exc, "strerror", None) or exc)
                    continue
                if not isinstance(data, dict):
                    continue
                name = data.get("analysis")
                if name == "lr-sweep":
                    name = "lrsweep"
                if name in found:
                    found[name].append((f, data))
                elif f.name == "results.json" and "comparisons" in data and "gates" in data:
                    found["compare"].append((f, data))
    return found


@contextmanager
def read_as(paths, what: str):
    """Reading the results at ``paths`` (one path or several) as ``what``: a file of another shape
    (a key missing, a list where a table belongs) is named in one line, not a traceback."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, ZeroDivisionError) as exc:
        names = ", ".join(map(str, paths)) if isinstance(paths, (list, tuple)) else str(paths)
        raise CLIError(f"{names}: not a complete siggate {what} result ({type(exc).__name__}: {exc}); run it again, "
                       "or leave the file out of the folders named") from None


def _img(md_path: Path, json_path: Path, name: str) -> str:
    png = json_path.with_name(f"{name}.png")
    if not png.exists():
        return ""
    rel = os.path.relpath(png.resolve(), Path(md_path).resolve().parent)
    return f"\n![{name}]({rel})\n"


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}%"


# -------------------------------------------------------------------- verdicts


def verdict_synthetic(s: dict) -> list[dict]:
    out = []
    groups = s.get("by_family_gate_attention", {})
    modes = {"global": "global attention, as in GraphGPS", "graph": "attention restricted to graph neighbours"}
    for gate in s["setting"]["gates"]:
        for mode in s["setting"]["attention"]:
            gs = {k: v for k, v in groups.items() if k.split("/")[1] == gate and k.split("/")[2] == mode}
            if not gs:
                continue
            fr = min(v["frac_gated_higher"] for v in gs.values())
            lower = max(v["frac_heads_gated_lower"] for v in gs.values())
            ratio = min(v["mean_ratio"] for v in gs.values())
            if fr >= 0.95 and lower <= 0.05:
                v = HOLDS
            elif lower > 0.20 or ratio < 1.0:
                v = FAILS
            else:
                v = INCONCLUSIVE
            parts = [f"{k.split('/')[0]}: {fmt(x['mean_ungated'])} -> {fmt(x['mean_gated'])}, rises in "
                     f"{100 * x['frac_gated_higher']:.1f}% of draws, {100 * x['frac_heads_gated_lower']:.1f}% of heads "
                     f"lose rank" for k, x in gs.items()]
            out.append({
                "claim": f"the {gate} gate raises the stable rank of each head's output (synthetic graphs, random "
                         f"weights, {modes.get(mode, mode)})",
                "measured": "; ".join(parts),
                "rule": "holds if in every graph family the head-mean stable rank rises in >= 95% of draws and <= 5% "
                        "of heads lose rank; does not hold if in some family > 20% of heads lose rank or the mean "
                        "ratio is < 1; inconclusive otherwise",
                "verdict": v,
            })
    # "strongest on anchor-free graphs": compared with ER, per attention mode, by two measures
    prim = s["setting"]["gates"][0]
    votes, parts = [], []
    for mode in s["setting"]["attention"]:
        er = groups.get(f"er/{prim}/{mode}")
        free = {k.split("/")[0]: v for k, v in groups.items()
                if k.endswith(f"/{prim}/{mode}") and not k.startswith("er/")}
        if not er or not free:
            continue
        for stat, name in (("mean_ratio", "SR ratio"), ("median_excess_ratio", "excess ratio")):
            if er.get(stat) is None or any(f.get(stat) is None for f in free.values()):
                continue
            votes.append(all(f[stat] > er[stat] for f in free.values()))
            parts.append(f"{mode} {name}: ER {fmt(er[stat])} vs " +
                         ", ".join(f"{k} {fmt(f[stat])}" for k, f in free.items()))
    if votes:
        v = HOLDS if all(votes) else (FAILS if not any(votes) else INCONCLUSIVE)
        out.append({
            "claim": "the rank gain is strongest on graphs without a natural anchor node",
            "measured": f"{prim} gate; " + "; ".join(parts),
            "rule": "per attention mode, compare ER with every anchor-free family on the mean gated/ungated ratio "
                    "and on the median excess ratio (SR_g - 1)/(SR_u - 1); holds if the anchor-free families are "
                    "larger on every comparison, does not hold if on none, inconclusive if the measures disagree",
            "verdict": v,
        })
    san = s.get("sanity_constant_gate", {})
    out.append({
        "claim": "sanity: a constant gate leaves the stable rank unchanged",
        "measured": f"max relative change {fmt(san.get('max_rel_diff'))} over {san.get('n_cases')} heads",
        "rule": "holds if the max relative change is < 1e-9",
        "verdict": HOLDS if san.get("holds") else FAILS,
    })
    return out


def verdict_rank(r: dict) -> dict:
    # a file without its gate (or its tables) is no rank result: a KeyError, which read_as names
    # (claims made it a row "not applicable (gate=None, position=None)" where report refused it)
    if r["gate"] == "none" or r["gate_position"] != "output":
        return {"claim": "trained model: head stable rank after the gate > before",
                "measured": f"not applicable (gate={r['gate']}, position={r['gate_position']})",
                "rule": "-", "verdict": INCONCLUSIVE}
    import numpy as np

    f = r["frac_heads_higher"]
    before, after = np.asarray(r["before"], dtype=float).ravel(), np.asarray(r["after"], dtype=float).ravel()
    # the sign test of one_sided_tests, heads equal within 1e-9 of their rank counted as ties
    t = one_sided_tests(np.where(np.isclose(after, before, rtol=1e-9, atol=0), 0.0, after - before))
    up, down, p = t["n_above"], t["n_below"], t["sign_up"]
    v = HOLDS if f >= 0.95 and p is not None and p < 0.05 else (FAILS if f < 0.5 else INCONCLUSIVE)
    return {
        "claim": f"{'trained' if r.get('trained') else 'untrained'} model on {r.get('dataset')}: every head's stable "
                 "rank is higher after the gate than before",
        "measured": f"mean over layers and heads {fmt(r['mean_before'])} -> {fmt(r['mean_after'])}; higher in "
                    f"{100 * f:.0f}% of (layer, head) ({up} higher, {down} lower; one-sided sign test p = "
                    f"{p_text(p, 4, missing='nan')}); {r['split']} split, {r['n_graphs']} graphs; "
                    f"{models_text(r['model_source'])}",
        "rule": "holds if >= 95% of (layer, head) pairs have a higher mean stable rank after the gate and a one-sided "
                "sign test over the pairs rejects 'no more often higher than lower' at p < 0.05 (the pairs of one "
                "model); does not hold if < 50%",
        "verdict": v,
    }


def models_text(sources: list[str]) -> str:
    """The models a rank result measured (its ``model_source``): one named as it is, several (``--seeds``)
    as the mean of them all, each named (the first alone was named beside the mean of every seed's)."""
    return sources[0] if len(sources) == 1 else f"mean of {len(sources)} models: {'; '.join(sources)}"


#: the depths the paper's smoothing claims are about ("across 4-16 layers"), the grid of
#: ``siggate analyze smoothing``: a verdict needs (depth, seed) pairs at every one of them
CLAIMED_DEPTHS = (4, 8, 12, 16)
#: the paper's mean relative diversity gain
CLAIMED_GAIN = 0.30


def one_sided_tests(gains, target: float = 0.0) -> dict:
    """The claim tests of (depth, seed) gains ``x``: the sign test (exact binomial) of
    ``x > target`` and the one-sample t-test of ``mean(x) > target``, each one-sided in the
    claimed direction (``p_up``) and in the other (``p_down``). ``None`` where a test is
    undefined (no non-tied pair; fewer than 2 pairs or no spread)."""
    import numpy as np
    from scipy import stats as st

    x = np.asarray([g for g in gains if g is not None], dtype=float)
    up, down = int((x > target).sum()), int((x < target).sum())
    out = {"n": int(x.size), "n_above": up, "n_below": down, "sign_up": None, "sign_down": None,
           "t_up": None, "t_down": None}
    if up + down:
        out["sign_up"] = float(st.binomtest(up, up + down, 0.5, alternative="greater").pvalue)
        out["sign_down"] = float(st.binomtest(up, up + down, 0.5, alternative="less").pvalue)
    if x.size >= 2 and x.std() > 0:
        out["t_up"] = float(st.ttest_1samp(x, target, alternative="greater").pvalue)
        out["t_down"] = float(st.ttest_1samp(x, target, alternative="less").pvalue)
    return out


def _tested_verdict(p_up, p_down, covered: bool, short: bool) -> str:
    """**holds** only when the claim's own one-sided test rejects (``p_up < 0.05``) over the
    claimed range (``covered``); the opposite rejection after the full protocol does not hold;
    otherwise inconclusive at this budget (short, or the range not covered) or not supported."""
    if covered and p_up is not None and p_up < 0.05:
        return HOLDS
    if short or not covered:
        return INCONCLUSIVE
    return FAILS if p_down is not None and p_down < 0.05 else NOT_SUPPORTED


def verdict_smoothing(s: dict) -> list[dict]:
    """The two smoothing claims, each judged by its own one-sided test over the (depth,
    seed) pairs at the claimed depths 4-16 (:data:`CLAIMED_DEPTHS`, all of which must have
    pairs): the sign test of gain > 0 for "gating slows over-smoothing", the t-test of mean
    gain > +30% for "+30% on average across 4-16 layers". Models at their initialisation
    (``--epochs 0``) are measured and never judged: inconclusive."""
    prim = s.get("primary_gate")
    pairs = [p for p in s.get("paired_gains", {}).get(prim, [])
             if p["gain"] is not None and CLAIMED_DEPTHS[0] <= int(p["depth"]) <= CLAIMED_DEPTHS[-1]]
    missing = [d for d in CLAIMED_DEPTHS if d not in {int(p["depth"]) for p in pairs}]
    covered = not missing
    gains = [p["gain"] for p in pairs]
    proto = s.get("protocol_epochs") or s.get("meta", {}).get("config", {}).get("train", {}).get("epochs")
    short = proto is None or s.get("epochs", 0) < proto
    # the claim is about trained models: at --epochs 0 the gate at its initialisation scales each head
    # (sigmoid(0) = 0.5), which can make a "holds" of models that learned nothing
    untrained = s.get("epochs") == 0 or s.get("trained") is False
    budget = (f"{s.get('epochs')} epochs{' (untrained models, at their initialisation)' if untrained else ''} "
              f"(protocol: {proto}), seeds {s.get('seeds')}")
    if missing:
        budget += f"; no pairs at depth(s) {', '.join(map(str, missing))} of the claimed 4-16"
    per = s.get("relative_mad_gain", {}).get(prim, {})
    where = ("depths 4-16" if covered else "depth(s) " + ", ".join(map(str, sorted({int(p["depth"]) for p in pairs})))
             if pairs else "depths 4-16, where none was measured")  # (it read "at depth(s) , lower in 0")
    zero, target = one_sided_tests(gains), one_sided_tests(gains, CLAIMED_GAIN)
    mean = sum(gains) / len(gains) if gains else None
    out = [{
        "claim": "gating slows over-smoothing (more diverse last-layer representations than without the gate)",
        "measured": f"last-layer MAD higher with {prim} in {zero['n_above']}/{zero['n']} (depth, seed) pairs at "
                    f"{where}, lower in {zero['n_below']}; one-sided sign test p = {p_text(zero['sign_up'], missing='nan')}; "
                    f"{budget}",
        "rule": "holds if the one-sided sign test of gain > 0 over the (depth, seed) pairs at depths 4, 8, 12 and 16 "
                "(all present) of trained models gives p < 0.05; does not hold if the test of gain < 0 does, after the "
                "protocol's full epochs; not supported if neither does after them; inconclusive at this budget "
                "otherwise (untrained models included)",
        "verdict": INCONCLUSIVE if untrained else _tested_verdict(zero["sign_up"], zero["sign_down"], covered, short),
    }, {
        "claim": "the diversity gain is +30% on average across 4-16 layers",
        "measured": f"mean relative last-layer MAD gain of {prim} over none: {_pct(mean)} over {target['n']} (depth, "
                    f"seed) pairs (per depth: {', '.join(f'{d}: {_pct(x)}' for d, x in per.items())}); one-sided "
                    f"t-test of mean gain > +30%: p = {p_text(target['t_up'], missing='nan')} (< +30%: p = "
                    f"{p_text(target['t_down'], missing='nan')}); {budget}",
        "rule": "holds if the one-sided t-test of mean gain > +30% over the (depth, seed) pairs at depths 4, 8, 12 "
                "and 16 (all present) of trained models gives p < 0.05; does not hold if the test of mean gain < +30% "
                "does, after the protocol's full epochs; not supported if neither does after them; inconclusive at "
                "this budget otherwise (untrained models included)",
        "verdict": INCONCLUSIVE if untrained else _tested_verdict(target["t_up"], target["t_down"], covered, short),
    }]
    return out


def verdict_entropy(e: dict) -> dict:
    sm = e["summary"]
    gated = [g for g in sm if g != "none"]
    if not gated:
        return {"claim": "attention entropy does not collapse", "measured": "no gated variant", "rule": "-",
                "verdict": INCONCLUSIVE}
    g = gated[0]
    proto = e.get("protocol_epochs") or e.get("meta", {}).get("config", {}).get("train", {}).get("epochs")
    full = proto is not None and e["epochs"] >= proto
    from .entropy import collapsed_text

    collapsed = sm[g]["collapsed_heads"]
    if collapsed is None:  # a seed diverged: its heads' entropies are not numbers, neither collapsed nor not
        v = INCONCLUSIVE
    else:
        v = FAILS if collapsed > 0 else (HOLDS if full else INCONCLUSIVE)
    base = sm.get("none")
    return {
        "claim": "attention entropy does not collapse (gated model)",
        "measured": f"{g}: mean normalized entropy {fmt(sm[g]['initial_mean_normalized'])} -> "
                    f"{fmt(sm[g]['final_mean_normalized'])}, min head {fmt(sm[g]['final_min_normalized'])}, "
                    + (f"{collapsed}/{sm[g]['heads_total']} heads below {e['collapse_threshold']}"
                       if collapsed is not None else collapsed_text(sm[g]))
                    + (f"; none: {fmt(base['initial_mean_normalized'])} -> {fmt(base['final_mean_normalized'])}, "
                       f"{collapsed_text(base)}{' collapsed' if base['collapsed_heads'] is not None else ''}"
                       if base else "")
                    + f"; {e['epochs']} epochs",
        "rule": f"does not hold if any gated head ends with normalized entropy < {e['collapse_threshold']}; holds if none "
                "does after the full protocol's epochs; inconclusive when no collapse is seen after fewer epochs, "
                "or when a seed diverged",
        "verdict": v,
    }


def _reaches(ratio: float, bound: float) -> bool:
    """``ratio >= bound`` for ratios of learning rates, up to float rounding (3e-4 / 3e-5 is
    9.999999999999998, a 10x range that a plain comparison called short of 10x)."""
    return ratio >= bound * (1 - IDENTICAL_RTOL)


def verdict_lr(l: dict) -> list[dict]:
    out = []
    rng, nd = l["stable_range"], l.get("no_divergence_range", {})
    tol = l["tolerance"]
    proto = l.get("protocol_epochs") or l.get("meta", {}).get("config", {}).get("train", {}).get("epochs")
    short = proto is not None and l["epochs"] < proto
    budget = f"{l['epochs']} epochs (protocol: {proto}), seeds {l['seeds']}"
    sweep = l["lrs"][-1] / l["lrs"][0]

    def short_of_10x(r: dict) -> str:
        """A range short of 10x: FAILS only where rates on both sides of it fell out; one that reaches
        an end of the sweep might go on past it (a sweep of 1e-3..3e-3 cannot show 10x). An empty range
        (no rate of the sweep in it: every one fell out, :func:`~.lrsweep.widest_range`) has no end to
        reach: FAILS, where its ``None`` bounds raised a TypeError that read_as called an incomplete file."""
        if r["min_lr"] is None:
            return FAILS
        ends = math.isclose(r["min_lr"], l["lrs"][0], rel_tol=1e-9) or math.isclose(r["max_lr"], l["lrs"][-1],
                                                                                     rel_tol=1e-9)
        return INCONCLUSIVE if ends else FAILS
    for g in [g for g in l["gates"] if g != "none"]:
        if g in nd:
            r = nd[g]
            out.append({
                "claim": f"training with the {g} gate stays stable (does not diverge) across a 10x learning-rate range",
                "measured": (f"no seed diverged for lr {fmt(r['min_lr'])}..{fmt(r['max_lr'])} = {fmt(r['ratio'])}x "
                             if r["min_lr"] is not None else "a seed diverged at every learning rate of the sweep ")
                            + f"(none: {fmt(nd.get('none', {}).get('ratio'))}x); {budget}",
                "rule": "holds if the widest contiguous range of learning rates without divergence is >= 10x after "
                        "the protocol's full epochs (an observation over every seed and rate, no statistical test); "
                        "does not hold if it is shorter and rates on both sides of it diverged; inconclusive after "
                        "fewer epochs (a run can diverge later), or when a shorter range reaches an end of the sweep",
                "verdict": (INCONCLUSIVE if short else HOLDS) if _reaches(r["ratio"], 10) else short_of_10x(r),
            })
        r = rng[g]
        v = INCONCLUSIVE if short else (HOLDS if _reaches(r["ratio"], 10) else short_of_10x(r))  # a rate can fall out later
        out.append({
            "claim": f"with the {g} gate the result stays within {fmt(100 * tol, 3)}% of its best across a 10x "
                     "learning-rate range",
            "measured": (f"within {fmt(100 * tol, 3)}% of its best (val {l['metric']} {fmt(l['best_score'][g])}) for lr "
                         f"{fmt(r['min_lr'])}..{fmt(r['max_lr'])} = {fmt(r['ratio'])}x; none: "
                         if r["min_lr"] is not None else
                         "no learning rate of the sweep within tolerance (a seed diverged at every one); none: ")
                        + f"{fmt(rng.get('none', {}).get('ratio'))}x; {budget}",
            "rule": "holds if the widest contiguous range within tolerance is >= 10x; does not hold if it is "
                    "shorter and rates on both sides of it fell out, after the protocol's full epochs; inconclusive "
                    "after fewer epochs (low learning rates have not converged yet), or when a shorter range reaches "
                    "an end of the sweep",
            "verdict": v,
        })
        if "none" in rng:
            w = l["range_widening"].get(g)
            wd = (nd[g]["ratio"] / nd["none"]["ratio"]) if g in nd and nd["none"]["ratio"] > 0 else None
            full = _reaches(rng["none"]["ratio"], sweep)
            if w is None or full:
                v = INCONCLUSIVE
            elif _reaches(w, 10):
                v = HOLDS
            else:
                v = INCONCLUSIVE if short else FAILS
            out.append({
                "claim": f"the {g} gate widens the stable learning-rate range (about 10x) over no gate",
                "measured": f"within-tolerance range {fmt(r['ratio'])}x vs {fmt(rng['none']['ratio'])}x -> widening "
                            f"{fmt(w)}x; no-divergence range {fmt(nd.get(g, {}).get('ratio'))}x vs "
                            f"{fmt(nd.get('none', {}).get('ratio'))}x -> {fmt(wd)}x"
                            + (" (the ungated range already spans the whole sweep)" if full else ""),
                "rule": "on the within-tolerance range: holds if widening >= 10x; does not hold if < 10x after the "
                        "protocol's full epochs; inconclusive after fewer epochs or when the ungated range already "
                        "covers the whole sweep",
                "verdict": v,
            })
    return out


#: the fewest paired timings whose bootstrap interval judges the time claim: one gave a zero-width
#: interval, two their range, and either "held" (helper-176: a gated model 24% faster, from noise)
MIN_TIMINGS = 20


def verdict_overhead(o: dict) -> list[dict]:
    out = []
    for n in o["variants"]:
        if n == o["baseline"]:
            continue
        p = o["param_overhead"][n]
        vp = HOLDS if p <= 0.02 else FAILS
        out.append({
            "claim": f"{n} gate: about 1% extra parameters",
            "measured": f"+{o['param_overhead_abs'][n]} parameters = {_pct(p)} of {o['params'][o['baseline']]} "
                        f"(formula check: {'ok' if o['formula_ok'][n] else 'MISMATCH'}); model "
                        f"dim={o['model']['dim']}, layers={o['model']['layers']}, heads={o['model']['heads']}",
            "rule": "holds if <= 2% (about 1%): an exact count of the built models' parameters, no sampling to test",
            "verdict": vp,
        })
        t = o["time_overhead"][n]
        lo, hi = (x - 1 for x in o["time_ratio_ci95"][n])
        vt = INCONCLUSIVE if o["n_measurements"][n] < MIN_TIMINGS else (
            HOLDS if hi < 0.03 else (FAILS if lo > 0.03 else INCONCLUSIVE))
        out.append({
            "claim": f"{n} gate: under 3% extra wall-clock time",
            "measured": f"forward+backward median {_pct(t)} (paired ratio 95% CI {_pct(lo)}..{_pct(hi)}), "
                        f"{o['n_measurements'][n]} measurements, {o['threads']} thread(s)",
            "rule": f"with at least {MIN_TIMINGS} paired measurements: holds if the upper 95% bound < +3%; does not "
                    "hold if the lower bound > +3%; inconclusive otherwise",
            "verdict": vt,
        })
    return out


# ---------------------------------------------------------------------- render


def _claims_table(rows: list[dict]) -> str:
    return table(["claim", "measured", "verdict"], [[r["claim"], r["measured"], f"**{r['verdict']}**"] for r in rows],
                 markdown=True)


class _Report:
    """Sections of the report and the claim rows they add, in order."""

    def __init__(self, md_path: Path) -> None:
        self.md_path = Path(md_path)
        self.sections: list[str] = []
        self.rows: list[dict] = []

    def add(self, title: str, paper: str, rows: list[dict], extra: str = "", images=()) -> None:
        """One section: the paper's claim, the verdict table, the rules, extra text and images."""
        self.rows.extend(rows)
        body = [f"## {title}", "", f"*Paper:* {paper}", "", _claims_table(rows), ""]
        body += [f"- rule for *{r['claim']}*: {r['rule']}" for r in rows]
        if extra:
            body += ["", extra]
        body += list(images)
        self.sections.append("\n".join(body))


def _synthetic_section(rep: _Report, path, s: dict) -> None:
    """Stable rank on synthetic graphs (``siggate analyze synthetic``)."""
    st = s["setting"]
    bt = table(["family/gate/attention", "draws", "SR ungated", "SR gated", "mean ratio", "median excess ratio",
                "frac draws higher", "frac heads lower"],
               [[k, v["n_draws"], v["mean_ungated"], v["mean_gated"], v["mean_ratio"], v.get("median_excess_ratio"),
                 v["frac_gated_higher"], v["frac_heads_gated_lower"]]
                for k, v in s["by_family_gate_attention"].items()], markdown=True)
    bias = table(["gate bias", "family", "gate", "gate mean", "mean ratio", "frac draws higher"],
                 [[r["bias"], r["family"], r["gate"], r["gate_mean"], r["mean_ratio"], r["frac_gated_higher"]]
                  for r in s["bias_sweep"]], markdown=True)
    rep.add("Stable rank: synthetic graphs", "the gate strictly increases the stable rank of each head's output; "
        "the effect is strongest on graphs with no natural anchor node.", verdict_synthetic(s),
        f"Setting: {st['draws']} draws per family and attention mode, n={st['nodes']} nodes, d={st['dim']}, "
        f"H={st['heads']}, noise {st['noise']}, seed {st['seed']} (`{path}`).\n\n{bt}\n\nEffect of the gate bias "
        f"(global attention):\n\n{bias}\n", [_img(rep.md_path, path, "synthetic")])


def _rank_section(rep: _Report, path, r: dict) -> None:
    """Stable rank in a trained model (``siggate analyze rank``)."""
    rows = [[l + 1, " ".join(fmt(v, 3) for v in r["before"][l]), " ".join(fmt(v, 3) for v in r["after"][l]),
             None if r.get("gate_mean") is None else r["gate_mean"][l]] for l in range(len(r["before"]))]
    rep.add(f"Stable rank in a model on {r.get('dataset')} (gate={r.get('gate')})", "the gate raises each head's "
        "stable rank.", [verdict_rank(r)],
        f"Pooling: {r['pooling']} (`{path}`).\n\n" + table(["layer", "SR before (per head)", "SR after (per head)",
                                                            "gate mean"], rows, markdown=True),
        [_img(rep.md_path, path, "rank")])


def _smoothing_section(rep: _Report, path, s: dict) -> None:
    """Over-smoothing versus depth (``siggate analyze smoothing``)."""
    rows = []
    for L, d in s["per_depth"].items():
        for g, e in d.items():
            gain = s["relative_mad_gain"].get(g, {}).get(L) if g != "none" else None
            rows.append([L, g, e["mad"][-1], e["dirichlet"][-1], e.get("dirichlet_rel", [None])[-1], e["rank"][-1],
                         e["stable_rank"][-1], e["val"],
                         None if gain is None else _pct(gain)])
    defs = "\n".join(f"- {k}: {v}" for k, v in s["definitions"].items())
    rep.add("Over-smoothing versus depth", "gating slows over-smoothing, with a 30% mean relative gain in "
        "representation diversity across 4-16 layers.", verdict_smoothing(s),
        f"Last layer, validation split (`{path}`):\n\n" + table(
            ["depth", "gate", "MAD", "Dirichlet", "Dirichlet rel.", "num. rank", "stable rank", f"val {s['metric']}",
             "MAD gain"],
            rows, markdown=True) + f"\n\nDefinitions:\n{defs}\n", [_img(rep.md_path, path, "smoothing")])


def _entropy_section(rep: _Report, path, e: dict) -> None:
    """Attention entropy over training (``siggate analyze entropy``)."""
    from .entropy import collapsed_text

    rows = [[g, x["initial_mean_entropy"], x["final_mean_entropy"], x["initial_mean_normalized"],
             x["final_mean_normalized"], x["final_min_normalized"], collapsed_text(x), x["final_val"]]
            for g, x in e["summary"].items()]
    rep.add("Attention entropy over training", "attention entropy does not collapse.", [verdict_entropy(e)],
        f"`{path}`, {e['epochs']} epochs, seeds {e['seeds']}:\n\n" + table(
            ["gate", "H initial", "H final", "H/log n initial", "H/log n final", "min head final", "collapsed",
             f"final val {e['metric']}"], rows, markdown=True), [_img(rep.md_path, path, "entropy")])


def _lrsweep_section(rep: _Report, path, l: dict) -> None:
    """Learning-rate robustness (``siggate analyze lr-sweep``)."""
    rows = [[g, f"{p['lr']:g}", p["score"], p["score_std"], f"{p['n_diverged']}/{len(l['seeds'])}",
             sum(p["skipped_batches"]), "yes" if l["stable_range"][g]["within"][i] else "no"]
            for g in l["gates"] for i, p in enumerate(l["per_lr"][g])]
    rep.add("Learning-rate robustness", "training stays stable across a 10x learning-rate range (the gate widens "
        "the stable range).", verdict_lr(l),
        f"`{path}`, {l['epochs']} epochs, seeds {l['seeds']}, tolerance {fmt(100 * l['tolerance'], 3)}%:\n\n" + table(
            ["gate", "lr", f"best val {l['metric']}", "std", "diverged", "skipped batches", "within tolerance"],
            rows, markdown=True), [_img(rep.md_path, path, "lrsweep")])


def _overhead_section(rep: _Report, path, o: dict) -> None:
    """Parameter and time cost (``siggate analyze overhead``)."""
    rows = [[n, o["params"][n], o["param_overhead_abs"][n], _pct(o["param_overhead"][n]),
             1000 * o["median_seconds"][n], _pct(o["time_overhead"][n])] for n in o["variants"]]
    rep.add("Cost", "about 1% extra parameters on OGB and under 3% extra wall-clock time.", verdict_overhead(o),
        f"`{path}`:\n\n" + table(["variant", "params", "extra", "extra %", "median ms fwd+bwd", "time"], rows,
                                  markdown=True), [_img(rep.md_path, path, "overhead")])


def _compare_section(compare: list) -> str:
    """The ablation table of ``siggate compare`` results, each variant against its comparison's own
    ungated arm, else the ungated arm of a comparison of the same dataset, metric, epochs and
    config but the gate's (:func:`_baseline_key`)."""
    # comparisons that hold the ungated baseline first; the others are compared with that
    # baseline on common seeds when their dataset, metric and epochs match
    comps = sorted(compare, key=lambda pc: ("none" not in pc[1]["gates"], str(pc[0])))
    bases: dict = {}
    for _, c in comps:
        if "none" in c["gates"]:
            bases.setdefault(_baseline_key(c), c)
    rows = []
    for path, c in comps:
        bias = (c.get("config") or {}).get("model", {}).get("gate_bias_init")
        base = c if "none" in c["gates"] else bases.get(_baseline_key(c))  # its own ungated arm first
        for lab in c["gates"]:
            label = lab + (f" (gate_bias_init={bias:g})" if bias not in (None, 0, 0.0) and lab != "none" else "")
            diff = p = None
            if base is not None and lab != "none":  # the diff and its p of one pair: this arm and that none
                pair = compare_paired(base["per_seed"].get("none", {}), c["per_seed"].get(lab, {}),
                                      bool(c.get("higher_is_better")))
                if pair["n_pairs"]:
                    diff = pair["mean_diff"]
                    p = p_text(pair["p_paired_t"], 4) if math.isfinite(pair["p_paired_t"]) else None  # (not rounded across 0.05)
            rows.append([label, _baseline_key(c)[0] or "?", c.get("metric") or "?", c["n"].get(lab), c["mean"].get(lab),
                         c["std"].get(lab), c["val_mean"].get(lab), c["params"].get(lab), c.get("epochs"), diff, p,
                         f"`{path}`"])
    return "\n".join([
        "## Ablations (`siggate compare`)", "",
        "Score = the test metric at the epoch of best validation metric; 'diff vs none' is the mean over common "
        "seeds of (variant - none) with the comparison's own ungated run, else one of the same dataset, metric, "
        "epochs and config but the gate's; p from the paired t-test (undefined for one seed).", "",
        table(["variant", "dataset", "metric", "seeds", "test", "std", "val", "params", "epochs", "diff vs none",
               "p (paired t)", "source"], rows, markdown=True), ""])


def _baseline_key(c: dict) -> tuple:
    """What a comparison's scores are comparable by: its dataset (a CSV's file and split too),
    metric and epochs, and the rest of its config but the gate's own keys (``model.gate*``,
    ``model.param_match``), the first seed (the runs pair by seed) and where the runs executed
    (:data:`~siggate.options.RUN_LOCAL_KEYS`): a comparison at another width is not measured
    against this one's ungated runs."""
    cfg = c.get("config") or {}
    data = cfg.get("data") or {}
    name = data.get("name") or c.get("dataset")
    if name == "csv":
        name = f"csv {data.get('csv')} ({data.get('split')})"
    rest = {section: {k: v for k, v in values.items()
                      if f"{section}.{k}" not in (*RUN_LOCAL_KEYS, "train.seed")
                      and not (section == "model" and (k.startswith("gate") or k == "param_match"))}
            for section, values in cfg.items() if isinstance(values, dict)}
    return name, c.get("metric"), c.get("epochs"), json.dumps(rest, sort_keys=True, default=str)


_SECTIONS = {
    "synthetic": _synthetic_section,
    "rank": _rank_section,
    "smoothing": _smoothing_section,
    "entropy": _entropy_section,
    "lrsweep": _lrsweep_section,
    "overhead": _overhead_section,
}


def render(found: dict, md_path: Path) -> tuple[str, list[dict]]:
    """The Markdown report of the results in ``found`` (``{kind: [(path, result)]}``) with
    image links relative to ``md_path``; returns ``(text, claim rows)``."""
    rep = _Report(md_path)
    for kind, section in _SECTIONS.items():
        for path, res in found[kind]:
            with read_as(path, f"analyze {kind}"):
                section(rep, path, res)
    if found["compare"]:
        with read_as([p for p, _ in found["compare"]], "compare"):
            rep.sections.append(_compare_section(found["compare"]))
    sections, all_rows = rep.sections, rep.rows

    head = [HEADING, "",
            "Generated by `siggate analyze report`. Each claim of the paper is checked against our own measurements; "
            "verdicts follow the rule printed under each table and are only as strong as the budget behind them "
            "(see the epochs and seeds given in each section).", ""]
    if all_rows:
        head += ["## Summary", "", _claims_table(all_rows), ""]
    else:
        head += ["No analysis results were found.", ""]
    return "\n".join(head + sections) + "\n", all_rows



def main(args) -> int:
    out = check_out_file(args.out, "--out", "the report", "REPORT.md", starts=HEADING)
    found = find_results(args.dirs)
    if not any(found.values()):
        raise FileNotFoundError(f"no analysis results (synthetic.json, rank.json, ...) under {', '.join(args.dirs)}")
    text, rows = render(found, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(table(["claim", "verdict"], [[r["claim"], r["verdict"]] for r in rows]))
    print(f"wrote {out}")
    return 0
