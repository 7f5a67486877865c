"""ncu mechanics with no GPU: command lines, progress lines, failure diagnosis, CSV merging."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from profiler.run import ncu
from profiler.ingest.capture import read_capture
from profiler.errors import BadInput, EnvironmentProblem

FAKES = Path(__file__).parent / "fakes"
DATA = Path(__file__).parent / "data"

# ncu's output for two kernels, as its lines come (the program prints between them).
NCU_OUTPUT = (
    "==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling "
    "results may be inconsistent.\n"
    "==PROF== Connected to process 612 (/usr/bin/python3.12)\n"
    '==PROF== Profiling "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT" - 0: 0%....50%....100% - 19 passes\n'
    "warming up...\n"
    '==PROF== Profiling "void cublasLt::splitKreduce_kernel<32, 16, int, float>(...)" - 1: '
    "0%....50%....100% - 19 passes\n"
    "Traceback (most recent call last):\n"
    "RuntimeError: CUDA out of memory\n"
    "==PROF== Disconnected from process 612\n"
    "==ERROR== The application returned an error code (1).\n"
)


@pytest.fixture
def fake_path(monkeypatch):
    """PATH with the fake ncu and nvidia-smi, and no fallback install places."""
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", ())
    monkeypatch.delenv("SMLENS_NCU", raising=False)


def test_command_line():
    inv = ncu.Invocation("cold", ["python3", "-m", "w", "--x", "1"], cache_control="all",
                         nvtx_includes=["smlens@cold_prefill/layer_0/", "smlens@decode/step_1/layer_0/"],
                         graph_profiling="node", launch_count=5)
    cmd = ncu.build_command("ncu", ["gpu__time_duration.sum", "launch__grid_size"], inv, "/r/cold")
    text = " ".join(cmd)
    assert cmd[0] == "ncu" and cmd[-5:] == ["python3", "-m", "w", "--x", "1"]
    assert "--clock-control none" in text and "--cache-control all" in text
    assert "--metrics gpu__time_duration.sum,launch__grid_size" in text
    assert cmd.count("--nvtx-include") == 2 and "--nvtx" in cmd
    assert "--graph-profiling node" in text and "--launch-count 5" in text
    assert "--export /r/cold --force-overwrite" in text
    shown = ncu.build_command("ncu", ["a"], inv, "/r/cold", metrics_placeholder="<METRICS>")
    assert "<METRICS>" in shown
    with pytest.raises(BadInput, match="no ncu metrics"):
        ncu.build_command("ncu", [], inv, None)
    with pytest.raises(BadInput, match="cache control"):
        ncu.build_command("ncu", ["a"], ncu.Invocation("x", ["p"], cache_control="some"), None)
    assert ncu.export_command("ncu", "/r/cold.ncu-rep") == [
        "ncu", "--import", "/r/cold.ncu-rep", "--csv", "--page", "raw", "--print-units", "base"]


@pytest.mark.parametrize("chunk", [1, 7, 64, 100000])
def test_progress_lines_in_any_chunking(chunk):
    reader = ncu.ProgressReader()
    events = []
    for i in range(0, len(NCU_OUTPUT), chunk):
        events += reader.feed(NCU_OUTPUT[i:i + chunk])
    events += reader.close()
    kinds = [e.kind for e in events]
    assert kinds.count("started") == 2 and kinds.count("done") == 2 and kinds.count("connected") == 1
    done = [e for e in events if e.kind == "done"]
    assert [e.kernel for e in done] == ["nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT",
                                        "void cublasLt::splitKreduce_kernel<32, 16, int, float>(...)"]
    assert all(e.passes == 19 for e in done)
    percents = [e.percent for e in events if e.kind == "pass"]
    assert percents[-1] == 100 and percents == sorted(percents) or chunk < 100000
    assert reader.kernels_done == 2 and reader.app_exit_code == 1
    assert list(reader.output_tail) == ["warming up...", "Traceback (most recent call last):",
                                        "RuntimeError: CUDA out of memory"]


def test_partial_kernel_line_reports_passes_as_they_come():
    reader = ncu.ProgressReader()
    first = reader.feed('==PROF== Profiling "gemm_kernel" - 3: 0%')
    assert [e.kind for e in first] == ["started", "pass"] and first[1].percent == 0
    more = reader.feed("....50%")
    assert [e.kind for e in more] == ["pass"] and more[0].percent == 50
    assert reader.kernels_done == 0
    end = reader.feed("....100% - 38 passes\n")
    assert [e.kind for e in end] == ["pass", "done"] and end[-1].passes == 38


def _result(text, **kw):
    reader = ncu.ProgressReader()
    reader.feed(text)
    reader.close()
    return ncu.RunResult(kw.pop("returncode", 0), reader, **kw)


@pytest.mark.parametrize("text, kw, code, words", [
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
     "Performance Counters on the target device 0.\n", {"returncode": 1}, ncu.EXIT_COUNTER_PERMISSION,
     "NVreg_RestrictProfilingToAdminUsers"),
    ("RuntimeError: Found no NVIDIA driver on your system.\n==ERROR== The application returned an "
     "error code (1).\n", {"returncode": 1}, ncu.EXIT_NO_GPU, "no usable NVIDIA GPU"),
    (NCU_OUTPUT, {"returncode": 1}, ncu.EXIT_WORKLOAD_FAILED, "exit code 1 after 2 profiled"),
    (NCU_OUTPUT, {"interrupted": True}, ncu.EXIT_INTERRUPTED, "interrupted after 2"),
    ('==PROF== Profiling "k" - 0: 0%....50%....100% - 19 passes\n', {"timed_out": True},
     ncu.EXIT_TIME_LIMIT, "time limit reached after 1"),
    ("==ERROR== unrecognised option '--bogus'. Use --help for further details.\n",
     {"returncode": 1}, ncu.EXIT_NCU_FAILED, "unrecognised option"),
])
def test_diagnose(text, kw, code, words):
    error = ncu.diagnose(_result(text, **kw))
    assert error is not None and error.exit_code == code and words in str(error)


def test_diagnose_success():
    ok = '==PROF== Profiling "k" - 0: 0%....50%....100% - 19 passes\n==PROF== Disconnected from process 1\n'
    assert ncu.diagnose(_result(ok)) is None


def test_crash_message_carries_the_end_of_the_output():
    error = ncu.diagnose(_result(NCU_OUTPUT, returncode=1))
    assert "RuntimeError: CUDA out of memory" in str(error)


def test_find_ncu(fake_path, monkeypatch):
    assert ncu.find_ncu() == str(FAKES / "ncu")
    assert ncu.ncu_version(ncu.find_ncu()) == "2025.3.1.0"
    monkeypatch.setenv("SMLENS_NCU", "/nowhere/ncu")
    with pytest.raises(EnvironmentProblem, match="/nowhere/ncu") as err:
        ncu.find_ncu()
    assert err.value.exit_code == ncu.EXIT_NO_NCU


def test_no_ncu_anywhere(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "NCU_FALLBACKS", (str(tmp_path / "opt" / "*" / "ncu"),))
    monkeypatch.delenv("SMLENS_NCU", raising=False)
    with pytest.raises(EnvironmentProblem, match="not found on PATH.*--plan") as err:
        ncu.find_ncu()
    assert err.value.exit_code == ncu.EXIT_NO_NCU
    # the standalone installer's place is found when PATH misses it
    fallback = tmp_path / "opt" / "2025.3.1" / "ncu"
    fallback.parent.mkdir(parents=True)
    shutil.copy(FAKES / "ncu", fallback)
    assert ncu.find_ncu() == str(fallback)


def test_gpus(fake_path, monkeypatch):
    gpus = ncu.require_gpu()
    assert [(g.name, g.driver, g.compute_capability) for g in gpus] == [("NVIDIA H200", "580.159.04", "9.0")]
    monkeypatch.setenv("FAKE_SMI_MODE", "none")
    with pytest.raises(EnvironmentProblem, match="no NVIDIA GPU") as err:
        ncu.require_gpu()
    assert err.value.exit_code == ncu.EXIT_NO_GPU


def test_progress_line_with_launch_count():
    """ncu 2025.3 with --launch-count numbers kernels `- 0 (1/3):` (seen on the H200)."""
    reader = ncu.ProgressReader()
    events = reader.feed('==PROF== Profiling "vectorized_elementwise_kernel" - 0 (1/3): '
                         "0%....50%....100% - 1 pass\n")
    started = [e for e in events if e.kind == "started"][0]
    assert started.kernel == "vectorized_elementwise_kernel" and started.total == 3
    assert [e.passes for e in events if e.kind == "done"] == [1]


RUNS = DATA / "h200_runs"


@pytest.mark.parametrize("log, kernels, passes", [
    ("llama-3.1-8b-b8-p512-cold.log", 17, 20), ("llama-3.1-8b-b8-p512-warm_decode.log", 37, 20)])
def test_real_ncu_output(log, kernels, passes):
    """ncu's own lines from the H200 runs: every kernel counted, its passes, the report path."""
    reader = ncu.ProgressReader()
    text = (RUNS / log).read_text()
    events = []
    for i in range(0, len(text), 37):
        events += reader.feed(text[i:i + 37])
    events += reader.close()
    assert reader.kernels_done == kernels and reader.passes_last == passes
    assert sum(e.kind == "connected" for e in events) == 1
    assert reader.report_paths and reader.report_paths[0].endswith(".ncu-rep")
    assert reader.errors == [] and reader.app_exit_code is None
    # the program's own line (the workload's JSON summary) is kept for error messages
    assert any('"workload": "decoder"' in line for line in reader.output_tail)


