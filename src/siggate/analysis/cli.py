"""``siggate analyze``: the parsers of the mechanism analyses of the paper's claims.

Light on purpose: building these parsers (``siggate analyze X --help``) imports no torch,
NumPy plots or PyG. Each sub-command names its entry point as ``"module:function"``, which
:func:`siggate.cli.main` imports only when the command runs. The analyses themselves never
import this module.
"""

from __future__ import annotations

from ..config_args import add_command, add_set_flag, add_threads_flag
from ..options import add_cache_dir_flag, add_data_root_flag, add_progress_flag
from ..train.executor import add_executor_args

DESCRIPTION = """Mechanism analyses of the paper's claims. Each one writes OUT/<name>.json and
OUT/<name>.png and prints a table; 'report' and 'claims' gather what the others wrote."""


def add_model_args(p, default_epochs: int | None, trains: bool = True, threads: int = 0, on_ray: bool = False) -> None:
    """``--config``, ``--set``, ``--epochs``, ``--seeds``, ``--max-graphs``, ``--data-root``,
    ``--cache-dir``, ``--threads`` (default ``threads``; 0: torch's choice, or with ``on_ray``, an
    analysis that takes ``--backend ray``, each Ray task's cores there), ``--no-progress``.
    ``trains`` False (an analysis that trains nothing): ``--epochs`` and ``--seeds`` are left out
    of its help, parsed only so that it can say why it refuses them."""
    import argparse

    p.add_argument("--config", default=None, help="built-in config name or YAML path (default: nci5k)")
    add_set_flag(p, "model.dim=32")
    p.add_argument("--epochs", type=int, default=default_epochs,
                   help=f"training epochs per run (default: {default_epochs}; the warmup is scaled "
                        "by epochs / config epochs, as with `siggate train --budget`)" if trains else argparse.SUPPRESS)
    p.add_argument("--seeds", default="0", help="comma-separated seeds, a repeat counted once (default: 0)"
                   if trains else argparse.SUPPRESS)
    p.add_argument("--max-graphs", type=int, default=None,
                   help="keep only the first N graphs of every split (quick runs and tests)")
    add_data_root_flag(p)
    add_cache_dir_flag(p)
    add_threads_flag(p, default=threads, default_text=("0, torch's choice" if threads == 0 else str(threads))
                     + ("; with --backend ray, each task's --cpus-per-run cores" if on_ray else ""))
    add_progress_flag(p)


def finish_parser(p, entry: str, out_help: str | None = None) -> None:
    """The required ``--out`` directory (last option) and the sub-command's entry point."""
    p.add_argument("--out", required=True, help=out_help or "output directory")
    p.set_defaults(func=entry)


def _synthetic(sub) -> None:
    p = add_command(sub, "synthetic", "stable rank of gated vs ungated heads on random graphs", [
        "siggate analyze synthetic --out runs/an",
        "siggate analyze synthetic --draws 50 --families er,cycle --out runs/an-quick",
    ])
    p.add_argument("--draws", type=int, default=200, help="draws per graph family and attention mode (default: 200)")
    p.add_argument("--nodes", type=int, default=32, help="nodes per graph (default: 32)")
    p.add_argument("--dim", type=int, default=64, help="model width d (default: 64)")
    p.add_argument("--heads", type=int, default=4, help="heads H (default: 4)")
    p.add_argument("--noise", type=float, default=0.05, help="feature noise of the anchor-free graphs (default: 0.05)")
    p.add_argument("--propagate", type=int, default=1, help="aggregation steps before attention (default: 1)")
    p.add_argument("--families", default=None, help="graph families (default: all: er,cycle,regular)")
    p.add_argument("--attention", default=None, help="global,graph (default: both)")
    p.add_argument("--gates", default=None, help="gate kinds (default: elementwise,headwise)")
    p.add_argument("--biases", default="-4,-2,0,2,4", help="gate biases of the bias sweep (default: -4,-2,0,2,4)")
    p.add_argument("--noises", default="0.01,0.05,0.2,1.0", help="noise levels of the noise sweep")
    p.add_argument("--sweep-draws", type=int, default=None, help="draws per sweep point (default: min(draws, 50))")
    p.add_argument("--seed", type=int, default=0, help="random seed of the draws (default: 0)")
    add_threads_flag(p, default=1, default_text="1; the matrices are tiny, more threads only add overhead")
    add_progress_flag(p)
    finish_parser(p, "siggate.analysis.synthetic:main")


