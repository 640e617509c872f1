"""``siggate analyze claims``: the paper's claims next to what we measured, as one table.

The table is generated from committed result files, never typed by hand:

- ``siggate compare`` results (``results.json``; the short-budget runner's ``results.json``
  with one entry per dataset is read too) give the accuracy claims. The statistics are
  recomputed here from ``per_seed`` with :func:`siggate.stats.compared_pairs`, Holm-adjusted
  over the claims' own questions (:func:`claim_questions`: each gate against ``none`` and
  against its matched control), not over every pair of arms.
- analysis results (``smoothing.json``, ``rank.json``, ...) give the mechanism claims,
  judged by the rules of :mod:`siggate.analysis.report`.
- the gate studies that are not ``siggate compare`` runs add their own question's row
  (:func:`study_rows`), judged by the test their file records: the from-scratch MoleculeACE
  gate study (``gate_study`` of ``benchmarks/moleculeace/results/results.json``: paired by
  target, Wilcoxon over targets, Holm over the gated arms) and the pretraining pair
  (``benchmarks/results/pretrain_gate/results.json``: paired over the descriptors). A study
  counts as its full protocol only when it is complete (every public target with the planned
  seeds in both arms). The pretraining pair holds one run per arm, so its test over descriptors
  compares two trained models, not runs: its row is always "not at this budget"
  (:func:`pretrain_gate_rows`).

Each row has one of four verdicts, or an interim reading of runs still coming in: ``holds`` (the claim's own
test rejects at p < 0.05 in the claimed direction, over the claimed range; for a gate study, once
it is complete); ``rejects so far (interim)`` (a gate study, or a ``siggate compare`` campaign, whose
runs are still coming in and whose test rejects: it is tested again at every snapshot, with no
correction for the repeated looks); ``not at this budget`` (no such rejection, and the
runs are shorter than the paper's protocol or do not cover the claimed range); ``not
supported`` (no such rejection at the full protocol); ``contradicted`` (at the full protocol
the gate is significantly worse, or the headline figure is significantly missed (the one-sided t-test over
the seeds that the mean is outside 10% of it rejects, :func:`accuracy_verdict`); or a budget-free claim such
as a parameter count fails). The p-value is shown in each row. With
``--readme FILE`` the table replaces the text between the ``<!-- claims:start -->`` and
``<!-- claims:end -->`` markers of FILE; a test checks that the results page, ``benchmarks/RESULTS.md``,
holds exactly what this command generates from the committed results.

Under the table, each results set that has the parameter-matched control (a study designed
to ask "does the gate help?") gets its plain answer (:func:`answer`): which gate wins, whether
the win survives the matched control, and how large a gain the intervals leave room for.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..config_args import CLIError, check_out_file
from ..files import read_json
from ..stats import mean_std, p_text
from ..train.runfiles import BEST
from . import report
from .common import fmt, table

HOLDS, BUDGET, NOT_SUPPORTED, CONTRADICTED = "holds", "not at this budget", "not supported", "contradicted"
#: a gate study or compare campaign whose runs are still coming in and whose test rejects: every snapshot tests again,
#: with no correction for the repeated looks, so this is a reading, not a verdict
INTERIM = "rejects so far (interim)"
#: the same for a rejection against the claim (the gate worse) at the full protocol
INTERIM_AGAINST = "contradicted so far (interim)"
#: the level every test here rejects at
ALPHA = 0.05
START, END = "<!-- claims:start -->", "<!-- claims:end -->"

#: the paper's headline accuracy per dataset: (metric as a fraction, text)
PAPER_ACCURACY = {"zinc": (0.059, "ZINC test MAE 0.059"), "molhiv": (0.8247, "ogbg-molhiv ROC-AUC 82.47")}
#: tolerance of the accuracy verdict: the measured mean may miss the paper's figure by this much
#: (relative), as the one-sided t-test over the seeds shows (:func:`accuracy_verdict`)
ACCURACY_TOLERANCE = 0.10
GATED, UNGATED, MATCHED = "elementwise", "none", "none@matched-ffn"


def _protocol_epochs(dataset: str) -> int | None:
    from ..config import ConfigError, load_config

    try:
        return load_config(dataset).train.epochs
    except ConfigError:
        return None


#: config keys that are not part of the protocol: where data lies, the budget (said apart),
#: the seed and the thread count, and the implementation (pinned to the reference math)
NOT_PROTOCOL = {"data.root", "data.cache_dir", "train.epochs", "train.warmup_epochs", "train.seed",
                "train.threads", "train.eval_batch_size", "model.impl"}


def _flat(cfg: dict) -> dict:
    return {f"{sec}.{k}": v for sec, keys in cfg.items() if isinstance(keys, dict) for k, v in keys.items()}


def config_name(entry: dict) -> str:
    """The config a compare result ran: its command's ``--config`` (compare always writes
    it), else the dataset's built-in config."""
    import shlex

    words = shlex.split(entry.get("command") or "")
    return words[words.index("--config") + 1] if "--config" in words[:-1] else entry["dataset"]


