"""``siggate bench``'s options and the sizes they default to: light (no torch), so that
``siggate bench --help`` starts at once. :mod:`siggate.perf.bench` and
:mod:`siggate.perf.scaling_large` read the same constants from here.
"""

from __future__ import annotations

import argparse

from ..config_args import add_device_flag, add_threads_flag, examples_epilog
from ..options import ATTN_TYPES, GATE_KINDS, add_cache_dir_flag, add_data_root_flag, add_progress_flag

#: the timed models: siggate with each gate, and PyG's own ``GPSConv`` stack
VARIANTS = ("none", "headwise", "elementwise", "pyg")
#: node counts of ``--scaling`` (one graph per batch)
SCALING_SIZES = (25, 50, 100, 200, 500, 1000, 2000)
#: node counts of ``--scaling-large``
LARGE_SIZES = (1_000, 10_000, 100_000)
#: the largest graph ``--scaling-large`` gives the quadratic full attention
FULL_MAX_NODES = 10_000
#: ``head_channels`` of the PyG Performer references of ``--scaling-large``
PYG_HEAD_CHANNELS = (64, 16)

HELP = "throughput and peak memory vs PyG's GPSConv"
DESCRIPTION = ("Training and inference throughput and peak memory of SigGate-GT against a stack of PyG's own "
               "GPSConv, variants interleaved in each timing round (method: benchmarks/README.md).")
EXAMPLES = [
    "siggate bench --threads 1 --out runs/bench                  # ZINC config -> runs/bench/bench.json",
    "siggate bench --scaling --out runs/bench                    # time and memory as graphs grow",
    "siggate bench --scaling-large --attn-types performer --out runs/bench",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", choices=["zinc", "peptides", "both"], default="zinc",
                   help="zinc: GraphGPS ZINC config (10 layers, dim 64, batch 32, RWSE); peptides: GraphGPS "
                        "Peptides-func config (4 layers, dim 96, batch 128, LapPE, GatedGCN); both")
    p.add_argument("--dataset", choices=["auto", "zinc", "nci5k", "synthetic"], default="auto",
                   help="graphs for the zinc config: ZINC if it loads from the data root, else NCI-5K (auto)")
    add_data_root_flag(p, "ZINC and Peptides-func")
    add_cache_dir_flag(p)
    p.add_argument("--repeats", type=int, default=None,
                   help="interleaved timing rounds (default: 10; 3 with --scaling-large; --scaling takes a third "
                        "of them above 500 nodes, as each row's repeats records)")
    p.add_argument("--warmup", type=int, default=None,
                   help="warm-up passes per variant: a training and an inference step on each of the first two "
                        "batches; --scaling: a training step per size (default: 3; 1 with --scaling-large, whose "
                        "first step measures memory)")
    p.add_argument("--batches", type=int, default=8, help="batches per round (default: 8)")
    p.add_argument("--batch-size", type=int, default=None, help="override the config's batch size")
    p.add_argument("--layers", type=int, default=None, help="override the number of layers (--scaling-large: 4)")
    p.add_argument("--dim", type=int, default=None, help="override the width (--scaling-large: 64)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    p.add_argument("--optimizer", choices=["fused", "foreach", "forloop"], default="fused",
                   help="AdamW implementation, the same for every variant (default: fused)")
    add_device_flag(p)
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    add_threads_flag(p, default_text="torch's choice; 1 with --scaling-large")
    p.add_argument("--seed", type=int, default=0, help="seed of the models and batches (default: 0)")
    p.add_argument("--out", default=None, help="write OUT/bench.json (OUT/scaling.json + scaling.png with --scaling, "
                   "OUT/scaling_large.json + .png with --scaling-large)")
    p.add_argument("--scaling", action="store_true", help="time/memory per graph as graph size grows, batch of one")
    p.add_argument("--sizes", default=None, help=f"node counts for --scaling (default: "
                   f"{','.join(map(str, SCALING_SIZES))}) or --scaling-large (default: {','.join(map(str, LARGE_SIZES))})")
    g = p.add_argument_group("--scaling-large: one SBM graph per size, a training step per attention type")
    g.add_argument("--scaling-large", action="store_true",
                   help="time and peak memory of a training step of a node classifier on one large graph")
    g.add_argument("--attn-types", default=",".join(ATTN_TYPES), help=f"siggate attention types (default: {','.join(ATTN_TYPES)}, all)")
    g.add_argument("--pyg-head-channels", default=",".join(map(str, PYG_HEAD_CHANNELS)),
                   help="PyG GPSConv(attn_type='performer') models, one per head_channels (PyG's default 64; "
                        "16 = dim / heads); empty for none")
    g.add_argument("--full-max-nodes", type=int, default=FULL_MAX_NODES,
                   help=f"largest graph for the quadratic full attention (default: {FULL_MAX_NODES})")
    g.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    g.add_argument("--gate", choices=GATE_KINDS, default="elementwise", help="siggate's gate (default: elementwise)")
    g.add_argument("--note", default=None, help="free text recorded in the JSON (e.g. what else ran on the machine)")
    add_progress_flag(p)


def build_parser() -> argparse.ArgumentParser:
    """The stand-alone parser of ``python benchmarks/throughput.py`` (same options)."""
    parser = argparse.ArgumentParser(prog="siggate bench", allow_abbrev=False, **examples_epilog(EXAMPLES, DESCRIPTION))
    add_arguments(parser)
    return parser
