"""`smlens doctor`: can this machine profile? ncu, GPU and driver, counter permission, packages.

Each check says ok, warn or problem, and for a problem what to do. The exit code is that of the
first problem in the order `smlens profile` would meet it (see profiler.run.ncu EXIT_*), 0 when none.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable

from profiler.run import ncu as ncu_mod
from profiler.errors import SmlensError

# Package -> (needed for, required?)
PACKAGES = {
    "typer": ("the command line", True),
    "rich": ("tables and progress", True),
    "pandas": ("the kernels table", True),
    "pyarrow": ("the Parquet store", True),
    "nvtx": ("phase and role ranges in the built-in workloads", True),
    "torch": ("the built-in workloads (gpu extra)", False),
    "triton": ("the deterministic GEMMs (gpu extra)", False),
    "ncu-report": ("reading .ncu-rep files without ncu (ncu-report extra)", False),
}
PARAMS = Path("/proc/driver/nvidia/params")


@dataclass
class Check:
    name: str
    status: str          # ok | warn | problem
    detail: str
    fix: str = ""
    exit_code: int = 0   # for a problem: the exit code `smlens profile` would give


def check_ncu(explicit: str | None = None) -> tuple[Check, str | None]:
    try:
        path = ncu_mod.find_ncu(explicit)
    except SmlensError as err:
        return Check("ncu", "problem", "not found", str(err), err.exit_code), None
    version = ncu_mod.ncu_version(path)
    if version is None:
        return Check("ncu", "warn", f"{path}: version unreadable",
                     "check that `ncu --version` runs"), path
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major and major < 2023:
        return Check("ncu", "warn", f"{path} {version}",
                     "ncu before 2023 lacks some metrics the views read: update Nsight Compute"), path
    unseen = ncu_mod.version_warning(version)
    if unseen:
        return Check("ncu", "warn", f"{path} {version}", unseen), path
    return Check("ncu", "ok", f"{path} {version}"), path


def check_gpu() -> Check:
    gpus = ncu_mod.list_gpus()
    if gpus is None:
        proc = Path("/proc/driver/nvidia/gpus")
        if proc.is_dir() and any(proc.iterdir()):
            return Check("gpu", "warn", "a driver lists GPUs, but nvidia-smi is not on PATH",
                         "put nvidia-smi on PATH to see names and driver version")
        return Check("gpu", "problem", "no NVIDIA driver or GPU found (no nvidia-smi)",
                     "run on a machine with an NVIDIA GPU and its driver; `smlens profile --plan` "
                     "works anywhere", ncu_mod.EXIT_NO_GPU)
    if not gpus:
        return Check("gpu", "problem", "nvidia-smi lists no GPU",
                     "check the driver (`nvidia-smi`) and the container's GPU access",
                     ncu_mod.EXIT_NO_GPU)
    text = "; ".join(f"{g.index}: {g.name}, driver {g.driver}, cc {g.compute_capability}" for g in gpus)
    return Check("gpu", "ok", text)


def check_permission(ncu: str | None, deep: bool = False) -> Check:
    """The driver's RmProfilingAdminOnly says whether only admins may read counters; `deep`
    profiles one tiny kernel to know for sure."""
    fix = ("run as root, or set the driver option NVreg_RestrictProfilingToAdminUsers=0 "
           "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)")
    if deep and ncu:
        return _deep_permission(ncu, fix)
    admin_only = None
    try:
        for line in PARAMS.read_text().splitlines():
            if line.startswith("RmProfilingAdminOnly"):
                admin_only = line.split(":", 1)[1].strip() == "1"
    except OSError:
        pass
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if admin_only is None:
        return Check("counters", "warn", "could not read the driver's profiling setting",
                     "`smlens doctor --deep` profiles one kernel to find out")
    if admin_only and not is_root:
        return Check("counters", "problem", "only administrators may read GPU counters "
                     "(RmProfilingAdminOnly: 1) and this user is not root", fix,
                     ncu_mod.EXIT_COUNTER_PERMISSION)
    who = "root" if is_root else "any user"
    return Check("counters", "ok", f"readable by {who} (RmProfilingAdminOnly: {int(admin_only)})")


def _deep_permission(ncu: str, fix: str) -> Check:
    probe = [ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
             "--launch-count", "1", sys.executable, "-c",
             "import torch; x = torch.ones(1024, device='cuda'); (x + 1).sum().item()"]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as err:
        return Check("counters", "warn", f"the probe did not run: {err}", "")
    text = out.stdout + out.stderr
    if "ERR_NVGPUCTRPERM" in text:
        return Check("counters", "problem", "ncu was refused the counters (ERR_NVGPUCTRPERM)", fix,
                     ncu_mod.EXIT_COUNTER_PERMISSION)
    if "==PROF== Profiling" in text:
        return Check("counters", "ok", "profiled a probe kernel")
    last = (text.strip().splitlines() or ["no output"])[-1]
    return Check("counters", "warn", f"the probe profiled nothing: {last}",
                 "needs torch with CUDA for the probe")


def check_packages() -> list[Check]:
    checks = []
    for name, (purpose, required) in PACKAGES.items():
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            status = "problem" if required else "warn"
            checks.append(Check(f"package {name}", status, f"not installed ({purpose})",
                                f"pip install {name}", 2 if required else 0))
            continue
        detail = version
        if name == "torch":
            detail += _torch_cuda()
        checks.append(Check(f"package {name}", "ok", detail))
    return checks


def check_views(view_metrics: Callable[[], list[str]]) -> Check:
    """`view_metrics` lists the ncu metrics of all views (cli.py passes the views' own list)."""
    try:
        return Check("views", "ok", f"{len(view_metrics())} ncu metrics for all views")
    except Exception as err:  # noqa: BLE001 - any failure here is worth reporting, not crashing on
        return Check("views", "problem", f"views.registry unusable: {err}", "reinstall smlens", 2)


def _torch_cuda() -> str:
    """CUDA build and device count, asked of a child so this process does not load CUDA."""
    code = ("import torch; print(torch.version.cuda or 'cpu-only', "
            "torch.cuda.device_count() if torch.cuda.is_available() else 0)")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        cuda, count = out.stdout.split()
        return f", CUDA {cuda}, {count} device(s) visible"
    except (OSError, subprocess.SubprocessError, ValueError):
        return ", CUDA state unknown"


def run_checks(view_metrics: Callable[[], list[str]], ncu: str | None = None,
               deep: bool = False) -> list[Check]:
    ncu_check, ncu_path = check_ncu(ncu)
    return [ncu_check, check_gpu(), check_permission(ncu_path, deep), *check_packages(),
            check_views(view_metrics)]


def exit_code(checks: list[Check]) -> int:
    for check in checks:
        if check.status == "problem":
            return check.exit_code or 2
    return 0


def to_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