def config_deviations(entry: dict) -> dict:
    """``{key: {"protocol": ..., "used": ...}}`` for a compare result: the keys where the
    config its runs shared (``entry["config"]``) differs from the config it names
    (:func:`config_name`: ``zinc`` for the published model, ``zinc-paper`` for the paper's
    setting), i.e. its ``--set`` overrides. The keys compare's arms set (the gate, its
    position, the matched control's rule, ``entry["arms"]``' overrides), the budget, seeds,
    threads and paths are not deviations. An entry that states ``deviations`` itself keeps
    them; one whose config cannot be loaded (a CSV) or is of another dataset has none."""
    if "deviations" in entry or not entry.get("config"):
        return entry.get("deviations") or {}
    from ..config import ConfigError, from_dict, load_config, override_key, upgrade_config_dict

    try:
        protocol = load_config(config_name(entry)).to_dict()
        used = from_dict(upgrade_config_dict(entry["config"])).to_dict()
    except ConfigError:
        return {}
    if protocol["data"]["name"] != used["data"]["name"]:
        return {}
    by_arm = {"model.gate", "model.gate_position", "model.param_match"}  # compare's arms (older results name none)
    try:
        by_arm |= {override_key(o) for arm in (entry.get("arms") or {}).values() for o in arm.get("overrides", [])}
    except ConfigError:  # an arm override compare would not write today: no deviations can be told apart
        return {}
    p, u = _flat(protocol), _flat(used)
    return {k: {"protocol": p[k], "used": u[k]} for k in p
            if k in u and u[k] != p[k] and k not in NOT_PROTOCOL and k not in by_arm}


def comparison_sources(path: Path, data: dict) -> list[dict]:
    """Normalised accuracy results from one results file: a list of dicts with ``dataset``,
    ``metric``, ``hib``, ``per_seed``, ``epochs``, ``protocol``, ``deviation``, ``params``
    (per arm, where the file has them), ``path`` and ``missing`` (the number of planned runs not
    finished yet: a campaign still running)."""
    entries = data["datasets"].values() if "datasets" in data else [data]
    out = []
    for e in entries:
        if not e.get("per_seed") or not e.get("metric"):
            continue
        epochs = e.get("epochs")
        dev = [f"{k} {v['used']} (protocol {v['protocol']})" for k, v in config_deviations(e).items()]
        if e.get("config") and config_name(e) != e["dataset"]:
            dev.insert(0, f"config {config_name(e)}")
        out.append({"dataset": e["dataset"], "metric": e["metric"], "hib": bool(e["higher_is_better"]),
                    "per_seed": {arm: {str(k): (float("nan") if v is None else v) for k, v in s.items()}
                                 for arm, s in e["per_seed"].items()},  # results.json writes NaN as null
                    "epochs": epochs, "protocol": e.get("protocol_epochs") or _protocol_epochs(e["dataset"]),
                    "deviation": ", ".join(dev), "params": e.get("params") or {}, "path": path,
                    # a failed run is resumed by the next call, as a missing one is run: both still to come
                    "missing": len(e.get("missing") or ()) + len(e.get("failed") or ())})
    return out


def _budget(src: dict, n: int) -> str:
    """Epochs against the protocol and ``n``, the seeds the row's arms finished (for a pair:
    the comparison's ``n_pairs``)."""
    text = f"{src['epochs']} of {src['protocol']} epochs, {n} seed(s)"
    return text + (f"; {src['deviation']}" if src["deviation"] else "")


def _full(src: dict) -> bool:
    return src["protocol"] is not None and src["epochs"] is not None and src["epochs"] >= src["protocol"]


def claim_questions(src: dict) -> list[tuple[str, str]]:
    """The comparisons the claims ask of a results set, ``(control, gate)``: each gated arm
    against ``none``, and each gated arm against the parameter-matched control it matches
    (:func:`_matched_to`). This is the Holm family: pairs of arms no claim asks about (two
    gates, or ``none`` against the control) are not tested and do not dilute it."""
    arms = {x for x in src["per_seed"] if src["per_seed"][x]}
    out = []
    for gate in _gate_arms(src):
        if gate not in arms:
            continue
        out += [(UNGATED, gate)] if UNGATED in arms else []
        out += [(MATCHED, gate)] if MATCHED in arms and _matched_to(src, gate) else []
    return out


def claim_comparisons(src: dict) -> list[dict]:
    """:func:`siggate.stats.compared_pairs` over :func:`claim_questions` (computed once per
    results set)."""
    if "_comparisons" not in src:
        from ..stats import compared_pairs

        src["_comparisons"] = compared_pairs(src["per_seed"], claim_questions(src), src["hib"])
    return src["_comparisons"]


