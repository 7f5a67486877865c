"""`smlens report` and `smlens demo` on the command line."""
from __future__ import annotations

import json

import pytest

from tests.cli import smlens
from tests.conftest import DATA


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The targeted and decode12 captures in a store."""
    folder = tmp_path_factory.mktemp("store")
    shapes = folder / "shapes.txt"
    shapes.write_text("prefill/qkv_proj 2048 3072 2048\ndecode/qkv_proj 4 3072 2048\n")
    for path, name in ((DATA / "targeted_raw.csv", "targeted"), (DATA / "decode12_raw.csv", "decode12")):
        code, _, err = smlens("ingest", path, "--store", folder / "s", "--name", name, "--shapes", shapes)
        assert code == 0, err
    return folder / "s"


def test_demo_ingests_the_bundled_capture_prints_the_gap_and_writes_the_report(tmp_path):
    out = tmp_path / "demo.html"
    code, stdout, stderr = smlens("demo", "-o", out)
    assert code == 0, stderr
    assert "decode" in stdout and "qkv_proj" in stdout and f"wrote {out}" in stdout
    text = out.read_text(encoding="utf-8")
    assert "smlens report: h200-demo" in text and text.count('class="fig"') == 7
    assert 188 * 1 <= text.count("<tr>") and len(text.encode()) < 6_000_000 + 2048 * 188


def test_demo_json_carries_the_views(tmp_path):
    code, stdout, _ = smlens("demo", "-o", tmp_path / "d.html", "--format", "json")
    assert code == 0
    out = json.loads(stdout)
    assert out["bytes"] == (tmp_path / "d.html").stat().st_size
    assert len(out["views"]["kernels"]) == 188
    decode_qkv = [g for g in out["views"]["gap"] if g["phase"] == "decode" and g["role"] == "qkv_proj"][0]
    assert decode_qkv["fill_factor"] == pytest.approx(0.5)  # shapes came with the demo


def test_report_of_a_run_against_a_baseline(store, tmp_path):
    out = tmp_path / "cmp.html"
    code, stdout, stderr = smlens("report", "decode12", "--baseline", "targeted", "--store", store,
                                  "-o", out, "--format", "json")
    assert code == 0, stderr
    result = json.loads(stdout)
    assert result["report"] == str(out) and result["bytes"] == out.stat().st_size
    text = out.read_text(encoding="utf-8")
    assert "against baseline <b>targeted</b>" in text and "\u25bc" in text


def test_report_filters_by_phase_and_role(store, tmp_path):
    out = tmp_path / "f.html"
    code, _, stderr = smlens("report", "targeted", "--phase", "decode", "--role", "qkv_proj",
                             "--store", store, "-o", out)
    assert code == 0, stderr
    assert "only phase decode, role qkv_proj" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("args,message", [
    (["report", "nope"], "no run 'nope'"),
    (["report", "targeted", "--baseline", "nope"], "no run 'nope'"),
    (["report", "--phase", "prefil"], "--phase prefil: expected one of"),
    (["report", "--role", "mlp"], "--role mlp: expected one of"),
    (["report", "decode12", "--phase", "cold_prefill"], "has no kernels in phase cold_prefill"),
])
def test_bad_input_is_one_line_and_exit_2(store, tmp_path, args, message):
    code, stdout, stderr = smlens(*args, "--store", store, "-o", tmp_path / "x.html")
    assert code == 2
    assert stderr.startswith("smlens: ") and message in stderr and stderr.count("\n") == 1
    assert not (tmp_path / "x.html").exists()


def test_output_that_is_a_folder_or_unwritable(store, tmp_path):
    code, _, stderr = smlens("report", "--store", store, "-o", tmp_path)
    assert code == 2 and "is a folder" in stderr
    (tmp_path / "file").write_text("not a folder")  # (as root, permissions would not stop it)
    code, _, stderr = smlens("report", "--store", store, "-o", tmp_path / "file" / "r.html")
    assert code == 2 and stderr.startswith("smlens: cannot write") and stderr.count("\n") == 1


def test_report_without_a_store(tmp_path):
    code, _, stderr = smlens("report", "--store", tmp_path / "none", "-o", tmp_path / "r.html")
    assert code == 2 and stderr.startswith("smlens: ")
