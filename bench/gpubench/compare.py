"""compare_logits (tools/model) between two --logits-out files, as one table cell plus its numbers."""
from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Dict, List, Optional, Tuple

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
    c = parse(out, tol)
    if c.get("verdict") == "compare failed":
        d = divergence(a, b)
        if d:
            c = d
    return c


def read_logits(path: Path) -> Optional[Tuple[int, List[Tuple[int, int, List[float]]]]]:
    """A --logits-out file (tools/model/compare_logits.cpp has the format): (n_vocab, rows of
    (pos, token, logits)), or None when it is not one."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    if len(data) < 16 or data[:8] != b"LGTSv001":
        return None
    n_vocab, n_rows = struct.unpack_from("<II", data, 8)
    size = 8 + 4 * n_vocab
    if len(data) != 16 + n_rows * size:
        return None
    rows = []
    for r in range(n_rows):
        off = 16 + r * size
        pos, tok = struct.unpack_from("<iI", data, off)
        rows.append((pos, tok, list(struct.unpack_from(f"<{n_vocab}f", data, off + 8))))
    return n_vocab, rows


def _margin(logits: List[float]) -> float:
    """Top-one minus top-two logit of a row."""
    top = sorted(logits, reverse=True)[:2]
    return top[0] - top[1] if len(top) == 2 else math.inf


def divergence(a: Path, b: Path) -> Optional[Dict]:
    """Where two runs' greedy tokens part: the cell for files whose rows stop matching (what
    compare_logits refuses to compare), or None when they do not part that way. The rows before
    the first other token are compared; the row before it chose that token, so its top-two gap in
    each file says how close the choice was."""
    fa, fb = read_logits(a), read_logits(b)
    if not fa or not fb or fa[0] != fb[0] or len(fa[1]) != len(fb[1]):
        return None
    ra, rb = fa[1], fb[1]
    k = next((i for i, (x, y) in enumerate(zip(ra, rb)) if x[:2] != y[:2]), None)
    if not k:   # identical rows (compare_logits failed otherwise), or differing from the prompt on
        return None
    num = sum((p - q) ** 2 for x, y in zip(ra[:k], rb[:k]) for p, q in zip(x[2], y[2]))
    den = sum(p * p for x in ra[:k] for p in x[2])
    rel = math.sqrt(num / den) if den > 0 else 0.0
    ma, mb = _margin(ra[k - 1][2]), _margin(rb[k - 1][2])
    return cell(f"other tokens from row {k} of {len(ra)} (top-two gap there {ma:.4g} / {mb:.4g}); "
                f"rel L2 {rel:.3g} over the {k} rows before", verdict="tokens part", rows=len(ra),
                parted_at=k, rel_l2=rel, margin_a=ma, margin_b=mb)


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