def _pair(src: dict, a: str, b: str) -> dict | None:
    return next((c for c in claim_comparisons(src) if (c["a"], c["b"]) == (a, b)), None)


def _oriented(c: dict, a: str, b: str) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of ``b - a`` from a pair that holds ``c["b"] - c["a"]``."""
    sign = 1.0 if c["b"] == b else -1.0
    mean, lo, hi = (sign * x for x in (c["diff_mean"], *c["ci95"]))
    return mean, min(lo, hi), max(lo, hi)


def _significant(c: dict, p_key: str = "p_holm") -> bool:
    """Whether the pair's (Holm-adjusted) p under ``p_key`` rejects at :data:`ALPHA`."""
    p = c.get(p_key)
    return p is not None and math.isfinite(p) and p < ALPHA


def _rejects(c: dict, p_key: str, side: int) -> bool:
    """The recorded (Wilcoxon) test rejects at :data:`ALPHA` over at least two pairs, toward
    ``side`` (-1: lower, 1: higher) by both the mean difference and the signed ranks
    (``wilcoxon_sign``, :func:`siggate.stats.rank_sign`; a record without it, the mean alone).
    Where the two disagree (a few large differences against many small ones), neither side is
    shown."""
    if not (_significant(c, p_key) and c.get("n_pairs", 0) >= 2):
        return False
    return c["diff_mean"] * side > 0 and c.get("wilcoxon_sign", side) == side


def rejects_lower(c: dict, p_key: str = "p_holm_wilcoxon") -> bool:
    """The gate studies' "holds" (lower is better in both): the recorded test rejects at
    :data:`ALPHA` over at least two pairs, and the difference (gate - none) is negative by its
    mean and by the test's signed ranks (:func:`_rejects`)."""
    return _rejects(c, p_key, -1)


def largest_gain(c: dict, a: str, b: str, hib: bool) -> tuple[float, float]:
    """The largest improvement of ``b`` over ``a`` inside the pair's 95% t interval, and
    that gain relative to ``a``'s mean (a fraction). An improvement is a lower value when
    lower is better. Negative: the interval holds no gain at all."""
    _, lo, hi = _oriented(c, a, b)
    gain = hi if hib else -lo
    base = c["mean_a"] if c["a"] == a else c["mean_b"]
    return gain, (gain / abs(base) if base and math.isfinite(base) else float("nan"))


def _outcome(c: dict, a: str, b: str, hib: bool) -> tuple[bool, bool]:
    """``(b significantly better, b significantly worse)`` than ``a``: Holm-adjusted paired t
    p < 0.05 over the results set's claim questions (:func:`claim_questions`)."""
    mean = _oriented(c, a, b)[0]
    return _significant(c) and (mean > 0) == hib, _significant(c) and (mean > 0) != hib


def _hidden_gain(c: dict, a: str, b: str, hib: bool, digits: int = 4, subject: str = "the interval",
                 unit: str = "") -> str:
    """What the 95% t interval of ``b - a`` (not adjusted for multiple comparisons) says
    about a gain of ``b`` that the Holm-adjusted test did not show."""
    _, lo, hi = _oriented(c, a, b)
    gain, rel = largest_gain(c, a, b, hib)
    if gain <= 0:
        return f"{subject} rules out any gain"
    if (lo > 0) if hib else (hi < 0):
        return ("the unadjusted interval holds only gains, but the Holm correction over the set's claim "
                "questions withholds the win")
    share = f" ({fmt(100 * rel, 2)}% of `{a}`'s mean)" if math.isfinite(rel) else ""
    return f"{subject} rules out a {unit + ' ' if unit else ''}gain above {fmt(gain, digits)}{share}"


def _gain_text(c: dict, a: str, b: str, hib: bool) -> tuple[str, bool, bool]:
    """``(text, b significantly better, b significantly worse)`` for ``b`` against ``a``
    (:func:`_outcome`). Without a significant win the text also says how large a gain the
    95% interval leaves room for: the gain that could be hiding at this number of seeds."""
    mean, lo, hi = _oriented(c, a, b)
    if c["n_pairs"] < 2:  # no spread between pairs yet: no interval, no test
        return f"`{b}` − `{a}` = {fmt(mean)} ({c['n_pairs']} pair: no interval or test yet)", False, False
    win, loss = _outcome(c, a, b, hib)
    text = (f"`{b}` − `{a}` = {fmt(mean)} (95% CI {fmt(lo)} to {fmt(hi)}, Holm p = {p_text(c['p_holm'], missing='nan')}, "
            f"{c['n_pairs']} pairs)")
    tail = _no_win_text(c, a, b, hib) if not win else ""
    return text + (f"; {tail}" if tail else ""), win, loss


