"""Zero-code annotation of PyTorch programs for `smlens profile -- CMD` (runtime.py says what
ranges it pushes and how). `program_env` is what the profiled program's environment gets."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

BOOT_DIR = Path(__file__).resolve().parent / "boot"


def compile_caches(env: dict) -> dict:
    """Where an annotated program's compilers keep their caches: folders of smlens's own, named for
    the version of the code that writes the compiled sites (compiled.py). A cache that a plain run
    filled holds code without the sites (inductor's cache keys leave its provenance settings out),
    and one filled here holds code that calls smlens; each stays with its own kind of run. Shared by
    the runs of one profile, so only the first compiles."""
    root = Path(env.get("SMLENS_CACHE_DIR") or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "smlens")
    version = hashlib.sha256((Path(__file__).parent / "compiled.py").read_bytes()).hexdigest()[:12]
    return {"TORCHINDUCTOR_CACHE_DIR": str(root / f"inductor-{version}"),
            "VLLM_CACHE_ROOT": str(root / f"vllm-{version}")}


def program_env(env: dict, status_dir: Path | None = None, setup: bool = False) -> dict:
    """`env` with the start-up hook first on PYTHONPATH, its compilers' caches (compile_caches), and
    where the runtime writes its status."""
    out = {**env, **compile_caches(env)}
    out["PYTHONPATH"] = str(BOOT_DIR) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if status_dir is not None:
        out["SMLENS_ANNOTATE_DIR"] = str(status_dir)
    if setup:
        out["SMLENS_ANNOTATE_SETUP"] = "1"
    return out
