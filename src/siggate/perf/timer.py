"""Interleaved timing: every variant runs the same work in turn, the starting variant
rotating, so that the drift of a shared machine hits all variants alike.

Used by ``siggate bench`` (:func:`siggate.perf.bench.bench_config`, rotation per step) and
``siggate analyze overhead`` (:func:`siggate.analysis.overhead.time_variants`, rotation per
round).  A leaf module: it imports nothing from ``siggate``.
"""

from __future__ import annotations

import time
from typing import Callable, Hashable, Sequence, TypeVar

__all__ = ["rotated", "timed", "interleaved_round"]

V = TypeVar("V", bound=Hashable)
J = TypeVar("J")


def rotated(names: Sequence[V], k: int) -> list[V]:
    """``names`` starting at position ``k % len(names)``: ``rotated("abc", 1) == ["b", "c", "a"]``."""
    k %= len(names)
    return list(names[k:]) + list(names[:k])


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Run ``fn()`` once; return ``(wall seconds, process CPU seconds)`` (``perf_counter``
    and ``process_time``)."""
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall, time.process_time() - c0


def interleaved_round(
    variants: Sequence[V],
    jobs: Sequence[J],
    run: Callable[[V, J], object],
    first: int = 0,
    rotate_per_job: bool = True,
) -> list[dict[V, tuple[float, float]]]:
    """One timing round: for each job, every variant runs ``run(variant, job)`` once.

    The order of the variants is ``rotated(variants, first + j)`` for job ``j`` when
    ``rotate_per_job``, else ``rotated(variants, first)`` for every job.  Returns, per
    job, ``{variant: (wall, cpu)}`` seconds from :func:`timed`.
    """
    out = []
    for j, job in enumerate(jobs):
        order = rotated(variants, first + j if rotate_per_job else first)
        out.append({v: timed(lambda v=v: run(v, job)) for v in order})
    return out