#: what a comparison whose pairs all differ by one amount says in place of its interval
UNDEFINED_T = "every pair differs by the same amount, so the paired t-test is undefined"
#: ... and where every pair scores the same
EQUAL_PAIRS = "every pair scores the same, so the paired t-test is undefined"


def _no_win_text(c: dict, a: str, b: str, hib: bool, **kw) -> str:
    """After a comparison without a significant win of ``b``: :func:`_hidden_gain`, or where every
    pair differs by one amount (up to rounding) :data:`UNDEFINED_T`, a point and no interval (it
    was told from the differences' unrounded std: float noise gave a Holm correction that
    "withholds the win", and no noise no word); ``""`` without two pairs."""
    if c["n_pairs"] < 2:
        return ""
    if not math.isfinite(c["p_paired_t"]):
        return EQUAL_PAIRS if c.get("ties") == c["n_pairs"] else UNDEFINED_T
    return _hidden_gain(c, a, b, hib, **kw)


def _test_verdict(win: bool, loss: bool, full: bool, interim: bool = False) -> str:
    """A claim's verdict from its own test: **holds** only when the test rejects at p < 0.05
    in the claimed direction (:data:`INTERIM` while its runs are still coming in, ``interim``);
    a rejection the other way at the full protocol contradicts it; no rejection is "not
    supported" at the full protocol and "not at this budget" before."""
    if win:
        return INTERIM if interim else HOLDS
    if not full:
        return BUDGET
    if interim:  # the planned runs are not all in: no final verdict either way
        return INTERIM_AGAINST if loss else BUDGET
    return CONTRADICTED if loss else NOT_SUPPORTED


def _matched_to(src: dict, gate: str) -> bool:
    """Whether the matched control has ``gate``'s parameter count (within 1%); the control
    is sized to the elementwise gate, so a headwise arm is not matched by it. Without
    parameter counts in the file, only the elementwise arm counts as matched."""
    p = src["params"]
    if p.get(MATCHED) and p.get(gate):
        return abs(p[MATCHED] - p[gate]) <= 0.01 * p[gate]
    return gate == GATED


def answer(src: dict) -> str | None:
    """The plain answer to "does the gate help?" from one results set that has the
    parameter-matched control (a study designed to answer it): which gates beat GraphGPS at
    Holm-adjusted p < 0.05, whether those wins survive the matched control (for the gates it
    matches), and, for a gate not shown to win, the largest gain its 95% interval leaves
    room for."""
    finite = {arm: sum(math.isfinite(v) for v in s.values()) for arm, s in src["per_seed"].items()}
    if finite.get(MATCHED, 0) < 2 or finite.get(UNGATED, 0) < 2:
        return None
    parts = []
    for gate in _gate_arms(src):
        c = _pair(src, UNGATED, gate)
        if c is None or c["n_pairs"] < 2:
            continue
        win, loss = _outcome(c, UNGATED, gate, src["hib"])
        p = f"Holm p = {p_text(c['p_holm'], 2, missing='nan')}"
        if win:
            m = _pair(src, MATCHED, gate) if _matched_to(src, gate) else None
            if m is None:
                fate = f"has no control matched to its {src['params'].get(gate, '?')} parameters"
            elif m["n_pairs"] < 2:
                fate = f"cannot be tested against `{MATCHED}` yet ({m['n_pairs']} pair)"
            else:
                m_win, m_loss = _outcome(m, MATCHED, gate, src["hib"])
                fate = ("still beats" if m_win else "is significantly worse than" if m_loss else "is not shown to beat")
                fate += f" `{MATCHED}` (Holm p = {p_text(m['p_holm'], 2, missing='nan')}), the ungated model of its parameter count"
            parts.append(f"`{gate}` beats `{UNGATED}` ({p}) and {fate}")
            continue
        verb = "is significantly worse than" if loss else "is not shown to beat"
        tail = _no_win_text(c, UNGATED, gate, src["hib"], digits=2, subject="its 95% interval", unit=src["metric"])
        parts.append(f"`{gate}` {verb} `{UNGATED}` ({p})" + (f": {tail}" if tail else ""))
    if not parts:
        return None
    n = min(v for v in finite.values() if v)
    return (f"**Does the gate help on {src['dataset']}?** (`{src['path']}`, {src['epochs']} of {src['protocol']} "
            f"epochs, at least {n} seeds per arm{'; ' + src['deviation'] if src['deviation'] else ''}; wins are "
            f"judged at Holm-adjusted paired t p < 0.05 over the {len(claim_questions(src))} claim questions "
            f"(each gate against `{UNGATED}` and against its matched control), the intervals are 95% t "
            f"intervals, unadjusted.) " + "; ".join(parts) + "."
            + ("" if _full(src) else " A gain that needs the full protocol is not excluded.")
            + (f" Interim: {src['missing']} planned run(s) still to come, and every snapshot tests again, so these "
               "are readings, not verdicts." if src.get("missing") else ""))


