"""compare_logits (tools/model) between two --logits-out files, as one table cell plus its numbers."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Optional

from . import proc


def cell(text: str, **numbers) -> Dict:
    """A table cell: its text, and the figures behind it when a comparison ran."""
    d = {"text": text}
    d.update({k: v for k, v in numbers.items() if v is not None})
    return d


def parse(output: str, tol: str = "0") -> Dict:
    """compare_logits' output -> cell. tol "0": report only; otherwise a verdict against it."""
    d = r = bi = am = rows = res = None
    for line in output.splitlines():
        w = line.split()
        if len(w) < 2:
            continue
        if w[0] == "max_abs_diff:":
            d = w[1]
        elif w[0] == "rel_l2:":
            r = w[1]
        elif w[0] == "bit_identical:":
            bi = w[1]
        elif w[0] == "argmax_mismatch_rows:":
            am = w[1]
        elif w[0] == "shape:" and w[1].startswith("rows="):
            rows = w[1].split("=", 1)[1]
        elif w[0] == "result:":
            res = w[1]
    if bi == "yes":
        return cell("bit-identical", verdict="bit-identical", max_abs_diff=0.0, rel_l2=0.0,
                    argmax_mismatch_rows=0, rows=_int(rows))
    if res is None or d is None:
        # e.g. other tokens in a row: the files cannot be compared row by row
        return cell(f"compare failed ({res or 'no result'})", verdict="compare failed")
    judged = (_float(tol) or 0.0) > 0
    if judged:
        verdict = "within" if res == "PASS" else "not within"
        head = f"{'within' if res == 'PASS' else 'NOT within'} rel L2 {tol}, "
    else:
        verdict, head = "differs", "differs: "
    return cell(f"{head}max abs diff {d}, rel L2 {r}, argmax differs in {am}/{rows} rows", verdict=verdict,
                tol=tol if judged else None, max_abs_diff=_float(d), rel_l2=_float(r),
                argmax_mismatch_rows=_int(am), rows=_int(rows))


def compare(compare_bin: Path, a: Path, b: Path, tol: str = "0") -> Dict:
    _, out = proc.run([compare_bin, a, b, "--tol", tol], capture=True)
    return parse(out, tol)


def _float(s: Optional[str]) -> Optional[float]:
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def _int(s: Optional[str]) -> Optional[int]:
    try:
        return int(s)
    except (TypeError, ValueError):
        return None
