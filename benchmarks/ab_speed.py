"""Old code against new code, ``siggate bench`` alternated on one machine.

Each commit's ``src/`` is exported (``git archive``) into a scratch folder and imported by
its own ``siggate bench`` subprocess (``PYTHONPATH``), so both run in this environment with
the same torch and PyG. The runs alternate (old, new, new, old, old, new, ...: each side
goes first equally often), each a full ``siggate bench`` whose speed ratios to PyG's
``GPSConv`` are paired within its own rounds, which cancels most of a shared machine's
drift. The JSON holds every run's ratios and load average, and per side the median and
IQR over runs of each ratio's median, with the paired change new/old per alternation.

Example (issue 31, item 6)::

    python benchmarks/ab_speed.py --old 1873647 --new HEAD --alternations 10 \\
        --out benchmarks/results/redesign/ab_1873647_vs_new.json -- --config zinc --threads 1 --repeats 10

``--markdown FILE.md`` also writes the summary as a table (written from the JSON, never by
hand); ``--table-only`` rewrites that table from an existing ``--out`` JSON without running.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the ratios the summary reports (keys of ``bench.json``'s ``configs[*].ratios``)
KEYS = ("train_none_vs_pyg", "train_headwise_vs_pyg", "train_elementwise_vs_pyg",
        "infer_none_vs_pyg", "infer_headwise_vs_pyg", "infer_elementwise_vs_pyg")


def refuse(message: str):
    """Bad input: one line on stderr naming the cause and the fix, exit code 2."""
    print(f"ab_speed: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def export(commit: str, dest: Path) -> str:
    """``src/`` of ``commit`` into ``dest``; returns the full hash."""
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "-q", f"{commit}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode:  # (a CalledProcessError traceback)
        refuse(f"{commit!r} is not a commit of this repository; give a hash, tag or branch (git log --oneline)")
    full = found.stdout.strip()
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", full, "src"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return full


def run_bench(src: Path, out: Path, bench_args: list[str], nice: int) -> dict:
    """One ``siggate bench`` importing ``src``; its ratios and the load average before it."""
    env = dict(os.environ, PYTHONPATH=str(src))
    load = os.getloadavg()  # what `uptime` prints
    t0 = time.time()
    cmd = ["nice", "-n", str(nice), sys.executable, "-m", "siggate", "bench", *bench_args, "--out", str(out)]
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:  # the bench's own one line (its stderr was dropped, then a CalledProcessError)
        refuse(f"siggate bench of {src.parent.name} failed (exit {done.returncode}): "
               + (done.stderr.strip().splitlines() or ["no message"])[-1])
    res = json.loads((out / "bench.json").read_text())
    cfg = next(iter(res["configs"].values()))
    return {"ratios": {k: cfg["ratios"][k]["median"] for k in KEYS if k in cfg["ratios"]},
            "cpu_ratios": {k: cfg["cpu_ratios"][k]["median"] for k in KEYS if k in cfg.get("cpu_ratios", {})},
            "ratios_iqr": {k: [cfg["ratios"][k]["q25"], cfg["ratios"][k]["q75"]] for k in KEYS if k in cfg["ratios"]},
            "loadavg_start": [round(x, 2) for x in load], "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "seconds": round(time.time() - t0, 1)}


def median_iqr(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {"median": round(statistics.median(values), 4), "q25": round(q[0], 4), "q75": round(q[2], 4),
            "n": len(values)}


def summarize(runs: list[dict], clock: str = "ratios") -> dict:
    """Per side, the median and IQR over runs of each ratio (``clock``: ``"ratios"``, wall
    clock, or ``"cpu_ratios"``, CPU time), and of new / old per alternation (runs of both sides)."""
    out: dict = {}
    for side in ("old", "new"):
        rows = [r for r in runs if r["side"] == side]
        out[side] = {k: median_iqr([r[clock][k] for r in rows]) for k in KEYS if k in rows[0][clock]}
    pairs: dict = {}
    for r in runs:
        pairs.setdefault(r["alternation"], {})[r["side"]] = r[clock]
    pairs = {i: p for i, p in pairs.items() if len(p) == 2}
    out["new_over_old"] = {k: median_iqr([p["new"][k] / p["old"][k] for p in pairs.values()])
                           for k in KEYS if pairs and all(k in s for p in pairs.values() for s in p.values())}
    return out


def _cell(m: dict) -> str:
    return f"{m['median']:.3f} [{m['q25']:.3f}, {m['q75']:.3f}]"


def markdown(res: dict) -> str:
    """The summary of an ``ab_speed`` JSON as a markdown table: per ratio to PyG, each side's
    median [IQR] over runs and the paired new / old, on the wall and the CPU clock."""
    c = res["commits"]
    loads = [r["loadavg_start"][0] for r in res["runs"]]
    lines = [f"old `{c['old'][:7]}`, new `{c['new'][:7]}`; {res['alternations_done']} runs per side, alternated "
             f"(ABBA); 1-minute load average at the runs' starts {min(loads):.2f} to {max(loads):.2f} "
             f"on {res['cpu_count']} CPUs. Speed ratio to PyG's GPSConv (higher is faster), median [IQR] over runs.",
             f"Command: `{res['command']}`", "",
             "| clock | ratio | old | new | new / old (paired) |", "|---|---|---|---|---|"]
    for clock, key in (("wall", "summary"), ("CPU", "summary_cpu_time")):
        summ = res[key]
        for k in KEYS:
            if k in summ["old"] and k in summ["new"]:
                ratio = summ["new_over_old"].get(k)
                lines.append(f"| {clock} | `{k}` | {_cell(summ['old'][k])} | {_cell(summ['new'][k])} | "
                             f"{_cell(ratio) if ratio else '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="commit of the old code")
    p.add_argument("--new", default="HEAD", help="commit of the new code (default: HEAD)")
    p.add_argument("--alternations", type=int, default=10, help="runs per side (default: 10)")
    p.add_argument("--nice", type=int, default=0, help="nice level of the bench runs (default: 0)")
    p.add_argument("--out", required=True, help="the JSON to write")
    p.add_argument("--markdown", default=None, help="also write the summary table here")
    p.add_argument("--table-only", action="store_true", help="only rewrite --markdown from the --out JSON")
    p.add_argument("bench_args", nargs="*", help="after --: siggate bench's flags (not --out)")
    args = p.parse_args(argv)
    if args.alternations < 1:  # (an UnboundLocalError after both commits were exported)
        p.error(f"--alternations {args.alternations}: give a whole number >= 1")
    if args.table_only:
        if not args.markdown:
            p.error("--table-only needs --markdown")
        if not Path(args.out).is_file():
            p.error(f"--table-only --out {args.out}: no such file; name the JSON an earlier run wrote")
        Path(args.markdown).write_text(markdown(json.loads(Path(args.out).read_text())))
        return
    other = [f for f in ("--scaling", "--scaling-large") if f in args.bench_args]
    if other:  # (found out after a first whole bench run: they write no bench.json)
        refuse(f"{other[0]}: ab_speed compares the throughput run's ratios (bench.json); drop it from the bench's flags")
    with tempfile.TemporaryDirectory(prefix="ab_speed_") as tmp:
        tmp = Path(tmp)
        commits = {side: export(c, tmp / side) for side, c in (("old", args.old), ("new", args.new))}
        for given in (args.out, args.markdown):
            if given and Path(given).exists():  # (replaced without a word, committed results too)
                print(f"ab_speed: {given} exists and is replaced as the runs come in", file=sys.stderr)
        runs = []
        for i in range(args.alternations):
            order = ("old", "new") if i % 4 in (0, 3) else ("new", "old")  # ABBA: each side first equally often
            for side in order:
                r = run_bench(tmp / side / "src", tmp / f"{side}{i}", args.bench_args, args.nice)
                runs.append({"side": side, "alternation": i, **r})
                print(f"{side}{i}: " + " ".join(f"{k}={v:.3f}" for k, v in r["ratios"].items())
                      + f" load={r['loadavg_start'][0]}", flush=True)
            res = {
                "what": "siggate bench, old and new code alternated (ABBA) on one machine; each run's ratios to PyG "
                        "are medians over its own interleaved rounds",
                "command": "python benchmarks/ab_speed.py " + shlex.join(sys.argv[1:] if argv is None else argv),
                "commits": commits, "alternations_done": i + 1, "nice": args.nice,
                "cpu_count": os.cpu_count(), "summary": summarize(runs),
                "summary_cpu_time": summarize(runs, "cpu_ratios"), "runs": runs,
            }
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
            if args.markdown:
                Path(args.markdown).write_text(markdown(res))
    print(json.dumps(res["summary"], indent=2))


if __name__ == "__main__":
    main()
