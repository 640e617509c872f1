"""The svr member's exact kernel map for classification, two ways side by side in one process:
``Φ = K W`` computed as before (:func:`~siggate.predictors.kernel.nystrom_projection`, then the
kernel again and a product, :func:`~siggate.predictors.svr._nystrom_features`) and as the member
computes it now (:func:`~siggate.predictors.kernel.exact_kernel_map`, from the one
eigendecomposition). Each way includes the kernel of the rows; alternated over ``--rounds``, one
thread, CPU seconds (``time.process_time``). Prints JSON: the CPU seconds of each way, their
ratio (best round over best round) and the largest difference between the two maps.

    python benchmarks/scale/kernel_map.py                 # molhiv4k's 3,200 training rows
    python benchmarks/scale/kernel_map.py --rows 1000 --rounds 3

The molecules are the peers harness's ``molhiv4k`` training rows (``benchmarks/peers/tasks.py``
builds them from the shared ogbg-molhiv files on first use), with the member's default kernel
(the five kinds at radius 2, 2,048 bins).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=None, help="the first N training rows (default: all 3,200)")
    p.add_argument("--rounds", type=int, default=2, help="alternated rounds of both ways (default: 2)")
    args = p.parse_args(argv)
    if args.rounds < 1 or (args.rows is not None and args.rows < 1):  # (min() of no timings: a traceback)
        print(f"kernel_map.py: error: --rounds {args.rounds} and --rows {args.rows}: give whole numbers >= 1",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "peers"))
    import numpy as np
    import tasks  # noqa: E402 - the peers harness's task builder
    import torch

    from siggate.data.fingerprints import parse_kinds
    from siggate.options import SVRMemberOptions
    from siggate.predictors.fpmember import FingerprintTable
    from siggate.predictors.kernel import exact_kernel_map, minmax_kernel, nystrom_projection
    from siggate.predictors.svr import _nystrom_features

    torch.set_num_threads(1)
    tasks.build("molhiv4k")
    path = tasks.task_dir("molhiv4k") / "data.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        smiles = [r["smiles"] for r in csv.DictReader(fh) if r["split"] == "train"][: args.rows]
    kinds = SVRMemberOptions.fingerprint[0]
    parts = len(parse_kinds(kinds))
    x = FingerprintTable(smiles).get(2, SVRMemberOptions.size[0], kinds)
    cpu, maps = {"before": [], "now": []}, {}
    for r in range(args.rounds):
        for way in ("before", "now") if r % 2 == 0 else ("now", "before"):
            t0 = time.process_time()
            k = minmax_kernel(x, x, parts=parts)
            if way == "before":
                maps[way] = _nystrom_features(x, x, nystrom_projection(k), parts)
            else:
                maps[way] = exact_kernel_map(k)[1]
            cpu[way].append(round(time.process_time() - t0, 3))
    print(json.dumps({"rows": int(x.shape[0]), "kernel": kinds, "cpu_s": cpu,
                      "ratio_now_over_before": round(min(cpu["now"]) / min(cpu["before"]), 3),
                      "max_abs_diff": float(np.abs(maps["now"] - maps["before"]).max())}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
