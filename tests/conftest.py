"""Shared fixtures (the real H200 captures in tests/data: tests/data/PROVENANCE.md) and the suite's
markers, set in one place:

- `slow`: a test that took over 1.5 s on the 2-core machine (a subprocess, a server, a JVM, a browser,
  torch.compile, a build), or that shares a module fixture whose setup took that long, as
  tests/durations.json records (tests/suite_timing.py; `bash scripts/test.sh --record-durations`
  measures again). `bash scripts/test.sh --quick` is `-m "not slow"`: every file keeps its cheap
  tests there.
- `record`: a test under tests/records, which reads back a committed record of a past experiment
  (the H200's calls) against what the code adopts now; it builds and runs nothing.
- `cuda_build`: compiles CUDA (nvcc, or Triton for sm_90) to read the SASS back. CI (CI set) without a
  GPU skips it, as it cannot use the build; SMLENS_TEST_CUDA_BUILD=1 builds anyway, =0 never.
- `xdist_group`: under `-n 2 --dist loadgroup` a file's tests that share a module-scoped fixture (one
  torch.compile'd program, a vLLM engine, Spark's JVM, Chromium, a computed report) stay on one
  worker, which computes it once: split over two workers each paid it (140 s of Inductor builds
  where one would do). The other tests go one by one to whichever worker is free, longest first.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import suite_timing

DATA = Path(__file__).parent / "data"
TESTS = Path(__file__).parent

# An output width is a terminal's: pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their
# environment where pytest was started without them, and smlens takes an exported COLUMNS as the user's
# width, so under `-n 2` piped output was cut to 80 columns (test_views_cli, test_gate_cli). The
# tests that want a width set it themselves (monkeypatch.setenv("COLUMNS", ...)).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def _gpu_visible() -> bool:
    return Path("/dev/nvidia0").exists() or any(Path("/proc/driver/nvidia/gpus").glob("*"))


def cuda_build_skip_reason() -> str | None:
    """Why a CUDA build is not compiled here, None where it is."""
    choice = os.environ.get("SMLENS_TEST_CUDA_BUILD", "")
    if choice == "1":
        return None
    if choice == "0":
        return "SMLENS_TEST_CUDA_BUILD=0: no CUDA build"
    if os.environ.get("CI") and not _gpu_visible():
        return "CI without a GPU cannot use this CUDA build, so it is not compiled (SMLENS_TEST_CUDA_BUILD=1 builds it)"
    return None


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help=f"write what each test took into {suite_timing.RECORD.name} (the slow marker's source)")


def pytest_configure(config):
    if config.getoption("--record-durations"):
        config.pluginmanager.register(suite_timing.DurationRecorder(), "smlens-durations")


# first: pytest-xdist's worker reads the xdist_group marks in its own hook of this name
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    cuda_skip = cuda_build_skip_reason()
    for item in items:
        if TESTS / "records" in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.record)
        if item.get_closest_marker("cuda_build") is not None:
            item.add_marker(pytest.mark.slow)
            if cuda_skip:
                item.add_marker(pytest.mark.skip(reason=cuda_skip))
    suite_timing.mark_and_order(items, suite_timing.load_record(), under_xdist=hasattr(config, "workerinput"))


# Shapes of the targeted/sections captures (their NVTX ranges carry none): PROVENANCE.md.
TARGETED_SHAPES = {
    "prefill/qkv_proj": (2048, 3072, 2048), "prefill/o_proj": (2048, 2048, 2048),
    "prefill/gate_up_proj": (2048, 11264, 2048), "prefill/down_proj": (2048, 2048, 5632),
    "decode/qkv_proj": (4, 3072, 2048), "decode/o_proj": (4, 2048, 2048),
    "decode/gate_up_proj": (4, 11264, 2048), "decode/down_proj": (4, 2048, 5632),
}


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def targeted_capture():
    from profiler.ingest.capture import read_capture

    return read_capture(DATA / "targeted_raw.csv", shapes=TARGETED_SHAPES)


@pytest.fixture(scope="session")
def sections_capture():
    from profiler.ingest.capture import read_capture

    return read_capture(DATA / "sections_raw.csv", shapes=TARGETED_SHAPES)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (moto) on 127.0.0.1 for the session; see tests/s3server.py."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from tests.s3server import s3_server as start

    with start() as server:
        yield server


@pytest.fixture()
def s3_store(s3_server, monkeypatch) -> str:
    """A fresh bucket on the loopback server, the AWS environment pointing at it, and the store URL."""
    import uuid

    bucket = s3_server.make_bucket(f"smlens-{uuid.uuid4().hex[:12]}")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{bucket}/team/store"
