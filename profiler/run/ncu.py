"""Nsight Compute (ncu) mechanics: find it, build its command lines, run it, read its progress.

ncu prints its own lines, prefixed `==PROF==`, `==WARNING==` or `==ERROR==`, among the profiled
program's output. One kernel's line is written in pieces while its replay passes run:

    ==PROF== Profiling "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT" - 12: 0%....50%....100% - 19 passes

so `ProgressReader` reads the stream as it comes (partial lines too) and turns it into events.
Failures become `NcuError`s with an exit code per cause (see EXIT_*), a message that says what
to do, and for a crashed workload its exit code and the end of its output.
"""
from __future__ import annotations

import csv
import glob
import io
import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from profiler.errors import BadInput, EnvironmentProblem, SmlensError

# Exit codes of `smlens profile`, one per cause (2 is bad input, as everywhere in smlens).
EXIT_NO_NCU = 3
EXIT_NO_GPU = 4
EXIT_COUNTER_PERMISSION = 5
EXIT_WORKLOAD_FAILED = 6
EXIT_TIME_LIMIT = 7
EXIT_NCU_FAILED = 8
EXIT_NOTHING_PROFILED = 9
EXIT_INTERRUPTED = 130

# Where ncu lives when it is not on PATH (the CUDA toolkit's and the standalone installer's places).
NCU_FALLBACKS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")


class NcuError(SmlensError):
    """ncu could not do the job; `partial` is set when some kernels were profiled before it stopped."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message, exit_code)


# --- finding ncu and a GPU ------------------------------------------------------------------

def find_ncu(explicit: str | None = None) -> str:
    """The ncu executable: `explicit` (--ncu or SMLENS_NCU), PATH, then the usual install places."""
    candidate = explicit or os.environ.get("SMLENS_NCU")
    if candidate:
        path = shutil.which(candidate)
        if path:
            return path
        raise EnvironmentProblem(f"ncu not found at {candidate!r}: give the path of the ncu "
                                 "executable (--ncu PATH or SMLENS_NCU)", EXIT_NO_NCU)
    path = shutil.which("ncu")
    if path:
        return path
    for pattern in NCU_FALLBACKS:
        for found in sorted(glob.glob(pattern), reverse=True):
            if os.access(found, os.X_OK):
                return found
    raise EnvironmentProblem(
        "ncu (Nsight Compute) not found on PATH: install the CUDA toolkit or Nsight Compute and "
        "put its ncu on PATH, or pass --ncu PATH (`smlens profile --plan` works without it)",
        EXIT_NO_NCU)


# ncu versions whose metric names and CSV layout smlens has been checked against (tests/data captures)
SEEN_VERSIONS = ("2025.3.1",)


def version_warning(version: str | None) -> str | None:
    """A line for a user whose ncu smlens has not met: metric names and the CSV layout can move."""
    if version is None or any(version == v or version.startswith(v + ".") for v in SEEN_VERSIONS):
        return None
    return (f"ncu {version} has not been seen by smlens (checked: {', '.join(SEEN_VERSIONS)}): "
            "if a view says n/a for lack of a metric, `ncu --query-metrics` shows this version's "
            "names; views still compute from what the capture has")


def ncu_version(ncu: str) -> str | None:
    """`2025.3.1.0` from `ncu --version`, or None when it cannot be read."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"Version\s+([0-9][0-9.]*)", out.stdout + out.stderr)
    return match.group(1) if match else None


@dataclass
class Gpu:
    index: int
    name: str
    driver: str | None = None
    compute_capability: str | None = None


