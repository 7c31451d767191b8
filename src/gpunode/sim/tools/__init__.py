"""Simulated NVIDIA/Mellanox vendor tools backed by per-host state (stdlib only; see ../README.md §2)."""
