"""Zero-code annotation of PyTorch programs for `smlens profile -- CMD` (runtime.py says what
ranges it pushes and how). `program_env` is what the profiled program's environment gets."""
from __future__ import annotations

import os
from pathlib import Path

BOOT_DIR = Path(__file__).resolve().parent / "boot"


def program_env(env: dict, status_dir: Path | None = None, setup: bool = False) -> dict:
    """`env` with the start-up hook first on PYTHONPATH, and where the runtime writes its status."""
    out = dict(env)
    out["PYTHONPATH"] = str(BOOT_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if status_dir is not None:
        out["SMLENS_ANNOTATE_DIR"] = str(status_dir)
    if setup:
        out["SMLENS_ANNOTATE_SETUP"] = "1"
    return out
