#!/usr/bin/env python3
"""The GPU benchmark of ggml-backend-rs (standard library only: the GPU host has no pip network).
Subcommands: all, multi, tp, tp-start, tp-wait, profile, profile-start, profile-wait,
profile-report, profile-compare, dl-start, dl-wait, table, settings; see
`python3 bench/gpu.py --help` and docs/gpu.md."""
import sys
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in the tree the device tool copies
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpubench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
