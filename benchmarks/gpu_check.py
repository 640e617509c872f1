"""GPU check for a machine with CUDA: the fast model path on the GPU matches the CPU.

Run: ``python benchmarks/gpu_check.py`` (exits 1 on mismatch, 2 without CUDA). It reuses the
fixtures of ``tests/test_fast_path.py`` so CPU and GPU are checked on the same batches.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_fast_path import batch, twin_models  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    fast, _ = twin_models(gate="elementwise")
    b = batch()
    fast.eval()
    with torch.no_grad():
        ref = fast(b)
        out = fast.cuda()(b.cuda()).cpu()
    err = (out - ref).abs().max().item()
    print(f"max |cuda - cpu| = {err:.3e}")
    return 0 if torch.allclose(out, ref, atol=1e-8) else 1


if __name__ == "__main__":
    sys.exit(main())