def _rank(sub) -> None:
    p = add_command(sub, "rank", "per-layer, per-head stable rank before/after the gate on a split", [
        "siggate analyze rank --checkpoint runs/x/best.pt --out runs/an",
        "siggate analyze rank --config nci5k --epochs 0 --split test --out runs/an-untrained",
    ])
    p.add_argument("--checkpoint", default=None, help="a trained run's folder (its best.pt) or best.pt/last.pt, "
                                                      "measured as it was trained "
                                                      "(--config/--set/--epochs/--seeds are refused beside it; else "
                                                      "--config)")
    add_model_args(p, default_epochs=5)
    p.add_argument("--split", default="val", help="train, val or test (default: val)")
    p.add_argument("--batch-size", type=int, default=64, help="graphs per forward pass (default: 64)")
    # what --checkpoint refuses beside it when given another value (it would be ignored)
    p.set_defaults(model_defaults={k: p.get_default(k) for k in ("config", "overrides", "epochs", "seeds")})
    finish_parser(p, "siggate.analysis.rank:main")


def _smoothing(sub) -> None:
    p = add_command(sub, "smoothing", "Dirichlet energy, MAD and rank of node representations vs depth", [
        "siggate analyze smoothing --config nci5k --depths 4,8,12,16 --gates none,elementwise --epochs 4 "
        "--seeds 0,1 --out runs/an",
        "siggate analyze smoothing --epochs 0 --depths 2,4 --out runs/an-untrained   # untrained models",
    ])
    add_model_args(p, default_epochs=3, on_ray=True)
    p.add_argument("--depths", default="4,8,12,16", help="numbers of layers (default: 4,8,12,16)")
    p.add_argument("--gates", default="none,elementwise", help="gate kinds; each other kind's MAD gain is against none, "
                                                            "wherever it is listed (default: none,elementwise)")
    p.add_argument("--rank-tol", type=float, default=1e-3,
                   help="relative singular-value threshold, between 0 and 1 (default: 1e-3)")
    p.add_argument("--batch-size", type=int, default=64, help="graphs per forward pass (default: 64)")
    add_executor_args(p)
    finish_parser(p, "siggate.analysis.smoothing:main", "output directory (runs go to OUT/runs)")


def _mad(sub) -> None:
    p = add_command(sub, "mad", "last-layer MAD of every trained model of a compare folder, into its results", [
        "siggate analyze mad runs/cmp   # runs/cmp: a 'siggate compare --out' folder",
    ], description="Load the best.pt of every finished run of a 'siggate compare' folder, check that it scores the "
                   "validation metric its run recorded, measure the MAD of the node representations after the last "
                   "GPS layer on the run's validation split (the smoothing analysis's definition) and write it, per "
                   "run and per arm with the paired comparisons, into the folder's results.json ('mad') and "
                   "results.md.")
    p.add_argument("dir", help="the comparison's folder (results.json and runs/<arm>/seed<seed>/best.pt)")
    p.add_argument("--batch-size", type=int, default=64, help="graphs per forward pass (default: 64)")
    add_threads_flag(p, default=0, default_text="0, torch's choice")
    add_progress_flag(p)
    p.set_defaults(func="siggate.analysis.compare_mad:main")


def _entropy(sub) -> None:
    p = add_command(sub, "entropy", "attention entropy per layer/head over training, gated vs ungated", [
        "siggate analyze entropy --config nci5k --epochs 5 --out runs/an",
        "siggate analyze entropy --gates none,headwise --seeds 0,1 --max-graphs 500 --out runs/an-quick",
    ])
    add_model_args(p, default_epochs=5)
    p.add_argument("--gates", default="none,elementwise", help="gate kinds (default: none,elementwise)")
    p.add_argument("--collapse", type=float, default=0.2,
                   help="normalized entropy below which a head counts as collapsed (default: 0.2)")
    p.add_argument("--batch-size", type=int, default=64, help="graphs per forward pass (default: 64)")
    finish_parser(p, "siggate.analysis.entropy:main")