def list_gpus() -> list[Gpu] | None:
    """The GPUs nvidia-smi sees; [] when it sees none; None when nvidia-smi is not there
    (then /proc/driver/nvidia decides, see `require_gpu`)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,driver_version,compute_cap",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for row in csv.reader(io.StringIO(out.stdout)):
        cells = [c.strip() for c in row]
        if len(cells) >= 2 and cells[0].isdigit():
            gpus.append(Gpu(int(cells[0]), cells[1], cells[2] if len(cells) > 2 else None,
                            cells[3] if len(cells) > 3 else None))
    return gpus


def require_gpu() -> list[Gpu]:
    gpus = list_gpus()
    if gpus is None:  # no nvidia-smi: trust the driver's own listing
        proc = Path("/proc/driver/nvidia/gpus")
        if proc.is_dir() and any(proc.iterdir()):
            return []
    if not gpus:
        raise EnvironmentProblem(
            "no NVIDIA GPU found (nvidia-smi lists none): run on a machine with a GPU and its "
            "driver, or use `smlens profile --plan` to see the ncu commands", EXIT_NO_GPU)
    return gpus


# --- command lines ----------------------------------------------------------------------------

@dataclass
class Invocation:
    """One ncu run over one program."""
    label: str                       # e.g. "cold" or "warm+decode"; names the report file
    program: list[str]
    cache_control: str = "all"       # ncu --cache-control: all (flush before each pass) | none
    nvtx_includes: list[str] = field(default_factory=list)
    graph_profiling: str | None = None
    launch_skip: int | None = None
    launch_count: int | None = None
    kernel_name: str | None = None
    expected_kernels: int | None = None
    phases: tuple = ()
    env: dict = field(default_factory=dict)  # for the program; PYTHONPATH is put in front of its own

    def report_stem(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.label)


def build_command(ncu: str, metrics: list[str], inv: Invocation, report: str | Path | None,
                  metrics_placeholder: str | None = None) -> list[str]:
    """The ncu argv for one invocation. `report` is the `--export` path (no extension needed);
    `metrics_placeholder` replaces the metric list for display."""
    if not metrics:
        raise BadInput("no ncu metrics to collect: choose at least one view or --metrics")
    if inv.cache_control not in ("all", "none"):
        raise BadInput(f"cache control {inv.cache_control!r}: all or none")
    cmd = [ncu, "--clock-control", "none", "--cache-control", inv.cache_control,
           "--metrics", metrics_placeholder or ",".join(metrics), "--print-units", "base"]
    if inv.nvtx_includes:
        cmd.append("--nvtx")
        for expr in inv.nvtx_includes:
            cmd += ["--nvtx-include", expr]
    else:
        cmd.append("--nvtx")  # record the ranges even when none filters: roles come from them
    if inv.graph_profiling:
        cmd += ["--graph-profiling", inv.graph_profiling]
    if inv.kernel_name:
        cmd += ["--kernel-name", inv.kernel_name]
    if inv.launch_skip:
        cmd += ["--launch-skip", str(inv.launch_skip)]
    if inv.launch_count:
        cmd += ["--launch-count", str(inv.launch_count)]
    cmd += ["--target-processes", "all"]
    if report is not None:
        cmd += ["--export", str(report), "--force-overwrite"]
    return cmd + list(inv.program)


def export_command(ncu: str, report: str | Path) -> list[str]:
    """Re-export a report as the raw page: one row per kernel, base units."""
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


# --- reading ncu's progress -----------------------------------------------------------------

# `... - 12: 0%...`, or with --launch-count `... - 0 (1/3): 0%...`
_PROFILING = re.compile(r'==PROF== Profiling "(?P<name>.*)"(?: - (?P<id>\d+))?'
                        r'(?: \((?P<index>\d+)/(?P<total>\d+)\))?:')
_PASSES = re.compile(r"-\s*(?P<passes>\d+)\s+pass(?:es)?")
_APP_ERROR = re.compile(r"==ERROR== The application returned an error code \((?P<code>-?\d+)\)")
_NO_GPU_SIGNS = ("no CUDA-capable device", "Found no NVIDIA driver", "No CUDA GPUs are available",
                 "CUDA driver version is insufficient", "cudaErrorNoDevice",
                 "no supported devices found", "No supported GPU")


@dataclass
class Event:
    kind: str          # started, pass, done, cut (stopped mid-kernel), connected, error, warning, output
    text: str = ""
    kernel: str | None = None
    passes: int | None = None
    percent: int | None = None   # of the current kernel's replay passes
    total: int | None = None     # kernels ncu will profile, when it says (--launch-count)


class ProgressReader:
    """Feed it ncu's output as it arrives; it returns events and keeps what a failure report needs."""

    def __init__(self, tail_lines: int = 20):
        self._buffer = ""
        self._current: str | None = None
        self._marks_seen = 0
        self.kernels_done = 0
        self.passes_last: int | None = None
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.app_exit_code: int | None = None
        self.output_tail: deque[str] = deque(maxlen=tail_lines)  # the program's own lines
        self.report_paths: list[str] = []

    def feed(self, text: str) -> list[Event]:
        events: list[Event] = []
        self._buffer += text.replace("\r", "\n")
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            events += self._line(line, complete=True)
        if self._buffer.startswith("==PROF== Profiling"):
            events += self._line(self._buffer, complete=False)
        return events

    def close(self) -> list[Event]:
        rest, self._buffer = self._buffer, ""
        return self._line(rest, complete=True) if rest else []

    def _line(self, line: str, complete: bool) -> list[Event]:
        events: list[Event] = []
        if line.startswith("==PROF== Profiling"):
            match = _PROFILING.match(line)
            name = match.group("name") if match else None
            if name != self._current:
                self._current, self._marks_seen = name, 0
                total = int(match.group("total")) if match and match.group("total") else None
                events.append(Event("started", line, kernel=name, total=total))
            progress = line[match.end():] if match else ""
            marks = progress.count("%") + progress.count(".")
            if marks > self._marks_seen:
                self._marks_seen = marks
                # "0%....50%....100%": eleven marks, ten steps of 10 %
                events.append(Event("pass", line, kernel=name, percent=min(100, (marks - 1) * 10)))
            passes = _PASSES.search(progress)
            if complete:
                # A kernel cut short (Ctrl-C, time limit) ends its line without "100%"; ncu does
                # not keep it in the report.
                if "100%" in progress:
                    self.kernels_done += 1
                    self.passes_last = int(passes.group("passes")) if passes else None
                    events.append(Event("done", line, kernel=name, passes=self.passes_last))
                else:
                    events.append(Event("cut", line, kernel=name))
                self._current, self._marks_seen = None, 0
            return events
        if not complete:
            return events
        if line.startswith("==PROF== Connected"):
            events.append(Event("connected", line))
        elif line.startswith("==PROF== Report:"):
            self.report_paths.append(line.split(":", 1)[1].strip())
        elif line.startswith("==ERROR=="):
            self.errors.append(line)
            app = _APP_ERROR.search(line)
            if app:
                self.app_exit_code = int(app.group("code"))
            events.append(Event("error", line))
        elif line.startswith("==WARNING=="):
            self.warnings.append(line)
            events.append(Event("warning", line))
        elif line.startswith("==PROF=="):
            pass
        elif line.strip():
            self.output_tail.append(line)
            events.append(Event("output", line))
        return events

    def all_text(self) -> str:
        return "\n".join(self.errors + self.warnings + list(self.output_tail))


