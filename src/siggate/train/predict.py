"""Predict molecular properties from SMILES with a trained checkpoint.

Inputs are streamed in chunks, so memory stays flat however long the input is. Every
input row gives exactly one output row: the prediction, or an ``error`` naming why the
row could not be predicted. Valid rows are predicted even when others fail.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from torch_geometric.data import Batch

from ..data.chem import InvalidSmiles, smiles_to_graph

DEFAULT_MAX_ATOMS = 1000


class InputError(ValueError):
    """An input file that cannot be read as SMILES rows."""


class Predictor:
    """Wraps a trained model: SMILES in, predictions (in target units) out.

    Args:
        checkpoint: path to ``best.pt``/``last.pt`` from ``siggate train``.
        max_atoms: molecules with more atoms are refused with a reason (attention is
            quadratic in the number of atoms). (default: ``1000``)
        batch_size: graphs per forward pass. (default: ``128``)
    """

    def __init__(self, checkpoint: str | Path, max_atoms: int = DEFAULT_MAX_ATOMS, batch_size: int = 128) -> None:
        from .loop import load_trained

        self.model, ckpt, self.cfg, self.info = load_trained(checkpoint)
        self.mean = ckpt["target_mean"]
        self.std = ckpt["target_std"]
        self.max_atoms = max_atoms
        self.batch_size = batch_size
        m = self.cfg.model
        self.rwse = m.pe_steps if m.pe == "rwse" else 0
        self.lap = m.pe_steps if m.pe == "lappe" else 0
        if self.info.node_features != "ogb":
            raise InputError(
                f"this checkpoint was trained on {self.info.name!r}, whose graphs use integer atom types, "
                "not SMILES-derived OGB features; it cannot predict from SMILES"
            )

    @property
    def columns(self) -> list[str]:
        names = self.info.target_names
        if len(names) == 1:
            return ["prediction"]
        return [f"prediction_{n}" for n in names]

    def featurize(self, smiles: str):
        """SMILES -> graph with positional encodings; raises ``InvalidSmiles`` with a reason."""
        from ..data.pe import add_pe

        if not isinstance(smiles, str):
            raise InvalidSmiles(f"not a string: {smiles!r}")
        g = smiles_to_graph(smiles)
        if g.num_nodes > self.max_atoms:
            raise InvalidSmiles(
                f"molecule has {g.num_nodes} atoms, above the limit of {self.max_atoms} (--max-atoms)"
            )
        if self.rwse or self.lap:
            g = add_pe([g], rwse_steps=self.rwse, lap_dim=self.lap)[0]
        return g

    @torch.no_grad()
    def _predict_graphs(self, graphs) -> torch.Tensor:
        out = self.model(Batch.from_data_list(graphs))
        if self.info.task == "regression":
            out = out * self.std + self.mean
        else:
            out = torch.sigmoid(out)
        return out

    def predict_rows(self, smiles: Iterable[str]) -> list[dict]:
        """One dict per input SMILES, in order: ``smiles``, the prediction column(s) and ``error``."""
        smiles = list(smiles)
        rows, ok, graphs = [], [], []
        for i, s in enumerate(smiles):
            row = {"smiles": s, **{c: "" for c in self.columns}, "error": ""}
            try:
                graphs.append(self.featurize(s))
                ok.append(i)
            except InvalidSmiles as exc:
                row["error"] = str(exc) or "invalid SMILES"
            except Exception as exc:  # featurization must never take down the other rows
                row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
        for start in range(0, len(graphs), self.batch_size):
            chunk = graphs[start : start + self.batch_size]
            idx = ok[start : start + self.batch_size]
            try:
                preds = self._predict_graphs(chunk)
            except Exception as exc:  # e.g. a molecule the model cannot handle: retry one by one
                preds = None
                for j, g in zip(idx, chunk):
                    try:
                        self._fill(rows[j], self._predict_graphs([g])[0])
                    except Exception as exc2:
                        rows[j]["error"] = f"prediction failed: {type(exc2).__name__}: {exc2}"
                del exc
            if preds is not None:
                for j, p in zip(idx, preds):
                    self._fill(rows[j], p)
        return rows

    def _fill(self, row: dict, pred: torch.Tensor) -> None:
        if not torch.isfinite(pred).all():
            row["error"] = "model produced a non-finite prediction"
            return
        for c, v in zip(self.columns, pred.tolist()):
            row[c] = f"{v:.6g}"


def read_smiles(path: str | Path, smiles_col: str = "smiles", chunk: int = 1000) -> Iterator[list[str]]:
    """Stream SMILES from a CSV (with a ``smiles_col`` header) or a ``.smi``/text file (first
    whitespace-separated token of each line), ``chunk`` at a time. Bytes that are not UTF-8
    are replaced (the row then fails as invalid SMILES rather than stopping the run)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"input file not found: {path}")
    fh = open(path, encoding="utf-8", errors="replace", newline="")
    try:
        first = fh.readline()
        is_csv = path.suffix.lower() in (".csv", ".tsv") or ("," in first and smiles_col in first)
        if is_csv:
            delim = "\t" if path.suffix.lower() == ".tsv" else ","
            header = next(csv.reader([first], delimiter=delim), [])
            header = [h.strip() for h in header]
            if smiles_col not in header:
                hint = ""
                if len(header) == 1 and any(d in header[0] for d in (";", "\t", "|")):
                    hint = " The header has a single column: is the file delimited by something other than ','?"
                raise InputError(
                    f"column {smiles_col!r} not found in {path}. Available columns: {header}. "
                    f"Pass --smiles-col NAME.{hint}"
                )
            col = header.index(smiles_col)
            reader = csv.reader(fh, delimiter=delim)
            buf = []
            for rec in reader:
                buf.append(rec[col].strip() if col < len(rec) else "")
                if len(buf) >= chunk:
                    yield buf
                    buf = []
            if buf:
                yield buf
        else:
            buf = []
            lines = _chain([first], fh) if first else iter(())
            for line in lines:
                parts = line.split()
                buf.append(parts[0] if parts else "")
                if len(buf) >= chunk:
                    yield buf
                    buf = []
            if buf:
                yield buf
    finally:
        fh.close()


def _chain(*its):
    for it in its:
        yield from it


def predict_to_csv(predictor: Predictor, chunks: Iterable[list[str]], output: str | Path | None) -> tuple[int, int]:
    """Write predictions as CSV (``smiles``, prediction column(s), ``error``) to ``output``
    (or stdout), chunk by chunk. Returns ``(rows, failed_rows)``."""
    out_fh = open(output, "w", newline="", encoding="utf-8") if output else io.TextIOWrapper(
        sys.stdout.buffer, encoding="utf-8", newline="", write_through=True)
    n = bad = 0
    try:
        w = csv.DictWriter(out_fh, fieldnames=["smiles", *predictor.columns, "error"])
        w.writeheader()
        for chunk in chunks:
            rows = predictor.predict_rows(chunk)
            w.writerows(rows)
            out_fh.flush()
            n += len(rows)
            bad += sum(1 for r in rows if r["error"])
    finally:
        if output:
            out_fh.close()
        else:
            out_fh.detach()
    return n, bad
