"""Shared fixtures: the real H200 captures in tests/data (see tests/data/PROVENANCE.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"

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
