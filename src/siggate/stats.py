"""Statistics for comparing a variant against a baseline across random seeds.

Per-seed results are plain mappings ``{seed: score}``. Comparisons are made on
the seeds both runs share (paired design: same seed = same data split /
initialisation stream); seeds where either score is ``NaN`` are dropped with a
note. Every test returns ``nan`` rather than raising when it is undefined, and
the reason is recorded in the result's ``notes`` list.
"""

from __future__ import annotations

import math
import warnings
from typing import Dict, Hashable, Iterable, List, Mapping, Tuple, Union

import numpy as np
from scipy import stats as _st

__all__ = ["mean_std", "compare_paired", "summarize", "paired_effect", "holm", "wilcoxon_min_p",
           "all_pairs", "compared_pairs", "p_text", "rank_sign", "BOOTSTRAP_RESAMPLES"]

#: resamples of the paired bootstrap (percentile interval, fixed seed: the interval is reproducible)
BOOTSTRAP_RESAMPLES = 10_000

Number = Union[int, float]


def _values(values: Union[Mapping[Hashable, Number], Iterable[Number]]) -> np.ndarray:
    if isinstance(values, Mapping):
        values = list(values.values())
    return np.asarray(list(values), dtype=np.float64).reshape(-1)


def p_text(p, digits: int = 3, missing: str = "n/a", alpha: float = 0.05) -> str:
    """A p-value in ``digits`` significant digits, with more where fewer would round it across
    ``alpha``: 0.049961 reads "0.04996", not "0.05" beside a verdict that it is below 0.05.
    ``missing`` for ``None`` and non-finite values."""
    if p is None or not math.isfinite(float(p)):
        return missing
    p = float(p)
    text = f"{p:.{digits}g}"
    while p < alpha <= float(text) and digits < 12:
        digits += 1
        text = f"{p:.{digits}g}"
    return text


