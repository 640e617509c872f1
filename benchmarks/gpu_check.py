"""GPU check for a machine with CUDA: the model on the GPU computes what it computes on the CPU.

Run: ``python benchmarks/gpu_check.py [--out FILE.json]`` (exit 0 when every check passes, 1 on a
mismatch, 2 without CUDA; ``--device cpu`` runs the same checks with the CPU in the GPU's place,
which is how the test suite keeps its checks working, not its device handling). It reuses the
fixtures of ``tests/test_fast_path.py`` (float64, explicit dtypes), so CPU and GPU are checked on
the same batches:

* ``train_*``: one training step of the fast model (``impl="auto"``: on CUDA the packed layout
  with SDPA per size group) on the GPU against the readable model (``impl="reference"``) on the
  CPU, for every gate and gate position: outputs and every parameter's gradient;
* ``eval_*``: the same models in eval mode, and the GPU model's ``for_inference()`` (folded
  BatchNorms, random statistics) against the CPU readable model; an output that does not vary
  over the graphs fails (it would hide any difference);
* ``attn_*``: the other attention types (performer, exphormer), the same model on both devices
  in eval mode (their random features and expanders are drawn once, on the CPU, and moved);
* ``fp32_*``: the fast model in float32 on the GPU (where SDPA may pick its fused kernels, which
  float64 never reaches) against the readable model in float64 on the CPU, one training step;
* ``bf16``: float32 on the GPU under bfloat16 autocast against float32, and finite gradients.

The tolerance is 1e-8 in float64, 1e-4 of the largest reference value (at least 1) in float32,
and 0.1 relative and absolute under bf16. The CPU twin of these checks is the test suite
(``tests/test_fast_path.py``); CI has no GPU, so this is a script.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from siggate.nn import SigGateGT  # noqa: E402
from siggate.nn.impl import IMPL_ENV  # noqa: E402
from test_fast_path import (  # noqa: E402
    BF16_TOL,
    DT,
    batch,
    batch_as,
    bf16_against_float32,
    output_spread,
    random_running_stats,
    training_step_errors,
    twin_models,
)
from test_fast_path import SIZES as FIXTURE_SIZES  # noqa: E402

ATOL = 1e-8
FP32_RTOL = 1e-4
#: the fixture's sizes and a larger batch whose size groups go through SDPA with padding
SIZES = {"small": FIXTURE_SIZES, "large": [23, 5, 40, 40, 17, 1, 33, 9, 26, 40, 12, 3] * 4}
POSITIONS = {"none": ["output"], "headwise": ["output", "value", "post"], "elementwise": ["output", "value", "post"]}


def _to(b, device: str):
    """A copy of the batch ``b`` on ``device``; PyG's ``Batch.to()`` moves ``b`` itself."""
    return b.clone().to(device)


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().cpu().to(b.dtype) - b.detach().cpu()).abs().max())


def train_step_errors(gate: str, position: str, sizes, device: str, dtype=DT) -> dict:
    """One training step, the fast model (``dtype``) on ``device`` against the readable one in
    float64 on the CPU: max errors of the outputs and over every gradient, and the reference's
    largest output and gradient (the scale of float32's tolerance)."""
    fast, slow = twin_models(gate=gate, gate_position=position, impl="auto")
    b = batch(sizes)
    e = training_step_errors(fast.to(device=device, dtype=dtype), slow, b, batch_as(b, dtype).to(device))
    return {"out": e["out"], "grad": max(e["grads"].values()), "grad_presence_mismatches": len(e["grad_presence"]),
            "scale": e["scale"]}


def eval_errors(gate: str, sizes, device: str) -> dict:
    fast, slow = twin_models(gate=gate, impl="auto")
    b = batch(sizes)
    with torch.no_grad():  # random BatchNorm statistics and affine maps, so that the folding has something to fold
        random_running_stats(slow)
        fast.load_state_dict(slow.state_dict())
    fast, slow = fast.to(device).eval(), slow.eval()
    with torch.inference_mode():
        ref = slow(b)
        out = fast(_to(b, device))
        folded = fast.for_inference()(_to(b, device))
    return {"out": _max_err(out, ref), "folded": _max_err(folded, ref), "spread": output_spread(ref)}