def _gate_arms(src: dict) -> list[str]:
    """The gated arms of a results set, the paper's elementwise gate first."""
    arms = [a for a in src["per_seed"] if a != UNGATED and not a.startswith(UNGATED + "@")]
    return sorted(arms, key=lambda a: (a != GATED, a))


def accuracy_verdict(scored: list[float], target: float, hib: bool, full: bool) -> tuple[str, str]:
    """``(verdict, test text)`` of a headline figure: the one-sided one-sample t-test over the
    seeds' scores that the mean is within :data:`ACCURACY_TOLERANCE` of the paper's ``target``
    (at least ``target * (1 - tol)`` where higher is better, at most ``target * (1 + tol)``
    where lower is): it holds when that test rejects at p < 0.05; the test of the other side
    rejecting at the full protocol contradicts it; else not supported at the full protocol and
    not at this budget before. One seed, or seeds that all score the same, make no test. (A
    mean inside the tolerance held, from one seed too.)"""
    bound = target * (1 - ACCURACY_TOLERANCE) if hib else target * (1 + ACCURACY_TOLERANCE)
    t = report.one_sided_tests(scored, bound)
    p_in, p_out = (t["t_up"], t["t_down"]) if hib else (t["t_down"], t["t_up"])
    side = ">=" if hib else "<="
    if p_in is None:
        why = "1 seed" if len(scored) < 2 else "the seeds all score the same"
        test = f"no one-sided t-test of mean {side} {fmt(bound)} ({why})"
    else:
        test = (f"one-sided t-test of mean {side} {fmt(bound)} (the paper's {fmt(target)} "
                f"{'-' if hib else '+'} {100 * ACCURACY_TOLERANCE:g}%): p = {p_text(p_in, missing='nan')}")
    win, loss = p_in is not None and p_in < ALPHA, p_out is not None and p_out < ALPHA
    return _test_verdict(win, loss, full and p_in is not None), test


def accuracy_rows(sources: list[dict]) -> list[dict]:
    """Rows for the accuracy claims: headline figures, each gate's win over GraphGPS, and
    whether a win survives the parameter-matched control."""
    rows = []
    for src in sources:
        ds, full = src["dataset"], _full(src)
        where = f"`{src['path']}`"
        if ds in PAPER_ACCURACY and src["per_seed"].get(GATED):
            target, text = PAPER_ACCURACY[ds]
            scored = [float(v) for v in src["per_seed"][GATED].values() if v is not None and math.isfinite(float(v))]
            if not scored:  # no seed scored (every one diverged): nothing to compare with the paper's figure
                continue
            mean, std = mean_std(scored)  # the seeds the budget counts: a run without a score has no say
            spread = f"± {fmt(std)} (mean ± std)" if len(scored) >= 2 else "(1 seed, no spread)"
            verdict, test = accuracy_verdict(scored, target, src["hib"], full)
            rows.append({"claim": text, "measured": f"`{GATED}` test {src['metric']} {fmt(mean)} {spread}; {test}",
                         "budget": _budget(src, len(scored)),
                         "source": where,
                         "verdict": verdict})
        for gate in _gate_arms(src):
            for control, claim in ((UNGATED, f"the {gate} gate beats GraphGPS on {ds} (p < 0.05)"),
                                   (MATCHED, f"on {ds}, the {gate} gate's gain comes from gating, not from the "
                                             f"extra parameters (against `{MATCHED}`)")):
                if control == MATCHED and not _matched_to(src, gate):
                    continue
                c = _pair(src, control, gate)
                if c is None:
                    continue
                text, win, loss = _gain_text(c, control, gate, src["hib"])
                if win and src.get("missing"):  # tested at every snapshot while its runs come in
                    text += f"; {src['missing']} planned run(s) still to come"
                rows.append({"claim": claim, "measured": text, "budget": _budget(src, c["n_pairs"]), "source": where,
                             "verdict": _test_verdict(win, loss, full and c["n_pairs"] >= 2, bool(src.get("missing")))})
    return rows


def _analysis_budget(name: str, data: dict) -> str:
    if name in ("smoothing", "entropy", "lrsweep"):
        proto = data.get("protocol_epochs") or data.get("meta", {}).get("config", {}).get("train", {}).get("epochs")
        seeds = data.get("seeds")
        return f"{data.get('epochs')} of {proto} epochs" + (f", seeds {seeds}" if seeds is not None else "")
    if name == "overhead":
        return f"{data.get('threads')} thread(s); parameters are exact"
    if name == "rank":  # (--seeds: several models, --epochs 0: at their initialisation)
        n, trained = len(data.get("model_source") or [None]), data.get("trained", True)
        return ("one trained checkpoint" if n == 1 and trained else
                f"{n} {'trained' if trained else 'untrained'} model{'s' if n > 1 else ''}") + " (see measured)"
    return "synthetic draws, random weights"