# --- running ----------------------------------------------------------------------------------

@dataclass
class RunResult:
    returncode: int | None
    reader: ProgressReader
    interrupted: bool = False
    timed_out: bool = False
    seconds: float = 0.0
    log_path: Path | None = None


def run_ncu(cmd: list[str], on_events: Callable[[list[Event]], None] | None = None,
            deadline: float | None = None, log_path: Path | None = None,
            env: dict | None = None, grace_s: float = 60.0) -> RunResult:
    """Run ncu, reading its output as it comes. Ctrl-C or the deadline sends SIGINT to ncu and its
    program (as a terminal would), so ncu writes what it has profiled; a second Ctrl-C, or
    `grace_s` without an exit, sends SIGKILL."""
    reader = ProgressReader()
    started = time.monotonic()
    log = open(log_path, "w", encoding="utf-8", errors="replace") if log_path else None
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as err:
        if log:
            log.close()
        raise EnvironmentProblem(f"could not start ncu ({cmd[0]}): {err}", EXIT_NO_NCU) from None
    result = RunResult(None, reader, log_path=log_path)
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    stop_sent_at: float | None = None
    with _CtrlC() as ctrl_c:
        try:
            while True:
                ready = selector.select(timeout=0.25)
                if ready:
                    chunk = os.read(proc.stdout.fileno(), 65536)
                    if not chunk:
                        break
                    text = chunk.decode("utf-8", errors="replace")
                    if log:
                        log.write(text)
                    events = reader.feed(text)
                    if on_events and events:
                        on_events(events)
                now = time.monotonic()
                if ctrl_c.count:
                    result.interrupted = True
                elif deadline is not None and now > deadline:
                    result.timed_out = True
                if stop_sent_at is None and (result.interrupted or result.timed_out):
                    _signal_group(proc, signal.SIGINT)
                    stop_sent_at = now
                if stop_sent_at is not None and (now - stop_sent_at > grace_s or ctrl_c.count > 1):
                    _signal_group(proc, signal.SIGKILL)
            events = reader.close()
            if on_events and events:
                on_events(events)
            waited_from = time.monotonic()
            while result.returncode is None:
                try:
                    result.returncode = proc.wait(timeout=0.25)
                except subprocess.TimeoutExpired:
                    if ctrl_c.count > 1 or time.monotonic() - waited_from > grace_s:
                        _signal_group(proc, signal.SIGKILL)
            result.interrupted = result.interrupted or ctrl_c.count > 0
        finally:
            selector.close()
            proc.stdout.close()
            if proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            if log:
                log.close()
    result.seconds = time.monotonic() - started
    return result