def mean_std(values: Union[Mapping[Hashable, Number], Iterable[Number]]) -> Tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``).

    ``values`` may be a sequence/array or a ``{seed: value}`` mapping. For one
    value the std is ``0.0``; for no values both are ``nan``. ``NaN`` entries
    propagate (they are not dropped).
    """
    v = _values(values)
    n = v.size
    if n == 0:
        return float("nan"), float("nan")
    mean = float(np.mean(v))
    std = float(np.std(v, ddof=1)) if n > 1 else 0.0
    return mean, std


def _f(x) -> float:
    return float(x)


def _finite_score(x) -> bool:
    """Whether ``x`` is a finite score: a null (JSON's NaN, as results files write it) is none."""
    return x is not None and math.isfinite(float(x))


def _common_finite_seeds(a: Mapping[Hashable, Number], b: Mapping[Hashable, Number], notes: List[str]) -> list:
    """Seeds present in both with finite scores (sorted when sortable); notes what was dropped."""
    common = set(a.keys()) & set(b.keys())
    only = (set(a.keys()) | set(b.keys())) - common
    if only:
        notes.append(f"{len(only)} seed(s) present in only one variant were ignored")
    try:
        seeds = sorted(common)
    except TypeError:
        seeds = list(common)
    finite = [s for s in seeds if _finite_score(a[s]) and _finite_score(b[s])]
    if len(finite) < len(seeds):
        notes.append(f"{len(seeds) - len(finite)} seed(s) with non-finite scores were dropped")
    return finite


#: values within this fraction of the largest magnitude involved are one value: what float
#: subtraction leaves of equal differences (71.9 - 71.3 and 72.1 - 71.5 differ in the 14th digit)
IDENTICAL_RTOL = 1e-9


def _all_one(values: np.ndarray, scale: np.ndarray) -> bool:
    """Whether ``values`` are one value up to :data:`IDENTICAL_RTOL` of the magnitudes they come
    from (``scale``, per value): each against the first, at the larger of the two scales."""
    return bool(np.all(np.abs(values - values[0]) <= IDENTICAL_RTOL * np.maximum(scale, scale[0])))


def rounded_difference(va: np.ndarray, vb: np.ndarray) -> np.ndarray:
    """``vb - va`` per pair, with differences at float rounding (:data:`IDENTICAL_RTOL` of the
    pair's scale) made 0, and non-zero magnitudes equal up to rounding (of the smaller of the two
    pairs' scales) made one, the smallest of a run of them: the one reading of "equal" for the tests,
    the ties, the Wilcoxon n and its ranks. Scores of two decimals or percentages of k/N differ
    by equal amounts in decimals that float subtraction leaves unequal (0.01999999999999602 and
    0.020000000000010232): Wilcoxon ranked them apart instead of tied, and its p-value moved, across
    0.05 too."""
    va, vb = np.asarray(va, dtype=np.float64), np.asarray(vb, dtype=np.float64)
    scale = np.maximum(np.abs(va), np.abs(vb))  # per pair: one seed's large score is not every seed's scale
    diff = vb - va
    diff = np.where(np.abs(diff) <= IDENTICAL_RTOL * scale, 0.0, diff)
    if diff.ndim != 1 or diff.size < 2:
        return diff
    size = np.abs(diff)
    order = np.argsort(size, kind="stable")
    out = diff.copy()
    for before, here in zip(order[:-1], order[1:]):
        # each pair's own rule decides its zeros, and the smaller scale decides two pairs' tie: a pair of large
        # scores must not tie another pair's real difference (scores near 1e6 beside scores near 1)
        if size[before] > 0 and size[here] - size[before] <= IDENTICAL_RTOL * min(scale[here], scale[before]):
            size[here] = size[before]  # (the run's smallest, carried along it)
            out[here] = np.sign(diff[here]) * size[here]
    return out


def _paired_tests(va: np.ndarray, vb: np.ndarray, res: Dict[str, object], notes: List[str]) -> None:
    """Fill ``p_paired_t``, ``p_wilcoxon`` and ``p_welch`` of ``res`` (``n >= 2`` pairs),
    noting each test that is undefined for these samples. Differences (and samples) equal up to
    float rounding (:data:`IDENTICAL_RTOL`) count as equal: a constant shift is undefined for
    the t-test however its decimals round, not "significant" at p = 1e-70."""
    scale = np.maximum(np.abs(va), np.abs(vb))
    diff = rounded_difference(va, vb)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # Paired t-test.
        if _all_one(diff, scale):
            notes.append("all differences are identical (zero variance): paired t-test undefined (nan)")
        else:
            res["p_paired_t"] = _f(_st.ttest_rel(vb, va).pvalue)

        # Wilcoxon signed-rank (of the differences, rounding taken as zero).
        nz = int(np.count_nonzero(diff))
        if nz == 0:
            notes.append("all differences are zero: Wilcoxon test undefined (nan)")
        elif nz < 2:
            notes.append("fewer than 2 non-zero differences: Wilcoxon test undefined (nan)")
        else:
            res["p_wilcoxon"] = _f(_st.wilcoxon(diff).pvalue)
            res["wilcoxon_sign"] = rank_sign(diff)

        # Welch's unequal-variance t-test.
        if _all_one(va, np.abs(va)) and _all_one(vb, np.abs(vb)):
            notes.append("both samples have zero variance: Welch t-test undefined (nan)")
        else:
            res["p_welch"] = _f(_st.ttest_ind(vb, va, equal_var=False).pvalue)


def rank_sign(diff) -> int:
    """The side the Wilcoxon signed-rank test leans to: the sign of ``W+ - W-``, the sums of the
    ranks of ``|diff|`` (average ranks for ties, zeros dropped) over the positive and the negative
    differences. A two-sided rejection supports this direction; the mean difference can point the
    other way (a few large differences against many small ones), and then neither side is shown."""
    d = np.asarray(diff, dtype=np.float64)
    d = d[d != 0]
    if d.size == 0:
        return 0
    ranks = _st.rankdata(np.abs(d))
    return int(np.sign(ranks[d > 0].sum() - ranks[d < 0].sum()))


# About 85 lines, 40 of them the docstring that defines every returned key.
def compare_paired(
    a: Mapping[Hashable, Number],
    b: Mapping[Hashable, Number],
    higher_is_better: bool,
) -> Dict[str, object]:
    """Compare variant ``b`` against baseline ``a`` on their common seeds.

    Args:
        a: ``{seed: score}`` of the baseline.
        b: ``{seed: score}`` of the variant.
        higher_is_better: metric direction (``True`` for ROC-AUC / AP,
            ``False`` for MAE).

    Returns:
        dict with keys

        * ``n_pairs``: number of common seeds with finite scores in both.
        * ``seeds``: those seeds (sorted when sortable).
        * ``mean_a``, ``mean_b``: means over the common seeds.
        * ``mean_diff``: ``mean(b - a)``; ``std_diff``: its sample std
          (``ddof=1``, ``0.0`` for one pair, ``nan`` for none).
        * ``p_paired_t``: two-sided ``scipy.stats.ttest_rel(b, a)`` p-value.
        * ``p_wilcoxon``: two-sided ``scipy.stats.wilcoxon(b - a)`` p-value
          (default ``zero_method="wilcox"``: zero differences are dropped);
          ``nan`` with a note when fewer than 2 non-zero differences.
        * ``wilcoxon_sign``: :func:`rank_sign` of ``b - a`` (-1, 0 or 1), the
          direction a Wilcoxon rejection supports; absent where the test is
          undefined.
        * ``p_welch``: two-sided ``scipy.stats.ttest_ind(b, a, equal_var=False)``
          p-value on the same common-seed samples.
        * ``better``: ``"b"``, ``"a"`` or ``"tie"`` - which variant has the
          better mean in the metric's direction (``"tie"`` also when no pairs).
        * ``wins`` / ``losses`` / ``ties``: number of seeds where ``b`` is
          strictly better / strictly worse / equal to ``a``.
        * ``higher_is_better``: echoed.
        * ``notes``: list of human-readable notes on undefined statistics or
          dropped seeds.

    The p-values are direction-free (two-sided); a t-test whose differences
    all coincide (zero variance) yields ``nan`` with a note.
    """
    notes: List[str] = []
    seeds = _common_finite_seeds(a, b, notes)
    va = np.array([float(a[s]) for s in seeds], dtype=np.float64)
    vb = np.array([float(b[s]) for s in seeds], dtype=np.float64)
    diff = vb - va
    n = len(seeds)
    nan = float("nan")

    res: Dict[str, object] = {
        "n_pairs": n,
        "seeds": seeds,
        "mean_a": nan,
        "mean_b": nan,
        "mean_diff": nan,
        "std_diff": nan,
        "p_paired_t": nan,
        "p_wilcoxon": nan,
        "p_welch": nan,
        "better": "tie",
        "wins": 0,
        "losses": 0,
        "ties": 0,
        "higher_is_better": bool(higher_is_better),
        "notes": notes,
    }
    if n == 0:
        notes.append("no common seeds: nothing to compare")
        return res

    res["mean_a"] = float(va.mean())
    res["mean_b"] = float(vb.mean())
    res["mean_diff"], res["std_diff"] = mean_std(diff)

    sign = 1.0 if higher_is_better else -1.0
    gain = sign * rounded_difference(va, vb)  # > 0 where b is better; equal up to rounding: a tie
    res["wins"] = int((gain > 0).sum())
    res["losses"] = int((gain < 0).sum())
    res["ties"] = int((gain == 0).sum())
    mean_gain = sign * (res["mean_b"] - res["mean_a"])
    if abs(mean_gain) <= IDENTICAL_RTOL * max(abs(res["mean_a"]), abs(res["mean_b"])):
        mean_gain = 0.0  # (equal means up to rounding: every seed tied read "a has the better mean")
    res["better"] = "b" if mean_gain > 0 else ("a" if mean_gain < 0 else "tie")

    if n < 2:
        notes.append("n_pairs < 2: paired t, Wilcoxon and Welch tests are undefined (nan)")
        return res

    _paired_tests(va, vb, res, notes)
    return res


def summarize(
    per_seed: Mapping[str, Mapping[Hashable, Number]],
    baseline: str,
    higher_is_better: bool,
) -> Dict[str, object]:
    """Summarise several variants and compare each against ``baseline``.

    Args:
        per_seed: ``{variant: {seed: score}}``.
        baseline: name of the reference variant (must be a key of ``per_seed``).
        higher_is_better: metric direction.

    Returns:
        ``{"baseline": str, "higher_is_better": bool,
        "variants": {variant: {"mean", "std", "n"}},
        "comparisons": {variant: compare_paired(per_seed[baseline], per_seed[variant], ...)}}``
        where ``mean``/``std`` come from :func:`mean_std` over all of the
        variant's seeds and ``comparisons`` covers every variant other than the
        baseline.
    """
    if baseline not in per_seed:
        raise KeyError(f"baseline {baseline!r} not among variants {sorted(per_seed)}")
    variants: Dict[str, Dict[str, float]] = {}
    for name, scores in per_seed.items():
        m, s = mean_std(scores)
        variants[name] = {"mean": m, "std": s, "n": len(scores)}
    comparisons = {
        name: compare_paired(per_seed[baseline], scores, higher_is_better)
        for name, scores in per_seed.items()
        if name != baseline
    }
    return {
        "baseline": baseline,
        "higher_is_better": bool(higher_is_better),
        "variants": variants,
        "comparisons": comparisons,
    }


def wilcoxon_min_p(n: int) -> float:
    """Smallest two-sided p-value the exact Wilcoxon signed-rank test can give with ``n``
    non-zero, untied differences: ``2 / 2**n`` (every difference with the same sign).
    ``n = 5`` gives 0.0625, so at least 6 pairs are needed to reach p < 0.05."""
    return min(1.0, 2.0 / 2.0 ** n) if n > 0 else 1.0


def paired_effect(diff, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> Dict[str, object]:
    """Mean paired difference with 95% intervals and the standardised effect.

    Args:
        diff: the paired differences ``b - a`` (finite values; :func:`rounded_difference` makes
            those at float rounding of the scores 0, as the tests count them).
        resamples: bootstrap resamples.
        seed: seed of the bootstrap's generator (``numpy.random.default_rng``).

    Returns:
        ``diff_mean``; ``ci95``: the t interval ``mean +- t_{0.975, n-1} * sd / sqrt(n)``;
        ``ci95_bootstrap``: the percentile interval (2.5th and 97.5th percentile) of the
        means of ``resamples`` resamples of the pairs with replacement; ``cohen_dz``:
        ``mean / sd`` of the differences (Cohen's d_z, ``sd`` with ``ddof=1``). Undefined
        values are ``nan`` (no pairs; one pair; zero variance for ``cohen_dz``, where the t
        interval collapses to the mean).
    """
    d = np.asarray(list(diff), dtype=np.float64).reshape(-1)
    n = d.size
    nan = float("nan")
    out: Dict[str, object] = {"diff_mean": nan, "ci95": [nan, nan], "ci95_bootstrap": [nan, nan], "cohen_dz": nan}
    if n == 0:
        return out
    mean = float(d.mean())
    out["diff_mean"] = mean
    if n < 2:
        return out
    sd = float(d.std(ddof=1))
    half = float(_st.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    out["ci95"] = [mean - half, mean + half]
    out["cohen_dz"] = mean / sd if sd > IDENTICAL_RTOL * float(np.max(np.abs(d))) else nan  # rounding is no spread
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    out["ci95_bootstrap"] = [float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))]
    return out


def holm(pvalues, untested_count: bool = False) -> List[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    With the ``m`` finite p-values sorted ascending, ``p_(i)`` becomes
    ``max_{j <= i} min(1, (m - j + 1) p_(j))`` (the step-down adjustment, monotone).
    ``nan`` entries stay ``nan``; they do not count in ``m`` unless ``untested_count``: a planned
    question not tested yet (an arm of too few runs) then still counts, as a p-value of 1, so
    that another question's adjusted p does not fall while that arm's runs are missing.
    """
    p = [float(x) if x is not None else float("nan") for x in pvalues]
    idx = sorted((i for i, x in enumerate(p) if math.isfinite(x)), key=lambda i: p[i])
    m = len(p) if untested_count else len(idx)
    out = [float("nan")] * len(p)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def all_pairs(
    per_seed: Mapping[str, Mapping[Hashable, Number]],
    labels: List[str],
    higher_is_better: bool,
) -> List[Dict[str, object]]:
    """Every pair of arms ``(a, b)`` with ``a`` listed before ``b``: :func:`compared_pairs`
    over all of them (the Holm family is the whole list)."""
    return compared_pairs(per_seed, [(a, b) for i, a in enumerate(labels) for b in labels[i + 1:]],
                          higher_is_better)


def compared_pairs(
    per_seed: Mapping[str, Mapping[Hashable, Number]],
    pairs: List[Tuple[str, str]],
    higher_is_better: bool,
) -> List[Dict[str, object]]:
    """Each pair of arms ``(a, b)`` of ``pairs``, compared on their common seeds
    (``diff = b - a``), with Holm-adjusted paired-t p-values over exactly these pairs (the
    Holm family is ``pairs``, in that order).

    Each entry holds :func:`compare_paired`'s keys, :func:`paired_effect`'s keys, ``a``,
    ``b``, ``n_nonzero`` (pairs with a non-zero difference, the Wilcoxon test's n),
    ``p_holm`` (the paired t p-value adjusted over the pairs of the list),
    ``p_holm_wilcoxon`` (the same for Wilcoxon), ``holm_family`` (the list's length) and
    ``wilcoxon_min_p`` (the smallest p the exact Wilcoxon test can reach with these pairs;
    a note says when it is not below 0.05).
    """
    out: List[Dict[str, object]] = []
    for a, b in pairs:
        c = compare_paired(per_seed[a], per_seed[b], higher_is_better)
        va, vb = (np.array([float(per_seed[x][s]) for s in c["seeds"]], dtype=np.float64) for x in (a, b))
        diff = rounded_difference(va, vb)  # (rounding noise is no effect: d_z of 1e-17 differences was -0.58)
        c.update(paired_effect(list(diff)))
        nz = int(np.count_nonzero(diff))  # the Wilcoxon test's n, as it counts them
        c["n_nonzero"] = nz
        c["wilcoxon_min_p"] = wilcoxon_min_p(nz)
        if nz > 0 and c["wilcoxon_min_p"] >= 0.05:
            c["notes"].append(
                f"{nz} non-zero pair(s): the exact two-sided Wilcoxon test cannot go below "
                f"{c['wilcoxon_min_p']:.4g}, so it cannot reach p < 0.05 (6 pairs are needed)")
        out.append({"a": a, "b": b, **c, "holm_family": len(pairs)})
    for key, src in (("p_holm", "p_paired_t"), ("p_holm_wilcoxon", "p_wilcoxon")):
        for c, adj in zip(out, holm([c[src] for c in out], untested_count=True)):
            c[key] = adj
    return out
