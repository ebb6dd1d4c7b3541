"""The results of one run, kept as one JSON document and rewritten after every configuration (a
partial run still has what it measured): results.json, bench.csv (the throughput rows) and
table.md (rendered from the JSON)."""
from __future__ import annotations

import csv
import datetime
import json
import os
from pathlib import Path
from typing import Dict

from . import table

SCHEMA = 1
BENCH_CSV_FIELDS = ["model", "test", "label", "base", "split", "devices", "side", "env", "build", "status",
                    "median_tps", "min_tps", "max_tps", "reps_tps"]


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class Results:
    def __init__(self, directory: Path, kind: str, settings: Dict):
        self.dir = Path(directory)
        self.doc: Dict = {"schema": SCHEMA, "kind": kind, "started": now(), "finished": None, "exit": None,
                          "code": settings.get("code", ""), "ggml": "", "host": {}, "settings": settings}

    def __getitem__(self, key):
        return self.doc[key]

    def __setitem__(self, key, value):
        self.doc[key] = value

    def append(self, key: str, row: Dict) -> None:
        self.doc.setdefault(key, []).append(row)

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "results.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, ensure_ascii=False) + "\n")
        os.replace(tmp, self.dir / "results.json")
        (self.dir / "table.md").write_text(table.render(self.doc))
        if self.doc.get("bench"):
            write_bench_csv(self.doc["bench"], self.dir / "bench.csv")

    def finish(self, exit_code: int) -> None:
        self.doc["finished"] = now()
        self.doc["exit"] = exit_code
        self.save()


def write_bench_csv(rows, path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=BENCH_CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            r = dict(r)
            r["reps_tps"] = " ".join(f"{x:.2f}" for x in r.get("reps_tps") or [])
            w.writerow(r)


def load(path: Path) -> Dict:
    return json.loads(Path(path).read_text())
