"""Synthetic check of the paper's central claim: the sigmoid gate raises the stable rank
``||O||_F^2 / ||O||_2^2`` of each attention head's output.

Setting (one *draw*):

1. a graph of ``n`` nodes from a family:

   * ``er``: Erdős–Rényi ``G(n, p)`` with ``p = avg_degree / (n - 1)``, i.i.d. Gaussian
     node features (nodes are distinguishable);
   * ``cycle``: the ``n``-cycle, and ``regular``: a random ``k``-regular graph; every node
     gets the *same* random feature vector plus small Gaussian noise (``--noise``). These
     graphs have no natural anchor node: all nodes look alike;

2. features are propagated ``--propagate`` times as ``X <- X + D^{-1} A X`` (one
   GIN-like aggregation, what the local branch of a GPS layer does before attention);

3. one multi-head attention with random (Xavier) ``q, k, v`` weights; attention is either
   ``global`` (every node attends to every node, as in GraphGPS) or ``graph`` (each node
   attends to its neighbours and itself);

4. the *ungated* head outputs ``O_k`` (``[n, d_head]``) and the *gated* ones
   ``O_k * G_k`` with ``G_k = sigmoid(X W_Gk + b_G)`` from a second attention module that
   shares every ``q, k, v, out`` weight with the first and adds a random gate
   (``elementwise``: ``[n, d_head]`` per head; ``headwise``: ``[n, 1]`` per head).

The stable rank is computed per head over the graph's nodes (float64). Sanity cases: a
constant gate (gate weights 0) multiplies ``O_k`` by a scalar and leaves its stable rank
unchanged exactly; a headwise gate scales the rows of ``O_k`` (per node) and can move the
stable rank either way.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm.auto import tqdm

from ..config_args import CLIError
from .common import fmt, meta, parse_list, start, table, write_outputs
from .metrics import stable_rank_batched
from .plots import color, save, subplots

if TYPE_CHECKING:  # imported where used: siggate.nn loads PyG, and `siggate --help` must not
    from ..nn.attention import GatedMultiheadAttention

FAMILIES = ("er", "cycle", "regular")
#: the fewest nodes of a ``regular`` graph (:func:`make_graph`: degree 3, or 4 where 3n is odd)
REGULAR_MIN_NODES = 4
ATTENTION_MODES = ("global", "graph")
GATES = ("elementwise", "headwise")
REL_TOL = 1e-9  # |gated - ungated| <= REL_TOL * ungated counts as "equal"


# ------------------------------------------------------------------------ graphs


def make_graph(family: str, n: int, rng: np.random.Generator, avg_degree: float = 4.0,
               regular_degree: int = 3) -> torch.Tensor:
    """Symmetric ``[n, n]`` bool adjacency (no self-loops) of one graph of ``family``."""
    A = np.zeros((n, n), dtype=bool)
    if family == "er":
        p = min(1.0, avg_degree / max(n - 1, 1))
        upper = np.triu(rng.random((n, n)) < p, k=1)
        A = upper | upper.T
    elif family == "cycle":
        i = np.arange(n)
        A[i, (i + 1) % n] = True
        A[(i + 1) % n, i] = True
    elif family == "regular":
        import networkx as nx

        k = regular_degree if (regular_degree * n) % 2 == 0 else regular_degree + 1
        G = nx.random_regular_graph(k, n, seed=int(rng.integers(2**31 - 1)))
        for u, v in G.edges():
            A[u, v] = A[v, u] = True
    else:
        raise ValueError(f"unknown graph family {family!r}; choose from {FAMILIES}")
    return torch.from_numpy(A)


def node_features(family: str, n: int, d: int, gen: torch.Generator, noise: float) -> torch.Tensor:
    """``[n, d]`` float64: i.i.d. N(0, 1) for ``er``; one shared N(0, 1) vector plus
    ``noise * N(0, 1)`` per node for the anchor-free families."""
    if family == "er":
        return torch.randn(n, d, generator=gen, dtype=torch.float64)
    base = torch.randn(1, d, generator=gen, dtype=torch.float64)
    return base + noise * torch.randn(n, d, generator=gen, dtype=torch.float64)


def propagate(x: torch.Tensor, A: torch.Tensor, steps: int) -> torch.Tensor:
    """``steps`` times ``x <- x + D^{-1} A x`` (isolated nodes keep ``x``)."""
    A = A.to(x.dtype)
    deg = A.sum(1, keepdim=True).clamp_min(1.0)
    for _ in range(steps):
        x = x + (A @ x) / deg
    return x


# --------------------------------------------------------------------- attention


def matched_pair(dim: int, heads: int, gate: str, bias: float, weight_std: float | None, seed: int):
    """An ungated and a gated attention sharing all ``q, k, v, out`` weights (float64)."""
    from ..nn.attention import GatedMultiheadAttention

    torch.manual_seed(seed)
    plain = GatedMultiheadAttention(dim, heads, gate="none", impl="reference").double().eval()
    gated = GatedMultiheadAttention(dim, heads, gate=gate, gate_bias_init=bias, gate_weight_std=weight_std,
                                    impl="reference").double().eval()
    d = dim
    with torch.no_grad():
        gated.in_proj.weight[: 3 * d].copy_(plain.in_proj.weight)
        gated.in_proj.bias[: 3 * d].copy_(plain.in_proj.bias)
        gated.out_proj.load_state_dict(plain.out_proj.state_dict())
    return plain, gated


@torch.no_grad()
def head_outputs(att: GatedMultiheadAttention, x: torch.Tensor, adj: torch.Tensor | None = None):
    """Head outputs before and after the gate, ``[H, n, d_head]`` each, and the gate.

    ``adj=None``: global attention, read from the module's own readable path. Otherwise
    attention restricted to ``adj | I`` using the module's projections (same formula as
    the module, with an ``[n, n]`` mask instead of a key mask).
    """
    if adj is None:
        _, det = att(x[None], None, return_details=True)
        before, after, gate = det["head_out"][0], det["head_out_gated"][0], det["gate"]
    else:
        n = x.shape[0]
        q, k, v, gate = att.split(x[None])  # 1, n, H, dh
        q, k, v = (t[0].transpose(0, 1) for t in (q, k, v))  # H, n, dh
        scores = q @ k.transpose(-2, -1) / math.sqrt(att.head_dim)  # H, n, n
        allowed = adj | torch.eye(n, dtype=torch.bool)
        attn = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        before = (attn @ v).transpose(0, 1)  # n, H, dh
        after = before * gate[0] if gate is not None else before
    gate = None if gate is None else gate.reshape(x.shape[0], att.heads, -1).transpose(0, 1)
    return before.transpose(0, 1), after.transpose(0, 1), gate


def _r(x: float) -> float:
    return float(f"{x:.7g}")


def one_draw(seed: int, draw: int, family: str, mode: str, gates, n: int, dim: int, heads: int, noise: float,
             steps: int, bias: float = 0.0, weight_std: float | None = None, avg_degree: float = 4.0) -> list[dict]:
    """Stable ranks of one draw for each gate kind (shared graph, features and q, k, v)."""
    rng = np.random.default_rng([seed, draw, FAMILIES.index(family)])
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    A = make_graph(family, n, rng, avg_degree=avg_degree)
    x = propagate(node_features(family, n, dim, gen, noise), A, steps)
    wseed = int(rng.integers(2**62))
    out = []
    for gate in gates:
        plain, gated = matched_pair(dim, heads, gate, bias, weight_std, wseed)
        adj = None if mode == "global" else A
        o_plain, _, _ = head_outputs(plain, x, adj)
        o_before, o_after, g = head_outputs(gated, x, adj)
        match = float((o_plain - o_before).abs().max())
        sr_u = stable_rank_batched(o_plain)  # [H]
        sr_g = stable_rank_batched(o_after)
        out.append({
            "draw": draw, "family": family, "attention": mode, "gate": gate,
            "ungated": sr_u.tolist(), "gated": sr_g.tolist(),  # full precision: anchor-free heads sit at 1 + 1e-7
            "gate_mean": _r(float(g.mean())), "gate_node_std": _r(float(g.std(dim=1).mean())),
            "prep_mismatch": match,
        })
    return out


# ----------------------------------------------------------------------- summary


def summarize(entries: list[dict]) -> dict:
    """Mean/std of the head-mean stable rank, gated vs ungated, and how often it rises.

    ``frac_gated_higher``: fraction of draws whose head-mean gated stable rank exceeds
    the ungated one (by more than a relative ``1e-9``); ``frac_heads_*``: the same per
    (draw, head) pair; ``mean_ratio``: mean over (draw, head) of gated / ungated;
    ``median_excess_ratio``: median over (draw, head) of ``(SR_gated - 1) / (SR_ungated - 1)``,
    the growth of the part of the stable rank beyond rank one (heads with
    ``SR_ungated - 1 < 1e-12`` are left out and counted in ``n_heads_rank_one``).
    """
    if not entries:
        return {"n_draws": 0}
    u = np.array([e["ungated"] for e in entries], dtype=np.float64)  # draws, H
    g = np.array([e["gated"] for e in entries], dtype=np.float64)
    um, gm = u.mean(1), g.mean(1)
    tol_d, tol_h = REL_TOL * np.abs(um), REL_TOL * np.abs(u)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(u > 0, g / u, np.nan)
    ex_u, ex_g = u - 1.0, g - 1.0
    sel = ex_u > 1e-12
    return {
        "n_draws": int(len(entries)),
        "mean_excess_ungated": float(ex_u.mean()), "mean_excess_gated": float(ex_g.mean()),
        "median_excess_ratio": float(np.median(ex_g[sel] / ex_u[sel])) if sel.any() else None,
        "n_heads_rank_one": int((~sel).sum()),
        "mean_ungated": float(um.mean()), "std_ungated": float(um.std(ddof=1)) if len(um) > 1 else 0.0,
        "mean_gated": float(gm.mean()), "std_gated": float(gm.std(ddof=1)) if len(gm) > 1 else 0.0,
        "mean_ratio": float(np.nanmean(ratio)),
        "min_ratio": float(np.nanmin(ratio)), "max_ratio": float(np.nanmax(ratio)),
        "frac_gated_higher": float((gm - um > tol_d).mean()),
        "frac_gated_lower": float((um - gm > tol_d).mean()),
        "frac_heads_gated_higher": float((g - u > tol_h).mean()),
        "frac_heads_gated_lower": float((u - g > tol_h).mean()),
        "frac_heads_equal": float((np.abs(g - u) <= tol_h).mean()),
    }


def group(entries: list[dict], *keys: str) -> dict:
    out = defaultdict(list)
    for e in entries:
        out["/".join(str(e[k]) for k in keys)].append(e)
    return {k: summarize(v) for k, v in out.items()}


def _sanity_constant_gate(seed: int, families, gates, sweep_n: int, common: dict, progress: bool) -> dict:
    """Constant gate (weights 0): output scaled by a scalar, so the stable rank is unchanged."""
    sanity = []
    for b in tqdm((-3.0, 0.0, 3.0), desc="synthetic: constant gate", disable=not progress, leave=False):
        for f in families:
            for i in range(min(sweep_n, 20)):
                sanity += [dict(e, bias=b) for e in
                           one_draw(seed + 1, i, f, "global", gates, bias=b, weight_std=0.0, **common)]
    rel = [abs(g - u) / u for e in sanity for g, u in zip(e["gated"], e["ungated"]) if u > 0]
    sanity_res = {
        "description": "gate weights 0: G = sigmoid(b) is a constant, O*G = sigmoid(b)*O, so the "
                       "stable rank must be unchanged (up to float64 rounding)",
        "n_cases": len(rel), "max_rel_diff": float(max(rel)), "holds": bool(max(rel) < 1e-9),
    }
    return sanity_res


def _noise_sweep(seed: int, families, modes, gates, noises, sweep_n: int, common: dict, progress: bool) -> list:
    """How "anchor-free" the graph is: the feature noise sets how much the nodes differ."""
    noise_sweep = []
    free = [f for f in families if f != "er"]
    for nz in tqdm(noises, desc="synthetic: noise sweep", disable=not progress, leave=False):
        ent = []
        for f in free:
            for m in modes:
                for i in range(sweep_n):
                    ent += [dict(e) for e in one_draw(seed + 4, i, f, m, gates, **{**common, "noise": nz})]
        for key, st in group(ent, "family", "gate", "attention").items():
            fam, gate, mode = key.split("/")
            noise_sweep.append({"noise": nz, "family": fam, "gate": gate, "attention": mode, **st})
    return noise_sweep


def _not_raised(by_fgm: dict, bias_sweep: list) -> list:
    """Cases (main grid and bias sweep) where the gate did not raise the stable rank everywhere."""
    not_raised = [
        {"case": k, "frac_gated_higher": v["frac_gated_higher"], "frac_heads_gated_lower": v["frac_heads_gated_lower"],
         "mean_ratio": v["mean_ratio"]}
        for k, v in by_fgm.items() if v["frac_heads_gated_lower"] > 0 or v["frac_gated_higher"] < 1.0
    ]
    not_raised += [
        {"case": f"bias={r['bias']}/{r['family']}/{r['gate']}/global", "frac_gated_higher": r["frac_gated_higher"],
         "frac_heads_gated_lower": r["frac_heads_gated_lower"], "mean_ratio": r["mean_ratio"]}
        for r in bias_sweep if r["frac_heads_gated_lower"] > 0 or r["frac_gated_higher"] < 1.0
    ]
    return not_raised


def _definitions(avg_degree: float, noise: float, propagate_steps: int, nodes: int = 32) -> dict:
    """What each reported quantity and setting means (``nodes``: the regular graphs' degree is 4
    where 3 * nodes is odd, :func:`make_graph`)."""
    degree = 3 if (3 * nodes) % 2 == 0 else 4
    return {
        "stable_rank": "||O_k||_F^2 / ||O_k||_2^2 of head k's output O_k [n_nodes, d_head] (float64)",
        "gated": "O_k * sigmoid(X W_Gk + b_G) with the gate at the head output (gate_position=output)",
        "frac_gated_higher": "fraction of draws with mean-over-heads gated stable rank > ungated (rel tol 1e-9)",
        "draw": "new graph, features, q/k/v/out and gate weights; gated and ungated share q/k/v/out",
        "families": {"er": f"Erdos-Renyi, p = {avg_degree}/(n-1), iid N(0,1) features",
                     "cycle": f"n-cycle, one shared N(0,1) feature vector + {noise}*N(0,1) noise per node",
                     "regular": f"random {degree}-regular graph, shared feature + {noise}*N(0,1) noise"},
        "propagation": f"{propagate_steps} x (X <- X + D^-1 A X) before attention",
        "attention": {"global": "all nodes attend to all nodes (GraphGPS)",
                      "graph": "each node attends to its neighbours and itself"},
        "gate_init": "Xavier-uniform gate weights, bias b_G = 0 unless swept",
        "median_excess_ratio": "median over (draw, head) of (SR_gated - 1) / (SR_ungated - 1)",
        "noise_sweep": "anchor-free families only; the noise sets how different the nodes' inputs are",
    }


def run_synthetic(draws: int = 200, nodes: int = 32, dim: int = 64, heads: int = 4, noise: float = 0.05,
                  propagate_steps: int = 1, families=FAMILIES, modes=ATTENTION_MODES, gates=GATES,
                  seed: int = 0, avg_degree: float = 4.0, biases=(-4.0, -2.0, 0.0, 2.0, 4.0),
                  weight_stds=(0.0, 0.01, 0.1, 0.5, None), noises=(0.01, 0.05, 0.2, 1.0),
                  sweep_draws: int | None = None,
                  progress: bool = True) -> dict:
    """All synthetic experiments; returns the JSON-ready result dict."""
    if dim % heads:
        raise ValueError(f"--dim {dim} must be divisible by --heads {heads}")
    common = dict(n=nodes, dim=dim, heads=heads, noise=noise, steps=propagate_steps, avg_degree=avg_degree)
    jobs = [(f, m, i) for f in families for m in modes for i in range(draws)]
    per_draw = []
    for f, m, i in tqdm(jobs, desc="synthetic: main", disable=not progress, leave=False):
        per_draw += one_draw(seed, i, f, m, gates, **common)
    mismatch = max(e["prep_mismatch"] for e in per_draw)

    sweep_n = sweep_draws or max(1, min(draws, 50))
    sweep_fams = [f for f in families if f in ("er", "cycle")] or list(families)

    sanity_res = _sanity_constant_gate(seed, families, gates, sweep_n, common, progress)

    # Effect of the gate bias (gate centre) and of the gate weight scale (gate variation).
    def global_sweep(values, desc: str, draw_seed: int, param: str, stat: str):
        """Per value ``v``: draws of the sweep families (global attention) with ``param=v``;
        yields ``(v, family, gate, mean of stat, summary)`` per (family, gate)."""
        for v in tqdm(values, desc=desc, disable=not progress, leave=False):
            ent = []
            for f in sweep_fams:
                for i in range(sweep_n):
                    ent += one_draw(draw_seed, i, f, "global", gates, **{param: v}, **common)
            for key, s in group(ent, "family", "gate").items():
                fam, gate = key.split("/")
                m = float(np.mean([e[stat] for e in ent if e["family"] == fam and e["gate"] == gate]))
                yield v, fam, gate, m, s

    bias_sweep = [{"bias": b, "family": fam, "gate": gate, "gate_mean": gm, **s}
                  for b, fam, gate, gm, s in global_sweep(biases, "synthetic: bias sweep", seed + 2, "bias",
                                                          "gate_mean")]
    std_sweep = [{"gate_weight_std": "xavier" if w is None else w, "family": fam, "gate": gate,
                  "gate_node_std": gs, **s}
                 for w, fam, gate, gs, s in global_sweep(weight_stds, "synthetic: gate-weight sweep", seed + 3,
                                                         "weight_std", "gate_node_std")]

    noise_sweep = _noise_sweep(seed, families, modes, gates, noises, sweep_n, common, progress)

    overall = summarize(per_draw)
    by_fgm = group(per_draw, "family", "gate", "attention")
    not_raised = _not_raised(by_fgm, bias_sweep)
    return {
        "analysis": "synthetic",
        "definitions": _definitions(avg_degree, noise, propagate_steps, nodes),
        "setting": {"draws": draws, "nodes": nodes, "dim": dim, "heads": heads, "noise": noise,
                    "propagate": propagate_steps, "families": list(families), "attention": list(modes),
                    "gates": list(gates), "seed": seed, "avg_degree": avg_degree, "sweep_draws": sweep_n},
        **{k: overall[k] for k in ("mean_ungated", "mean_gated", "std_ungated", "std_gated", "frac_gated_higher",
                                   "frac_heads_gated_higher", "frac_heads_gated_lower", "mean_ratio")},
        "overall": overall,
        "by_gate": group(per_draw, "gate"),
        "by_family": group(per_draw, "family"),
        "by_attention": group(per_draw, "attention"),
        "by_family_gate": group(per_draw, "family", "gate"),
        "by_family_gate_attention": by_fgm,
        "sanity_constant_gate": sanity_res,
        "bias_sweep": bias_sweep,
        "gate_weight_std_sweep": std_sweep,
        "noise_sweep": noise_sweep,
        "not_raised": not_raised,
        "matched_weights_max_abs_diff": mismatch,
        "per_draw": [{k: v for k, v in e.items() if k != "prep_mismatch"} for e in per_draw],
    }


# -------------------------------------------------------------------------- plot


def plot(res: dict, path: Path) -> Path:
    fig, ax = subplots(2, 3, size=(5.0, 4.0))
    fams = res["setting"]["families"]
    for j, gate in enumerate(res["setting"]["gates"][:2]):
        a = ax[0, j]
        for i, fam in enumerate(fams):
            e = [x for x in res["per_draw"] if x["gate"] == gate and x["family"] == fam]
            u = [v for x in e for v in x["ungated"]]
            g = [v for x in e for v in x["gated"]]
            a.scatter(u, g, s=4, alpha=0.35, label=fam, color=f"C{i}")
        lim = [0.9, max(2.0, max(max(x["ungated"] + x["gated"]) for x in res["per_draw"]) * 1.05)]
        a.plot(lim, lim, "k--", lw=0.8)
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_xlabel("stable rank, ungated head")
        a.set_ylabel("stable rank, gated head")
        a.set_title(f"{gate} gate (per head, all draws)")
        a.legend(fontsize=7, markerscale=3)
    a = ax[1, 0]
    for i, gate in enumerate(res["setting"]["gates"]):
        for j, fam in enumerate(sorted({r["family"] for r in res["bias_sweep"]})):
            rows = [r for r in res["bias_sweep"] if r["gate"] == gate and r["family"] == fam]
            a.plot([r["bias"] for r in rows], [r["mean_ratio"] for r in rows], marker="os^"[j % 3],
                   ls=["-", "--", ":"][j % 3], color=color(gate, i), label=f"{gate}, {fam}")
    a.axhline(1.0, color="k", lw=0.8)
    a.set_xlabel("gate bias b_G (gate centre sigmoid(b_G))")
    a.set_ylabel("mean gated / ungated stable rank")
    a.set_title("effect of the gate bias (global attention)")
    a.legend(fontsize=7)
    a = ax[1, 1]
    rows_all = res["gate_weight_std_sweep"]
    xs = sorted({r["gate_weight_std"] for r in rows_all if r["gate_weight_std"] != "xavier"})
    for i, gate in enumerate(res["setting"]["gates"]):
        for j, fam in enumerate(sorted({r["family"] for r in rows_all})):
            rows = [r for r in rows_all if r["gate"] == gate and r["family"] == fam]
            swept = sorted((r for r in rows if r["gate_weight_std"] != "xavier"), key=lambda r: r["gate_weight_std"])
            a.plot([r["gate_node_std"] for r in swept], [r["mean_ratio"] for r in swept], marker="os^"[j % 3],
                   ls=["-", "--", ":"][j % 3], color=color(gate, i), label=f"{gate}, {fam}")
            xavier = [r for r in rows if r["gate_weight_std"] == "xavier"]  # a point of its own, off the sweep's line
            a.plot([r["gate_node_std"] for r in xavier], [r["mean_ratio"] for r in xavier], marker="*", ms=9, ls="none",
                   color=color(gate, i), label=f"{gate}, {fam}, Xavier" if xavier else None)
    a.axhline(1.0, color="k", lw=0.8)
    a.set_xlabel(f"gate std across nodes (lines: weight std {xs}; stars: Xavier)")
    a.set_ylabel("mean gated / ungated stable rank")
    a.set_title("effect of gate variation across nodes")
    a.legend(fontsize=7)
    for j, stat in enumerate(("mean_ratio", "median_excess_ratio")):
        a = ax[j, 2]
        rows_all = res.get("noise_sweep", [])
        plotted = []  # a log axis needs positive values (tiny graphs give ratios of 0 or below)
        for i, gate in enumerate(res["setting"]["gates"]):
            for k, (fam, mode) in enumerate(sorted({(r["family"], r["attention"]) for r in rows_all})):
                rows = [r for r in rows_all if r["gate"] == gate and r["family"] == fam and r["attention"] == mode
                        and r[stat] is not None]
                a.plot([r["noise"] for r in rows], [r[stat] for r in rows], marker="o", color=color(gate, i),
                       ls=["-", "--", ":", "-."][k % 4], label=f"{gate}, {fam}, {mode}")
                plotted += [(r["noise"], r[stat]) for r in rows]
        a.axhline(1.0, color="k", lw=0.8)
        if plotted and all(x > 0 for x, _ in plotted):
            a.set_xscale("log")
        if j == 1 and plotted and all(y > 0 for _, y in plotted):
            a.set_yscale("log")
        a.set_xlabel("feature noise of the anchor-free graphs")
        a.set_ylabel("gated / ungated SR" if j == 0 else "median (SR_g - 1) / (SR_u - 1)")
        a.set_title("anchor-free graphs: " + ("mean stable-rank ratio" if j == 0 else "median excess ratio"))
        if plotted:  # (no anchor-free family, --families er: no line, and matplotlib warned of an empty legend)
            a.legend(fontsize=6)
        else:
            a.text(0.5, 0.5, "no anchor-free family drawn", ha="center", va="center", transform=a.transAxes)
    return save(fig, path)


# --------------------------------------------------------------------------- CLI



def main(args) -> int:
    out, progress = start(args)  # refuses --heads 0 among the counts (it makes no folder)
    if args.dim % args.heads:
        raise CLIError(f"--dim {args.dim} must be divisible by --heads {args.heads}")
    families = parse_list(args.families or FAMILIES, flag="--families", choices=FAMILIES)
    if "regular" in families and args.nodes < REGULAR_MIN_NODES:
        raise CLIError(f"--nodes {args.nodes}: the regular family's 3-regular graphs (4-regular for an odd count) need "
                       f"at least {REGULAR_MIN_NODES} nodes; give --nodes {REGULAR_MIN_NODES} or more, or leave regular "
                       "out of --families")
    lists = dict(families=families,
                 modes=parse_list(args.attention or ATTENTION_MODES, flag="--attention", choices=ATTENTION_MODES),
                 gates=parse_list(args.gates or GATES, flag="--gates", choices=GATES),
                 biases=parse_list(args.biases, float, "--biases"), noises=parse_list(args.noises, float, "--noises"))
    for flag, values in (("--noise", [args.noise]), ("--noises", lists["noises"]), ("--biases", lists["biases"])):
        bad = next((v for v in values if not math.isfinite(v) or (flag != "--biases" and v < 0)), None)
        if bad is not None:  # (a noise's scale -1 drew what 1 does, recorded as -1; NaN drew NaN graphs)
            raise CLIError(f"{flag}: {bad} is not a {'finite number' if flag == '--biases' else 'noise scale >= 0'}")
    res = run_synthetic(
        draws=args.draws, nodes=args.nodes, dim=args.dim, heads=args.heads, noise=args.noise,
        propagate_steps=args.propagate, seed=args.seed, **lists,
        sweep_draws=args.sweep_draws, progress=progress,
    )
    res["meta"] = meta(args)
    path = write_outputs(res, out, "synthetic", plot)
    rows = [[k, v["n_draws"], v["mean_ungated"], v["mean_gated"], v["mean_ratio"], v["median_excess_ratio"],
             v["frac_gated_higher"], v["frac_heads_gated_lower"]] for k, v in res["by_family_gate_attention"].items()]
    print(table(["family/gate/attention", "draws", "SR ungated", "SR gated", "ratio", "excess ratio",
                 "frac higher", "frac heads lower"], rows))
    s = res["sanity_constant_gate"]
    print(f"constant-gate sanity: max relative change {fmt(s['max_rel_diff'])} over {s['n_cases']} heads "
          f"-> {'unchanged' if s['holds'] else 'CHANGED'}")
    print(f"overall: stable rank {fmt(res['mean_ungated'])} -> {fmt(res['mean_gated'])}, gated higher in "
          f"{fmt(100 * res['frac_gated_higher'], 3)}% of draws; wrote {path}")
    return 0
