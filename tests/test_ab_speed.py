"""benchmarks/ab_speed.py's summary: per-side medians over runs, new / old paired within an
alternation, and the markdown table written from the JSON."""

from __future__ import annotations

import json

from benchmark_scripts import load

ab = load("ab_speed_script", "ab_speed.py")


def _runs(old: list[float], new: list[float]) -> list[dict]:
    runs = []
    for i, (o, n) in enumerate(zip(old, new)):
        for side, v in (("old", o), ("new", n)):
            runs.append({"side": side, "alternation": i, "ratios": {"infer_none_vs_pyg": v},
                         "cpu_ratios": {"infer_none_vs_pyg": v / 2}, "loadavg_start": [1.5 + i, 1.0, 1.0]})
    return runs


def test_summary_pairs_the_runs_of_one_alternation():
    runs = _runs([1.0, 2.0, 4.0], [1.5, 2.0, 2.0])
    s = ab.summarize(runs)
    assert s["old"]["infer_none_vs_pyg"] == {"median": 2.0, "q25": 1.5, "q75": 3.0, "n": 3}
    assert s["new"]["infer_none_vs_pyg"]["median"] == 2.0
    # paired: 1.5, 1.0, 0.5 (not the ratio of the medians, 1.0 either way here, but a different IQR)
    assert s["new_over_old"]["infer_none_vs_pyg"] == {"median": 1.0, "q25": 0.75, "q75": 1.25, "n": 3}
    assert ab.summarize(runs[:-1])["new_over_old"]["infer_none_vs_pyg"]["n"] == 2  # an unpaired run is left out


def test_markdown_table_is_written_from_the_json(tmp_path):
    runs = _runs([1.0, 2.0, 4.0], [1.5, 2.0, 2.0])
    res = {"commits": {"old": "a" * 40, "new": "b" * 40}, "alternations_done": 3, "cpu_count": 2,
           "command": "python benchmarks/ab_speed.py --old a", "runs": runs,
           "summary": ab.summarize(runs), "summary_cpu_time": ab.summarize(runs, "cpu_ratios")}
    (tmp_path / "r.json").write_text(json.dumps(res))
    ab.main(["--old", "x", "--out", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"), "--table-only"])
    text = (tmp_path / "r.md").read_text()
    assert "old `aaaaaaa`, new `bbbbbbb`; 3 runs per side" in text
    assert "load average at the runs' starts 1.50 to 3.50 on 2 CPUs" in text
    assert "| wall | `infer_none_vs_pyg` | 2.000 [1.500, 3.000] | 2.000 [1.750, 2.000] | 1.000 [0.750, 1.250] |" in text
    assert "| CPU | `infer_none_vs_pyg` | 1.000 [0.750, 1.500] | 1.000 [0.875, 1.000] | 1.000 [0.750, 1.250] |" in text