def mechanism_rows(found: dict) -> list[dict]:
    """Rows for the mechanism claims, judged by :mod:`siggate.analysis.report`'s rules."""
    to3 = {report.HOLDS: HOLDS, report.INCONCLUSIVE: BUDGET, report.NOT_SUPPORTED: NOT_SUPPORTED,
           report.FAILS: CONTRADICTED}
    judges = {"synthetic": report.verdict_synthetic, "rank": report.verdict_rank,
              "smoothing": report.verdict_smoothing, "entropy": report.verdict_entropy, "lrsweep": report.verdict_lr,
              "overhead": report.verdict_overhead}
    rows = []
    for name, judge in judges.items():
        for path, data in found.get(name, []):
            with report.read_as(path, f"analyze {name}"):
                out = judge(data)
            # the rules already say "inconclusive" where a short budget cannot decide
            for r in out if isinstance(out, list) else [out]:
                rows.append({"claim": r["claim"], "measured": r["measured"], "budget": _analysis_budget(name, data),
                             "source": f"`{path}`", "verdict": to3[r["verdict"]]})
    return rows


def _p_text(p) -> str:
    return p_text(p, missing="none")


def _study_verdict(c: dict, p_key: str, full: bool) -> str:
    """A gate study's verdict from the test it records (``p_key``, Holm-adjusted): a lower mean
    (lower is better in both studies) that the test rejects holds (:func:`rejects_lower`) once the
    study is ``full``, and is :data:`INTERIM` before; fewer than two pairs, or no p-value (every
    difference zero), decide nothing, whatever the budget."""
    p = c.get(p_key)
    decided = c.get("n_pairs", 0) >= 2 and p is not None and math.isfinite(p)
    return _test_verdict(rejects_lower(c, p_key), _rejects(c, p_key, 1), full and decided, interim=not full)


def _study_difference(c: dict, what: str, over: str, p_key: str = "p_holm_wilcoxon") -> str:
    """``b - a`` of a gate study's pair with its interval, the test over ``over`` and its p; with
    fewer than two pairs, that there is no interval or test yet."""
    if c.get("n_pairs", 0) < 2:
        return f"{what} = {fmt(c.get('diff_mean'))} ({c.get('n_pairs', 0)} pair(s): no interval or test yet"
    lo, hi = c["ci95"]
    return (f"{what} = {fmt(c['diff_mean'])} (95% CI {fmt(lo)} to {fmt(hi)}; Wilcoxon over {over}, Holm p = "
            f"{_p_text(c.get(p_key))}")


def moleculeace_gate_rows(path: Path, study: dict, key: str = "gate_study") -> list[dict]:
    """Rows for a MoleculeACE study of the harness's ``results.json`` (``key``: ``gate_study``,
    the from-scratch gate study, or another study the harness records, ``run.py``'s ``STUDIES``):
    each arm against the study's base, mean RMSE difference over the targets both ran (each
    target's mean over the seeds both ran), in the words of the claim and budget the study
    records (a file written before it recorded them: the from-scratch gate study's). A file
    written before the study recorded its seeds and completeness is never full protocol, and
    says so."""
    rows = []
    for c in study.get("tests") or []:
        n, seeds = c["n_pairs"], c.get("run_seeds")
        if c.get("complete") and "p_holm_wilcoxon" not in c:  # (a complete study read 'Holm p = none', undecided)
            raise KeyError("p_holm_wilcoxon")
        gate = c["arm"].removeprefix("gate-")
        measured = _study_difference(c, f"`{c['arm']}` − `{c['base']}` test RMSE", "targets")
        measured += (f"; lower on {c['wins']} of {n} targets" if n >= 2 else "") + f"; its `{key}`)"
        planned = study.get("planned_targets")
        if "complete" not in c:
            state = " (completeness not recorded: rerun `python benchmarks/moleculeace/run.py --report`)"
        else:
            state = "" if c["complete"] else " (incomplete: runs resuming)"
        budget = (study.get("budget", "the csv recipe's full schedule, attention on, from scratch") + f"; {n}"
                  + (f" of {planned}" if planned else "") + " targets"
                  + (f", seed(s) {','.join(map(str, seeds))}" if seeds else "") + state)
        claim = c.get("claim") or f"the {gate} gate beats GraphGPS on MoleculeACE from scratch (20 public targets, p < 0.05)"
        rows.append({"claim": claim,
                     "measured": measured, "budget": budget, "source": f"`{path}`",
                     "verdict": _study_verdict(c, "p_holm_wilcoxon", bool(c.get("complete")))})
    return rows