def _lr_sweep(sub) -> None:
    p = add_command(sub, "lr-sweep", "final metric, divergence and stable range over learning rates", [
        "siggate analyze lr-sweep --config nci5k --lrs 1e-4,3e-4,1e-3,3e-3,1e-2 --gates none,elementwise "
        "--seeds 0,1 --out runs/an",
        "siggate analyze lr-sweep --backend ray --cpus-per-run 2 --out runs/an   # the runs as Ray tasks",
    ])
    add_model_args(p, default_epochs=3, on_ray=True)
    lrs = "1e-4,3e-4,1e-3,3e-3,1e-2"
    p.add_argument("--lrs", default=lrs, help=f"learning rates (default: {lrs})")
    p.add_argument("--gates", default="none,elementwise", help="gate kinds (default: none,elementwise)")
    p.add_argument("--tolerance", type=float, default=0.10, help="relative tolerance X (default: 0.10)")
    add_executor_args(p)
    finish_parser(p, "siggate.analysis.lrsweep:main")


def _overhead(sub) -> None:
    p = add_command(sub, "overhead", "extra parameters and forward+backward time of each gate kind", [
        "siggate analyze overhead --config nci5k --out runs/an",
        "siggate analyze overhead --gates none,elementwise@value --reps 40 --out runs/an",
    ])
    add_model_args(p, default_epochs=None, trains=False, threads=1)  # (its help said 0 beside a default of 1)
    p.add_argument("--gates", default="none,headwise,elementwise",
                   help="variants, 'gate' or 'gate@position'; the first is the baseline (default: none,headwise,elementwise)")
    p.add_argument("--batches", type=int, default=8, help="distinct training batches (default: 8)")
    p.add_argument("--reps", type=int, default=20, help="measured rounds over the batches (default: 20)")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured warm-up rounds (default: 3)")
    finish_parser(p, "siggate.analysis.overhead:main")


def _report(sub) -> None:
    p = add_command(sub, "report", "gather analysis results into one Markdown report with verdicts", [
        "siggate analyze report runs/an --out runs/an/REPORT.md",
    ])
    p.add_argument("dirs", nargs="+", help="folders (or JSON files) with analysis results")
    p.add_argument("--out", required=True, help="Markdown file to write")
    p.set_defaults(func="siggate.analysis.report:main")


def _claims(sub) -> None:
    p = add_command(sub, "claims", "the paper's claims against the committed results, as one table", [
        "siggate analyze claims benchmarks/results/compare/zinc benchmarks/results/analysis/zinc",
        "siggate analyze claims benchmarks/results/compare/zinc --readme benchmarks/RESULTS.md   # refresh a page's table",
    ])
    p.add_argument("dirs", nargs="+", help="folders (or results.json files) with compare, analysis or gate-study results "
                                          "(the MoleculeACE harness's results.json, benchmarks/results/pretrain_gate)")
    p.add_argument("--out", default=None, help="write the table to this Markdown file")
    p.add_argument("--readme", default=None,
                   help="replace the section between the claims:start and claims:end markers of this file")
    p.set_defaults(func="siggate.analysis.claims:main")


SUBCOMMANDS = (_synthetic, _rank, _smoothing, _mad, _entropy, _lr_sweep, _overhead, _report, _claims)


def register(subparsers) -> None:
    """Add ``analyze`` and its sub-commands to the ``siggate`` CLI."""
    p = add_command(subparsers, "analyze", "mechanism analyses of the paper's claims (rank, smoothing, ...)", [
        "siggate analyze synthetic --out runs/an",
        "siggate analyze rank --checkpoint runs/x/best.pt --out runs/an",
        "siggate analyze report runs/an --out runs/an/REPORT.md",
    ], description=DESCRIPTION)
    sub = p.add_subparsers(dest="analysis", metavar="ANALYSIS")
    for add in SUBCOMMANDS:
        add(sub)

    def _help(args) -> int:
        p.print_help()
        return 2

    p.set_defaults(func=_help)
