"""The GPU benchmark of ggml-backend-rs (bench/gpu.py; docs/gpu.md describes it)."""
