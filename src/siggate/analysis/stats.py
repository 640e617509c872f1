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

__all__ = ["mean_std", "compare_paired", "summarize"]

Number = Union[int, float]


def _values(values: Union[Mapping[Hashable, Number], Iterable[Number]]) -> np.ndarray:
    if isinstance(values, Mapping):
        values = list(values.values())
    return np.asarray(list(values), dtype=np.float64).reshape(-1)


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
    common = set(a.keys()) & set(b.keys())
    only = (set(a.keys()) | set(b.keys())) - common
    if only:
        notes.append(f"{len(only)} seed(s) present in only one variant were ignored")
    try:
        seeds = sorted(common)
    except TypeError:
        seeds = list(common)
    finite = [s for s in seeds if math.isfinite(float(a[s])) and math.isfinite(float(b[s]))]
    if len(finite) < len(seeds):
        notes.append(f"{len(seeds) - len(finite)} seed(s) with non-finite scores were dropped")
    seeds = finite

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
    gain = sign * diff  # > 0 where b is better
    res["wins"] = int((gain > 0).sum())
    res["losses"] = int((gain < 0).sum())
    res["ties"] = int((gain == 0).sum())
    mean_gain = sign * (res["mean_b"] - res["mean_a"])
    res["better"] = "b" if mean_gain > 0 else ("a" if mean_gain < 0 else "tie")

    if n < 2:
        notes.append("n_pairs < 2: paired t, Wilcoxon and Welch tests are undefined (nan)")
        return res

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        # Paired t-test.
        if np.all(diff == diff[0]):
            notes.append("all differences are identical (zero variance): paired t-test undefined (nan)")
        else:
            res["p_paired_t"] = _f(_st.ttest_rel(vb, va).pvalue)

        # Wilcoxon signed-rank.
        nz = int(np.count_nonzero(diff))
        if nz == 0:
            notes.append("all differences are zero: Wilcoxon test undefined (nan)")
        elif nz < 2:
            notes.append("fewer than 2 non-zero differences: Wilcoxon test undefined (nan)")
        else:
            res["p_wilcoxon"] = _f(_st.wilcoxon(vb, va).pvalue)

        # Welch's unequal-variance t-test.
        if np.all(va == va[0]) and np.all(vb == vb[0]):
            notes.append("both samples have zero variance: Welch t-test undefined (nan)")
        else:
            res["p_welch"] = _f(_st.ttest_ind(vb, va, equal_var=False).pvalue)
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