def pretrain_gate_rows(path: Path, data: dict) -> list[dict]:
    """Rows for the pretraining pair (``benchmarks/pretrain_gate/compare.py``'s ``results.json``):
    each gated pretraining run against ``gate=none``, paired over the descriptors; seconds and
    parameters side by side."""
    runs = {r["label"]: r for r in data.get("runs") or []}
    rows = []
    for c in data.get("comparisons") or []:
        a, b = runs.get(c["a"], {}), runs.get(c["b"], {})
        cost = ""
        if a.get("params") and b.get("params") and a.get("train_seconds") and b.get("train_seconds"):
            cost = (f"; {b['params']:,} vs {a['params']:,} parameters, {fmt(b['train_seconds'], 4)} vs "
                    f"{fmt(a['train_seconds'], 4)} training s")
        corpus = data.get("corpus") or {}
        rows.append({"claim": f"the {b.get('gate', c['b'])} gate lowers the validation MAE of descriptor pretraining "
                              "(p < 0.05)",
                     "measured": _study_difference(c, f"`{c['b']}` − `{c['a']}` val MAE",
                                                   f"{c['n_pairs']} descriptors") + f"){cost}; one pretraining run "
                                 "per arm: the test compares two trained models over their descriptors, not runs",
                     "budget": f"{b.get('epochs', '?')} epochs on {corpus.get('molecules', '?')} "
                               f"{corpus.get('source') or 'corpus'} molecules, seed {corpus.get('seed', '?')}",
                     "source": f"`{path}`",
                     # one run per arm: a rejection over descriptors is not one over runs (seeds), so it decides
                     # nothing either way; more runs per arm would be the budget that could
                     "verdict": BUDGET})
    return rows


#: the ``kind`` a study in a results file records, which :func:`study_rows` reads it by: a paired
#: study of MoleculeACE recipes (``benchmarks/moleculeace/run.py``'s ``STUDIES``, one mapping per
#: study in its ``results.json``), and the pretraining pair (``benchmarks/pretrain_gate/compare.py``,
#: the whole file)
MOLECULEACE_STUDY = "moleculeace-paired-study"
PRETRAIN_GATE = "pretrain-gate-pair"


def study_rows(path: Path, data: dict) -> list[dict]:
    """The rows of the gate studies a results file holds (none for other files), found by their
    ``kind`` (:data:`MOLECULEACE_STUDY`, :data:`PRETRAIN_GATE`); a MoleculeACE ``gate_study``
    without one is read too: harnesses older than the kind still write it (the lanes run them at
    pinned commits into ``.study/moleculeace-results.json``, whose rows ``lanes.sh snapshot``
    imports into the committed file with this checkout's harness; the copy keeps the old section)."""
    rows = []
    study = data.get("gate_study")  # None: the harness has no test yet; another shape lost its row without a word
    if study is not None and not isinstance(study, dict):
        kind = {str: "string", list: "array", bool: "boolean", int: "number", float: "number"}.get(type(study), "value")
        raise TypeError(f"its gate_study is a JSON {kind}, not an object (or null)")
    for key, study in data.items():
        if isinstance(study, dict) and (study.get("kind") == MOLECULEACE_STUDY or key == "gate_study"):
            rows += moleculeace_gate_rows(path, study, key)
    if data.get("kind") == PRETRAIN_GATE:
        rows += pretrain_gate_rows(path, data)
    if isinstance(data.get("mad"), dict):
        rows += campaign_mad_rows(path, data)
    return rows