class _CtrlC:
    """Counts Ctrl-Cs while ncu runs instead of raising KeyboardInterrupt wherever Python happens
    to be (inside an import or a C extension that can abort the interpreter); the loop above polls
    the count. Outside the main thread (no signal handlers there) it counts nothing."""

    def __init__(self):
        self.count = 0
        self._previous = None

    def _handle(self, _signum, _frame) -> None:
        self.count += 1

    def __enter__(self) -> "_CtrlC":
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread
            self._previous = None
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# A plain metric name ncu does not know gives "n/a" values (the capture reader notes it); a
# `regex:` entry that matches nothing stops ncu with this line.
_MISSING_METRIC = re.compile(r"==ERROR== Failed to find metric (\S+)")


def diagnose(result: RunResult, what: str = "the workload") -> NcuError | None:
    """The failure a finished run shows, or None when it went well. Order matters: a missing
    permission or GPU also makes the program fail, and should be named as the cause."""
    reader = result.reader
    text = reader.all_text()
    if "ERR_NVGPUCTRPERM" in text:
        return NcuError(
            "no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM): run as root, "
            "or let all users profile (driver option NVreg_RestrictProfilingToAdminUsers=0, see "
            "https://developer.nvidia.com/ERR_NVGPUCTRPERM)", EXIT_COUNTER_PERMISSION)
    if any(sign.lower() in text.lower() for sign in _NO_GPU_SIGNS):
        return NcuError(f"{what} found no usable NVIDIA GPU: run on a machine with a GPU and its "
                        "driver (see `smlens doctor`)", EXIT_NO_GPU)
    missing = _MISSING_METRIC.search(text)
    if missing:  # ncu stops at the first kernel (seen on the H200 for a regex that matched nothing)
        return NcuError(
            f"ncu has no metric {missing.group(1)} for this GPU: `ncu --query-metrics --chip <chip>` "
            "lists the names it has; collect fewer views (--views) or pass --metrics without it",
            EXIT_NCU_FAILED)
    if result.interrupted:
        return NcuError(f"interrupted after {reader.kernels_done} kernel(s)", EXIT_INTERRUPTED)
    if result.timed_out:
        return NcuError(f"time limit reached after {reader.kernels_done} kernel(s)",
                        EXIT_TIME_LIMIT)
    code = reader.app_exit_code
    if code is None and result.returncode not in (0, None) and reader.kernels_done and not reader.errors:
        code = result.returncode
    if code is not None and code != 0:
        tail = " | ".join(list(reader.output_tail)[-6:]) or "(no output)"
        return NcuError(f"{what} failed with exit code {code} after {reader.kernels_done} profiled "
                        f"kernel(s); its last output: {tail}", EXIT_WORKLOAD_FAILED)
    if result.returncode not in (0, None):
        detail = reader.errors[-1] if reader.errors else " | ".join(list(reader.output_tail)[-4:])
        return NcuError(f"ncu failed (exit code {result.returncode}): {detail or 'no message'}",
                        EXIT_NCU_FAILED)
    return None
