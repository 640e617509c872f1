"""What each member of a combined recipe adds, read from the MoleculeACE and peer harnesses' rows
(their ``member_shares``), or for rows written before they kept them, from the run folders the
rows name (each row's ``--out``): per run, each member's test metric alone, the combination's,
and the weight the validation split gave the member.

    python benchmarks/members_share.py --recipe cand-avgc --readme README.md

Prints a markdown table and writes ``benchmarks/results/members/<name+name>.json`` (``--recipe``'s
names joined by ``+``), with the commits of the rows it read:

* MoleculeACE: per member kind, the mean over the public targets of the target's mean over seeds
  of the member's test RMSE, and of its weight; the combination's RMSE the same way. Only targets
  with the seeds that every counted target has are used (the seeds and the count are printed).
* Peers: per task, the same with the task's metric (MAE, or ROC-AUC for molhiv4k), over seeds.

The harnesses' own rows stay the record of the combination's scores (``run.py --report``); this
adds the split into members. An old row whose run folder is gone is counted as missing and named.
``--rerun-missing SIGGATE`` trains such folders again (counted only where they reproduce their
row), and ``--keep`` writes the shares read from the folders into the rows themselves, so that a
new checkout, which has no run folders, reads the same table:

    python benchmarks/members_share.py --recipe cand-avgc --rerun-missing .study/wt-46a976c/.venv/bin/siggate --keep
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

from siggate.train.ensemble import member_shares
from siggate.train.executor import load_script
from siggate.train.rundir import run_commit
from siggate.train.study import RowStore

ROOT = Path(__file__).resolve().parent.parent
#: the harness result files whose rows name a recipe (the peers' default rows are in results.json,
#: its variants in recipe.json)
SOURCES = {"moleculeace": [ROOT / "benchmarks/moleculeace/results/results.json"],
           "peers": [ROOT / "benchmarks/peers/results/results.json", ROOT / "benchmarks/peers/results/recipe.json"]}
#: the name that the rows of siggate's shipped default answer to (``--recipe default``)
DEFAULT = "default"


def recipe_rows(rows: list[dict], names: list[str], defaults: bool = False) -> list[dict]:
    """siggate's finished rows whose recipe is one of ``names``. ``defaults``: the rows come from a
    file of default rows (the peers' results.json), where a row without a ``variant`` is the
    shipped default of its commit and also answers to ``default``, whatever recipe it records."""
    def named(r):
        return {r.get("recipe")} | ({DEFAULT} if defaults and not r.get("variant") else set())

    return [r for r in rows if r.get("tool") == "siggate" and r.get("status") == "ok" and not r.get("smoke")
            and named(r) & set(names)]


def run_folder(command: str) -> Path:
    """The ``--out`` folder of a harness row's ``siggate train`` command."""
    args = shlex.split(command)
    return Path(os.path.expanduser(args[args.index("--out") + 1]))


def _peers():
    """``benchmarks/peers/run.py`` (its subprocess runner and one-thread environment), loaded
    once under the name the MoleculeACE harness gives it."""
    return load_script("peers_run", ROOT / "benchmarks/peers/run.py", reuse=True)


def folder_metrics(row: dict) -> tuple[dict | None, str]:
    """``(metrics, "")``: the ``metrics.json`` of the row's run folder when the folder holds the
    row's own run (the commit its ``members.yaml``/``config.yaml`` records is the row's, and its
    test metric is the row's ``tool_reported_test``, where the row records them; recipes of the
    peers harness share folders by their flags, so a later run can stand in another row's
    folder); else ``(None, why)``."""
    folder = run_folder(row["command"])
    path = folder / "metrics.json"
    if not path.is_file():
        return None, "gone"
    m = json.loads(path.read_text())
    commit = run_commit(folder)
    want_commit, want_test = row.get("git_commit"), row.get("tool_reported_test")
    if want_commit and commit != want_commit:
        return None, f"its folder holds a run of commit {str(commit)[:7]}"
    if want_test is not None and (m.get("test") is None or not math.isclose(m["test"], want_test, rel_tol=1e-9)):
        return None, f"its folder holds another run (test {m.get('test')} against the row's {want_test})"
    return m, ""


def member_scores(row: dict, metric: str) -> tuple[dict | None, str]:
    """``({"combination": value, kind: (value, weight), ...}, source)`` of a harness row: the
    ``member_shares`` the row keeps, or for a row written before it kept them, those of the
    ``metrics.json`` in its run folder when that is the row's run (:func:`folder_metrics`)
    (``metric``: ``rmse`` reads the test RMSE, ``task`` the task's own metric; copies of one kind,
    ``--ensemble N``: their mean value and their summed weight), with where they were read
    (``"kept"`` or ``"folder"``); ``(None, why)`` when neither is there."""
    shares, source = row.get("member_shares"), "kept"
    if shares is None:
        m, why = folder_metrics(row)
        if m is None:
            return None, why
        if "members" not in m:
            return None, "its run has one member"
        shares, source = member_shares(m), "folder"

    def value(rec):
        return rec["test_summary"]["rmse"] if metric == "rmse" else rec["test"]

    copies = defaultdict(list)
    for member in shares["members"]:
        copies[member["kind"]].append((value(member), member["weight"]))
    return {"combination": value(shares["combination"]),
            **{k: (statistics.fmean(v for v, _ in c), sum(w for _, w in c)) for k, c in copies.items()}}, source


@functools.lru_cache(maxsize=None)
def _commit_of(python: str) -> str:
    """The commit that the siggate importable by ``python`` records in its runs ('' if none)."""
    out = subprocess.run([python, "-c", "from siggate.train.record import git_commit; print(git_commit())"],
                         capture_output=True, text=True).stdout.strip()
    return "" if out == "None" else out


def _alive(pid_file: Path) -> bool:
    """Whether the process whose pid ``pid_file`` holds still runs."""
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def _writing(folder: Path) -> bool:
    """Whether a running process names ``folder`` on its command line (a training still writing
    it, e.g. one that outlived the rerun that started it)."""
    return subprocess.run(["pgrep", "-f", "--", str(folder)], capture_output=True).returncode == 0


def rerun_missing(rows: list[dict], exe: str, say=lambda line: None) -> list[str]:
    """Train again the combined runs (``--members``/``--ensemble``) whose run folder is gone and
    whose row keeps no ``member_shares``, each with its own recorded command run by ``exe`` (the
    ``siggate`` of a venv: only the rows of the commit it reports are rerun, e.g. by the lane
    worktree's venv) on one thread, as the harness ran it. A rerun counts only if it reproduces its
    row (:func:`folder_metrics`: the row's commit and test metric); one that does not, or fails, is
    moved aside to ``<folder>.unreproduced``, named, and not tried again (delete that folder to
    retry). A rerun that was stopped (ended by a signal, or its ``rerun.pid`` names a process
    that is gone and no process names its folder) is started again. Returns one line per rerun,
    each also given to ``say`` as it ends (they take minutes)."""
    peers = _peers()
    python = Path(exe).with_name("python")
    exe_commit = _commit_of(str(python))
    notes = []

    def note(line: str) -> None:
        notes.append(line)
        say(line)

    if not exe_commit:
        note(f"{exe}: no commit read through {python} (give the siggate of a venv); nothing rerun")
        return notes
    for r in rows:
        args = shlex.split(r["command"])
        if r.get("member_shares") is not None or not {"--members", "--ensemble"} & set(args):
            continue
        folder = run_folder(r["command"])
        aside, marker = folder.with_name(folder.name + ".unreproduced"), folder.parent / "rerun.pid"
        if marker.exists() and not _alive(marker) and not _writing(folder):  # a rerun of ours that was stopped
            if folder_metrics(r)[0] is None:  # unfinished (a finished one stays): start it again
                shutil.rmtree(folder, ignore_errors=True)
            marker.unlink()
        if folder.exists() or aside.exists() or exe_commit != r.get("git_commit"):
            continue  # there (checked when read), tried before, or another commit's row
        name = f"{r.get('target') or r.get('task')} seed {r['seed']}"
        args = [os.path.expanduser(a) for a in args[1:]]
        data = Path(args[args.index("--data") + 1]) if "--data" in args else None
        if data is not None and not data.is_file():
            note(f"{name}: its data {data} is not on this machine; not rerun")
            continue
        folder.parent.mkdir(parents=True, exist_ok=True)
        log = folder.parent / "rerun.log"
        marker.write_text(str(os.getpid()))
        try:
            rc, wall, _ = peers._run([exe, *args], log, peers._env())
        finally:
            marker.unlink(missing_ok=True)
        if rc < 0 or rc in (130, 143):  # ended by a signal (stopped, or out of memory; siggate exits 130 on
            # Ctrl-C and 143 on SIGTERM): not a result; done again next time
            shutil.rmtree(folder, ignore_errors=True)
            note(f"{name}: stopped by a signal (exit {rc}); it is trained again on the next call")
            continue
        m, why = folder_metrics(r)
        if rc != 0 or m is None:
            shutil.rmtree(aside, ignore_errors=True)
            folder.rename(aside) if folder.exists() else aside.mkdir(parents=True)
            note(f"{name}: NOT reproduced ({f'siggate train exited {rc}, see {log}' if rc else why}); "
                 f"moved aside to {aside.name}, not counted, not tried again")
            continue
        note(f"{name}: reproduced (test {m['test']:.6g}, {wall:.0f} s)")
    return notes


def keep_shares(path: Path, rows_field: str, names: list[str], defaults: bool = False) -> int:
    """Write the ``member_shares`` of their run folder into the rows of ``names`` in the results
    file ``path`` that keep none, where the folder holds the row's own run (:func:`folder_metrics`;
    so only rows that record their commit and test metric) and that run combined several members,
    so that the table is read from the rows alone (a new checkout has no run folders). Done under
    the file's lock, as the harnesses write it (one may be adding rows meanwhile); the file is left
    untouched when no row gains them. Returns how many rows gained them."""
    gained = 0

    def change(doc: dict) -> bool:
        nonlocal gained
        for r in recipe_rows(doc[rows_field], names, defaults):
            if r.get("member_shares") is None and r.get("git_commit") and r.get("tool_reported_test") is not None:
                m, _ = folder_metrics(r)
                if m is not None and "members" in m:
                    r["member_shares"] = member_shares(m)
                    gained += 1
        return gained > 0  # False: nothing to write

    RowStore(path, key=lambda r: (), rows_field=rows_field).update(change)
    return gained


def summarize(rows: list[dict], metric: str, mean: bool = True) -> dict:
    """Per group (target or task), each member kind's and the combination's mean over the seeds
    every group has; with ``mean``, also their means over the groups (``mean=False`` where the
    groups' metrics differ, the peer tasks). ``read_from`` counts the rows summarized by where
    their shares were read (kept in the row, or its run folder). ``error`` says why nothing was
    summarized."""
    by_group, missing, commits, sources = defaultdict(dict), [], defaultdict(dict), defaultdict(dict)
    for r in rows:
        group, (scores, said) = r.get("target") or r.get("task"), member_scores(r, metric)
        if scores is None:  # said: why
            missing.append(f"{group} seed {r['seed']}" + ("" if said == "gone" else f" ({said})"))
            continue
        by_group[group][r["seed"]], sources[group][r["seed"]] = scores, said  # said: where the shares were read
        commits[group][r["seed"]] = str(r.get("git_commit") or r.get("commit") or "unknown")[:7]
    if not by_group:
        return {"groups": 0, "missing": missing, "error": "no row keeps member shares and no run folder with members was found"}
    common = sorted(set.intersection(*(set(s) for s in by_group.values())))
    if not common:
        return {"groups": 0, "missing": missing, "error": "no seed is run on every target; nothing is comparable"}
    kinds = list(next(iter(next(iter(by_group.values())).values())))
    groups = {}
    for g, seeds in by_group.items():
        use = [seeds[s] for s in common]
        groups[g] = {"seeds": common,
                     **{k: [statistics.fmean((u[k] if k == "combination" else u[k][0]) for u in use)]
                        + ([statistics.fmean(u[k][1] for u in use)] if k != "combination" else [])
                        for k in kinds}}
    used = sorted({commits[g][seed] for g in by_group for seed in common})
    read_from = Counter(sources[g][seed] for g in by_group for seed in common)
    out = {"seeds": common, "groups": len(groups), "kinds": kinds, "per_group": groups, "missing": missing,
           "commits": used, "read_from": {k: read_from[k] for k in ("kept", "folder")}}
    if mean:
        first = next(iter(groups.values()))
        out["mean"] = {k: [statistics.fmean(v[k][j] for v in groups.values()) for j in range(len(first[k]))]
                       for k in kinds}
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def table(name: str, summary: dict, label: str, others: dict | None = None) -> list[str]:
    """Markdown rows: one for ``label`` (the means), else one per group; ``others`` adds a column
    (``{"chemprop": {group: value}}``)."""
    kinds = [k for k in summary["kinds"] if k != "combination"]
    others = others or {}
    lines = [f"| {name} | " + " | ".join(f"{k} alone (weight)" for k in kinds) + " | combination | "
             + "".join(f"{o} | " for o in others) + "seeds |", "|---" * (len(kinds) + 3 + len(others)) + "|"]
    rows = [(label, summary["mean"], summary["seeds"])] if label else [
        (g, v, v["seeds"]) for g, v in sorted(summary["per_group"].items())]
    for g, v, seeds in rows:
        lines.append(f"| {g} | " + " | ".join(f"{v[k][0]:.3f} ({v[k][1]:.2f})" for k in kinds)
                     + f" | **{v['combination'][0]:.3f}** | "
                     + "".join(f"{o[g]:.3f} | " if g in o else "– | " for o in others.values())
                     + f"{','.join(map(str, seeds))} |")
    return lines


def chemprop_means(runs: list[dict]) -> dict:
    """Per peer task, chemprop's test metric (its defaults, the peers' main table), mean over seeds."""
    got = defaultdict(list)
    for r in runs:
        if r.get("tool") == "chemprop" and r.get("status") == "ok" and not r.get("smoke") and not r.get("variant"):
            got[r["task"]].append(r["value"])
    return {t: statistics.fmean(v) for t, v in got.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", required=True,
                   help="the harness rows' recipe names, comma-separated, e.g. cand-avgc or cand-ens60,default ('default': the "
                        "peers' default rows; a target's later row wins for a seed; the table names the rows' commits)")
    p.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/members/NAME+NAME.json")
    p.add_argument("--rerun-missing", metavar="SIGGATE", default=None,
                   help="train again, with this siggate executable (the one of the rows' commit), the rows whose run "
                        "folder is gone; a rerun counts only if it reproduces its row's commit and test metric")
    p.add_argument("--keep", action="store_true",
                   help="write each row's member shares, from its run folder where that holds the row's own run, into "
                        "the row in its results file, so that a checkout without the run folders reads them")
    p.add_argument("--readme", type=Path, default=None,
                   help="also write the table between the members-share markers of this file (the README)")
    args = p.parse_args(argv)
    result = {"command": "python benchmarks/members_share.py " + " ".join(argv or sys.argv[1:]),
              "commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.strip(), "recipe": args.recipe}
    lines = []
    names = [n.strip() for n in args.recipe.split(",") if n.strip()]
    for source, paths in SOURCES.items():
        field = "rows" if source == "moleculeace" else "runs"
        defaults = [source == "peers" and i == 0 for i in range(len(paths))]  # the peers' first file: default rows

        def read(paths=paths, field=field, defaults=defaults) -> tuple[list[dict], list[dict]]:
            docs = [json.loads(path.read_text()) for path in paths]
            return docs, [r for data, d in zip(docs, defaults) for r in recipe_rows(data[field], names, defaults=d)]

        docs, rows = read()
        if not rows:
            continue
        reruns = (rerun_missing(rows, args.rerun_missing, lambda line, source=source: print(f"{source}: rerun {line}",
                                                                                            flush=True))
                  if args.rerun_missing else None)
        if args.keep:  # after the reruns, which bring back folders to keep the shares of
            result.setdefault("kept", {})[source] = sum(keep_shares(path, field, names, defaults=d)
                                                        for path, d in zip(paths, defaults))
            docs, rows = read()
        s = summarize(rows, "rmse" if source == "moleculeace" else "task", mean=source == "moleculeace")
        if reruns is not None:
            s["reruns"] = reruns  # what was trained again, and what did not reproduce
        result[source] = s
        if not s["groups"]:
            lines.append(f"{source}: {s['error']}")
            continue
        if source == "moleculeace":
            lines += table("MoleculeACE test RMSE", s, f"mean over {s['groups']} public targets")
        else:
            metrics = {r["task"]: r["metric"] for r in rows}
            s["per_group"] = {f"{g} ({metrics[g]})": v for g, v in s["per_group"].items()}
            cp = {f"{t} ({metrics[t]})": v for t, v in chemprop_means(docs[0]["runs"]).items() if t in metrics}
            lines += ["", *table("peer task (metric)", s, "", {"chemprop": cp})]
        lines.append(f"\n{source}: rows of commit{'s' if len(s['commits']) > 1 else ''} {', '.join(s['commits'])}"
                     + (" (several: the rows mix versions of the recipe)"
                        if len([c for c in s["commits"] if c != "unknown"]) > 1 else "")
                     + f"; shares read from {_count(s['read_from']['kept'], 'row')}, "
                       f"{_count(s['read_from']['folder'], 'run folder')}")
        if s["missing"]:
            lines.append(f"\nrows without shares or their run folder ({source}): {', '.join(s['missing'])}")
    if not any(source in result for source in SOURCES):  # a misspelt --recipe: no table to write, least of all an empty one
        print(f"members_share.py: error: no rows of recipe {', '.join(map(repr, names))} in "
              f"{', '.join(str(p) for paths in SOURCES.values() for p in paths)}; check --recipe (the rows' "
              "'recipe' field)", file=sys.stderr)
        return 2
    out = args.out or ROOT / "benchmarks/results/members" / f"{'+'.join(names)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out}")
    incomplete = [f"{source}: {', '.join(result[source]['missing']) or result[source].get('error')}"
                  for source in SOURCES if source in result
                  and (result[source]["missing"] or not result[source]["groups"])]
    if args.readme and incomplete:  # the README's table is whole or not written
        print(f"members_share.py: error: {args.readme} not updated: rows without member shares or their run's folder "
              f"({'; '.join(incomplete)}); train them again with --rerun-missing SIGGATE (the siggate of the rows' "
              "commit) and --keep", file=sys.stderr)
        return 2
    if args.readme:
        text = args.readme.read_text()
        start, end = "<!-- members-share:start -->", "<!-- members-share:end -->"
        if start not in text or end not in text:
            raise SystemExit(f"{args.readme}: no {start} ... {end} markers; add them where the table goes")
        head, _, rest = text.partition(start)
        args.readme.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + rest.partition(end)[2])
        print(f"updated {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