def attn_type_error(attn_type: str, device: str) -> float:
    torch.manual_seed(0)
    model = SigGateGT(2, dim=16, layers=2, heads=4, attn_dropout=0.0, attn_type=attn_type).to(DT).eval()
    b = batch()
    with torch.inference_mode():
        ref = model(b)
        out = model.to(device)(_to(b, device))
    return _max_err(out, ref)


def bf16_check(gate: str, device: str) -> dict:
    out, ref, finite = bf16_against_float32(gate, device)
    close = bool(torch.allclose(out, ref, atol=BF16_TOL, rtol=BF16_TOL))
    return {"max_err": _max_err(out, ref), "close": close, "grads_finite": finite}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="the device checked against the CPU (default: cuda; cpu checks this script)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: error: no CUDA device: nothing to check", file=sys.stderr)
        return 2
    if os.environ.get(IMPL_ENV):
        print(f"gpu_check: error: {IMPL_ENV}={os.environ[IMPL_ENV]} replaces impl='auto', so the fast path would not be "
              "checked: unset it", file=sys.stderr)
        return 2
    if args.out:  # before the checks (device time): a missing folder failed after them all, the results lost
        out = Path(args.out)
        if out.is_dir() or not out.parent.is_dir():
            print(f"gpu_check: error: --out {out}: {'a folder' if out.is_dir() else f'no folder {out.parent}'}; give "
                  "a JSON file's path in an existing folder", file=sys.stderr)
            return 2
        if out.exists():
            print(f"gpu_check: {out} exists and is replaced when the checks end", file=sys.stderr)
    dev = args.device
    res = {"device": dev, "gpu": torch.cuda.get_device_name() if dev == "cuda" else None, "torch": torch.__version__,
           "cuda": torch.version.cuda, "atol": ATOL, "fp32_rtol": FP32_RTOL, "bf16_tol": BF16_TOL, "checks": {}}
    failed = []

    def record(name: str, value: dict, ok: bool) -> None:
        res["checks"][name] = {**value, "ok": ok}
        print(f"{'ok  ' if ok else 'FAIL'} {name}: " + ", ".join(f"{k}={v:.3e}" if isinstance(v, float) else f"{k}={v}"
                                                        for k, v in value.items()), flush=True)
        if not ok:
            failed.append(name)

    for label, sizes in SIZES.items():
        for gate, positions in POSITIONS.items():
            for position in positions:
                e = train_step_errors(gate, position, sizes, dev)
                record(f"train_{gate}_{position}_{label}", e,
                       e["out"] <= ATOL and e["grad"] <= ATOL and not e["grad_presence_mismatches"])
            e = eval_errors(gate, sizes, dev)
            record(f"eval_{gate}_{label}", e, e["out"] <= ATOL and e["folded"] <= ATOL and e["spread"] > 1e-3)
        for gate in POSITIONS:
            e = train_step_errors(gate, "output", sizes, dev, torch.float32)
            tol = FP32_RTOL * e["scale"]
            record(f"fp32_{gate}_{label}", e, e["out"] <= tol and e["grad"] <= tol and not e["grad_presence_mismatches"])
    for attn_type in ("performer", "exphormer"):
        err = attn_type_error(attn_type, dev)
        record(f"attn_{attn_type}", {"out": err}, err <= ATOL)
    for gate in ("none", "elementwise"):
        e = bf16_check(gate, dev)
        record(f"bf16_{gate}", e, e["close"] and e["grads_finite"])
    res["failed"] = failed
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"{len(res['checks']) - len(failed)} of {len(res['checks'])} checks pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