def test_real_time_limited_run():
    """The H200 run stopped by --time-limit: SIGINT cut the 23rd kernel short, ncu kept 22."""
    reader = ncu.ProgressReader()
    events = reader.feed((RUNS / "time-limited-partial.log").read_text()) + reader.close()
    kernels = read_capture(RUNS / "time-limited-partial.csv.gz").kernels
    assert reader.kernels_done == len(kernels) == 22
    assert [e.kind for e in events].count("cut") == 1
    error = ncu.diagnose(ncu.RunResult(-2, reader, timed_out=True))
    assert error.exit_code == ncu.EXIT_TIME_LIMIT and "after 22 kernel(s)" in str(error)


STUBBORN_NCU = ("import signal, sys, time\n"
                "signal.signal(signal.SIGINT, signal.SIG_IGN)  # an ncu that does not stop\n"
                "print('==PROF== Profiling \"k\" - 0: 0%....50%....100% - 3 passes', flush=True)\n"
                "time.sleep(60)  # then exits 0: only a kill gives -9 sooner\n")


def test_ctrl_c_never_cuts_the_progress_callback_and_twice_kills_ncu():
    """Ctrl-C is counted, not raised wherever Python is: the progress callback that sees it runs to
    its end (a KeyboardInterrupt there could land inside an import or a C extension). ncu gets
    SIGINT; one that ignores it is killed by the second Ctrl-C, well before the grace period."""
    import signal
    finished = []

    def on_events(events):
        if not finished:  # two Ctrl-Cs, their Python handler run before raise_signal returns
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
        finished.append(len(events))

    handler_before = signal.getsignal(signal.SIGINT)
    result = ncu.run_ncu([sys.executable, "-c", STUBBORN_NCU], on_events=on_events, grace_s=600)
    assert finished and result.interrupted and result.returncode == -signal.SIGKILL
    assert result.reader.kernels_done == 1 and signal.getsignal(signal.SIGINT) is handler_before