def campaign_mad_rows(path: Path, data: dict) -> list[dict]:
    """The smoothing claims judged on a ``siggate compare`` campaign's last-layer MAD (its
    ``mad``: each trained model at its best epoch), by the smoothing analysis's own rules
    (:func:`report.verdict_smoothing`) over the campaign's one depth, ``model.layers``: one
    (depth, seed) pair per seed that both arms finished, gain ``(MAD_gated - MAD_none) / MAD_none``.
    Only the gated arms are judged, each against ``none`` (an ungated arm such as the matched
    control ``none@matched-ffn`` is no gate, and a comparison listing a gate first has ``none``
    as its claims' baseline all the same).
    One depth does not cover the claimed 4-16, so these rows never read "holds"; a rejection in
    the claim's direction is still named in the measured text. Runs still to come (missing or
    failed, as for the accuracy rows) make any reading interim."""
    mad, config = data["mad"], data.get("config") or {}
    # the claims are of the gate against no gate: the ungated arm is the baseline whichever arm compare listed
    # first, and the matched control (none@matched-ffn, ungated too) is no gate to judge
    base, per_seed = UNGATED, mad.get("per_seed") or {}
    depth = (config.get("model") or {}).get("layers")
    if base not in per_seed or depth is None:
        return []
    src = next(iter(comparison_sources(path, data)), None)
    if src is None:  # no scored runs: no pairs either
        return []
    to_come = src["missing"]
    rows = []
    for gate in (g for g in per_seed if g != base and not g.startswith(UNGATED + "@")):
        seeds = [s for s in per_seed[gate] if s in per_seed[base]
                 and per_seed[gate][s] is not None and per_seed[base][s] is not None]
        if not seeds:
            continue
        gated, ungated = [float(per_seed[gate][s]) for s in seeds], [float(per_seed[base][s]) for s in seeds]
        pairs = [{"depth": depth, "seed": s, "gain": (v - b) / b if b > 0 else None}
                 for s, v, b in zip(seeds, gated, ungated)]
        mean_base = sum(ungated) / len(ungated)
        judged = report.verdict_smoothing({
            "primary_gate": gate, "paired_gains": {gate: pairs}, "seeds": [int(s) for s in seeds],
            "relative_mad_gain": {gate: {str(depth): (sum(gated) / len(gated) - mean_base) / mean_base
                                         if mean_base > 0 else None}},
            "epochs": data.get("epochs"), "protocol_epochs": src["protocol"],
        })
        still = f"; {to_come} planned run(s) still to come" if to_come else ""
        for r in judged:
            rows.append({"claim": r["claim"],
                         "measured": f"{r['measured']}; MAD of each trained model at its best epoch "
                                     f"({mad.get('checkpoint', BEST)}, {mad.get('split', 'val')} split){still}",
                         "budget": _budget(src, len(seeds)), "source": f"`{path}`",
                         # the smoothing rules' reading as the accuracy rows' verdict words, interim while runs come
                         "verdict": _test_verdict(r["verdict"] == report.HOLDS, r["verdict"] == report.FAILS,
                                                  r["verdict"] != report.INCONCLUSIVE, bool(to_come))})
    return rows


def claims_table(dirs) -> tuple[str, list[dict]]:
    """The Markdown claims table for the result files under ``dirs`` followed by the
    :func:`answer` of each results set with a matched control, and the table's rows."""
    sources, paths = [], []
    for d in dirs:
        d = Path(d)
        paths += [d] if d.is_file() else sorted(p for p in d.rglob("results.json") if not report.in_runs(p, d))
    first = {}
    for p in paths:  # a folder and a file in it: once, where it first comes, as it was named
        first.setdefault(p.resolve(), p)
    paths = list(first.values())
    studies = []
    for p in paths:
        try:
            data = read_json(p)
        except (OSError, ValueError) as exc:
            raise CLIError(f"{p}: not a results file this siggate reads ({type(exc).__name__}: {exc}); name the "
                           "folders or results.json files of siggate compare or analyze") from None
        with report.read_as(p, "compare or study"):
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            sources += comparison_sources(p, data)
            studies += study_rows(p, data)
    with report.read_as(paths, "compare or study"):
        accurate = accuracy_rows(sources)
        answers = [a for a in map(answer, sources) if a]
    rows = accurate + studies + mechanism_rows(report.find_results([d for d in dirs if Path(d).is_dir()]))
    md = table(["paper's claim", "what we measured", "budget", "source", "verdict"],
               [[r["claim"], r["measured"], r["budget"], r["source"], f"**{r['verdict']}**"] for r in rows],
               markdown=True)
    return "\n\n".join([md, *answers]), rows


#: how every claims table begins (a file at --out that does not is not replaced)
TABLE_START = "| paper's claim |"


def replace_between_markers(text: str, block: str) -> str:
    """``text`` with the part between :data:`START` and :data:`END` replaced by ``block``."""
    if START not in text or END not in text or text.index(START) > text.index(END):
        raise ValueError(f"the file has no '{START}' ... '{END}' section to fill")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{block.strip()}\n{END}{tail}"



def main(args) -> int:
    for flag, dest in (("--out", args.out), ("--readme", args.readme)):
        if dest:
            check_out_file(dest, flag, "the claims table", "CLAIMS.md" if flag == "--out" else "README.md",
                           starts=TABLE_START if flag == "--out" else None)
    if args.readme and not Path(args.readme).is_file():
        raise CLIError(f"--readme {args.readme}: no such file; give the Markdown file whose claims markers the table "
                       "fills")
    md, rows = claims_table(args.dirs)
    if not rows:
        raise FileNotFoundError(f"no compare, analysis or gate-study results under {', '.join(args.dirs)}")
    readme = None
    if args.readme:  # its markers checked before --out is written (a refusal left --out written)
        try:
            readme = replace_between_markers(Path(args.readme).read_text(), md)
        except ValueError as exc:
            raise CLIError(f"--readme {args.readme}: {exc}; add the two markers where the table goes") from None
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(md + "\n")
    if readme is not None:
        Path(args.readme).write_text(readme)
    print(table(["claim", "verdict"], [[r["claim"], r["verdict"]] for r in rows]))
    for text in md.split("\n\n")[1:]:  # the answers under the table
        print("\n" + text.replace("**", "").replace("`", ""))
    return 0
