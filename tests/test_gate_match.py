"""`smlens gate` compares like with like, names stored runs before paths, and exits 2 (reports
written) for anything it cannot judge; re-ingest updates a run's name and tags; rm refuses what is
ambiguous and asks before removing several runs."""
from __future__ import annotations

import csv
import gzip
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import commands
from profiler.ingest.store import Store
from tests.cli import smlens
from tests.conftest import DATA
from tests.test_bad_input import assert_refused
from tests.test_store import snapshot

RUNS = DATA / "h200_runs"
DET = DATA / "h200_det"


def gate(*args):
    return smlens("gate", *args, "--format", "json")


def refused_as_mismatch(code: int, out: str, err: str, *words: str) -> dict:
    line = assert_refused(code, out, err, "do not compare like with like", "--allow-mismatch", *words)
    document = json.loads(out)
    assert document["verdict"] == "could not judge" and document["problems"] == [line[len("smlens: "):]]
    return document


def test_a_det_gemm_capture_against_a_decoder_capture_is_refused(tmp_path):
    junit, markdown = tmp_path / "gate.xml", tmp_path / "gate.md"
    code, out, err = gate("-b", DET / "det-gemm-det.csv.gz", "-c", RUNS / "llama-3.1-8b-b1-p512.csv.gz",
                          "--junit", junit, "--markdown", markdown)
    refused_as_mismatch(code, out, err, "phases decode,warm_prefill vs cold_prefill,decode,warm_prefill")
    assert "do not compare like with like" in markdown.read_text()
    errors = list(ET.parse(junit).getroot().iter("error"))
    assert len(errors) == 1 and "like with like" in errors[0].get("message")
    # told to, it compares them, and says so
    code, out, err = gate("-b", DET / "det-gemm-det.csv.gz", "-c", RUNS / "llama-3.1-8b-b1-p512.csv.gz",
                          "--allow-mismatch")
    document = json.loads(out)
    assert document["comparisons"] and "like with like" not in err
    assert any(w.startswith("compared despite --allow-mismatch: current") for w in document["warnings"])


def test_another_model_and_batch_is_refused():
    code, out, err = gate("-b", RUNS / "llama-3.1-8b-b1-p512.csv.gz", "-c", RUNS / "llama-3.1-70b-b8-p512.csv.gz")
    refused_as_mismatch(code, out, err, "model shape cold_prefill/attention B=1 H=32 Sq=512 Skv=512 D=128 "
                        "vs B=8 H=64 Sq=512 Skv=512 D=128")


def _as_a100(source: Path, target: Path) -> Path:
    text = gzip.decompress(source.read_bytes()).decode()
    lines = text.split("\n")
    header_at = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    cc = next(csv.reader([lines[header_at]])).index("CC")
    out = lines[: header_at + 2]
    for line in lines[header_at + 2:]:
        if line:
            cells = next(csv.reader([line]))
            cells[cc] = "8.0"
            line = ",".join('"' + c.replace('"', '""') + '"' for c in cells)
        out.append(line.replace('"NVIDIA H200"', '"NVIDIA A100-SXM4-80GB"'))
    target.write_bytes(gzip.compress("\n".join(out).encode()))
    return target


def test_another_device_is_refused(tmp_path):
    a100 = _as_a100(RUNS / "gate-b1-r2.csv.gz", tmp_path / "a100.csv.gz")
    code, out, err = gate("-b", RUNS / "gate-b1-r1.csv.gz", "-c", a100)
    refused_as_mismatch(code, out, err, "device NVIDIA H200 (cc 9.0) vs NVIDIA A100-SXM4-80GB (cc 8.0)")


def test_an_export_without_phase_ranges_against_a_phased_run_is_refused(tmp_path):
    """The public A100 export names no device, no cc and no NVTX range: once it passed the gate
    against an H200 decoder capture (27 kernels gone, 54 new, nothing compared)."""
    a100 = DATA / "public" / "a100_bert_fmha_details.csv.gz"
    code, out, err = gate("-b", a100, "-c", DATA / "decode12_details.csv")
    refused_as_mismatch(code, out, err, "phases none vs decode")
    # told to compare them, it still cannot judge: no kernel group is on both sides
    markdown = tmp_path / "gate.md"
    code, out, err = gate("-b", a100, "-c", DATA / "decode12_details.csv", "--allow-mismatch",
                          "--markdown", markdown)
    document = json.loads(out)
    assert code == 2 and document["verdict"] == "could not judge"
    assert any("no kernel group in common" in p for p in document["problems"])
    assert {c["status"] for c in document["comparisons"]} == {"appeared", "disappeared"}
    assert "no kernel group in common" in markdown.read_text()


def test_two_programs_with_nothing_to_compare_but_their_kernels_are_refused():
    """Two public A100 captures of unrelated programs (a BERT attention export, a CUTLASS
    back-to-back GEMM report): no tags, NVTX roles or phases, and no kernel in common. Once judged
    a regression on the one kernel family both ran; a capture against itself is still judged."""
    bert = DATA / "public" / "a100_bert_fmha_details.csv.gz"
    cutlass = DATA / "public" / "a100pcie_cutlass_b2b_gemm.ncu-rep.gz"
    code, out, err = gate("-b", bert, "-c", cutlass)
    refused_as_mismatch(code, out, err, "the kernels both ran are 0% of")
    code, out, err = gate("-b", cutlass, "-c", cutlass)
    assert code == 0 and "like with like" not in err, err


def test_repeated_runs_of_one_configuration_are_judged():
    code, out, err = gate("-b", RUNS / "gate-b1-r1.csv.gz", "-c", RUNS / "gate-b1-r2.csv.gz")
    assert code in (0, 1) and "like with like" not in err, err
    assert json.loads(out)["verdict"] in ("pass", "regression")


def test_the_readme_det_gemm_comparison_is_like_with_like(tmp_path):
    store = tmp_path / "store"
    for impl in ("det", "cublas_bf16"):
        tags = {"workload": "det-gemm", "model": "llama-3.1-8b", "impl": impl}
        Store(store).ingest(DET / f"det-gemm-{impl}.csv.gz", name=f"det-gemm-llama-3.1-8b-{impl}", tags=tags)
    code, out, err = gate("--baseline", "tag:impl=cublas_bf16", "--current", "tag:impl=det", "--store", store)
    assert "like with like" not in err and json.loads(out)["comparisons"], err


def test_a_stored_run_named_like_a_file_is_found_before_any_file(tmp_path, monkeypatch):
    store = tmp_path / "store"
    for name in ("gate-b1-r1.csv.gz", "gate-b1-r2.csv.gz"):
        code, _, err = smlens("ingest", RUNS / name, "--store", store)  # the default name: the file's
        assert code == 0, err
    monkeypatch.chdir(tmp_path)  # where no such file is
    code, out, err = gate("-b", "gate-b1-r1.csv.gz", "-c", "gate-b1-r2.csv.gz", "--store", store)
    assert code in (0, 1), err
    document = json.loads(out)
    assert document["baseline_runs"][0].startswith("gate-b1-r1.csv.gz (")
    Path("gate-b1-r1.csv.gz").write_bytes(b"junk")  # a file of that name: the stored run still wins
    code, out, err = gate("-b", "gate-b1-r1.csv.gz", "-c", "gate-b1-r2.csv.gz", "--store", store)
    assert code in (0, 1), err
    code, _, err = gate("-b", "gate-b1-r9.csv.gz", "-c", "gate-b1-r2.csv.gz", "--store", store)
    assert_refused(code, "", err, "--baseline gate-b1-r9.csv.gz: no such file")


# --- re-ingest and rm -------------------------------------------------------------------------

def test_re_ingest_with_a_new_name_or_tag_updates_the_run(tmp_path):
    store = tmp_path / "store"
    raw = DATA / "decode12_raw.csv"
    code, out, _ = smlens("ingest", raw, "--store", store, "--name", "a", "--tag", "x=1", "--format", "json")
    run_id = json.loads(out)[0]["id"]
    code, out, err = smlens("ingest", raw, "--store", store, "--name", "b", "--tag", "y=2")
    assert code == 0 and err.strip() == f"{raw}: already in the store as run {run_id}; its name and tags updated"
    row = Store(store).run(run_id)
    assert row["name"] == "b" and json.loads(row["tags"]) == {"x": "1", "y": "2"}
    record = json.loads((store / "runs" / f"run={run_id}" / "_run.json").read_text())["run"]
    assert record["name"] == "b" and json.loads(record["tags"]) == {"x": "1", "y": "2"}
    code, out, err = smlens("ingest", raw, "--store", store, "--tag", "x=3", "--format", "json")
    assert code == 0 and json.loads(out)[0]["changed"] == ["tags"]
    before = snapshot(store)
    code, out, err = smlens("ingest", raw, "--store", store, "--tag", "x=3")
    assert code == 0 and err.strip() == f"{raw}: already in the store as run {run_id}"
    assert snapshot(store) == before and len(Store(store).runs()) == 1


@pytest.fixture()
def three_runs(tmp_path) -> Path:
    store = tmp_path / "store"
    for index, name in enumerate(("a", "b", "b")):
        source = tmp_path / f"capture{index}.csv"
        source.write_bytes((DATA / "decode12_raw.csv").read_bytes() + b"\n" * index)
        Store(store).ingest(source, name=name)
    return store


def test_rm_of_a_name_two_runs_share_is_refused(three_runs):
    before = snapshot(three_runs)
    assert_refused(*smlens("rm", "b", "--store", three_runs), "run 'b' is ambiguous: 2 runs have that name")
    assert snapshot(three_runs) == before


def test_rm_of_several_runs_asks_at_a_terminal(three_runs, monkeypatch):
    monkeypatch.setattr(commands.store, "stdin_is_terminal", lambda: True)
    runs = Store(three_runs).runs()
    ids = list(runs["id"])
    before = snapshot(three_runs)
    code, out, err = smlens("rm", ids[0], ids[1], "--store", three_runs, input="n\n")
    assert code == 2 and "remove these 2 runs?" in err
    # (a terminal echoes the answer's line end; the test runner does not)
    assert err.rstrip().endswith("smlens: nothing removed (not confirmed; --yes skips the question)")
    assert snapshot(three_runs) == before
    code, out, err = smlens("rm", ids[0], ids[1], "--store", three_runs, input="y\n")
    assert code == 0 and f"removed run {ids[0]} (a)" in out
    code, out, err = smlens("rm", ids[2], "--store", three_runs, "--yes")
    assert code == 0 and len(Store(three_runs).runs()) == 0


@pytest.mark.parametrize("answer, code, line", [
    ("", 2, "smlens: nothing removed (not confirmed; --yes skips the question)"),  # Ctrl-D: no answer
    (KeyboardInterrupt, 130, "smlens: interrupted")])
def test_rm_of_several_runs_given_no_answer_at_a_terminal_removes_nothing(three_runs, monkeypatch,
                                                                          answer, code, line):
    """Once click's "Aborted!" with exit 1, the code of a judged regression."""
    import io

    class Keyboard(io.BytesIO):
        def read1(self, *args):
            if answer is KeyboardInterrupt:
                raise KeyboardInterrupt
            return b""  # end of input

        read = readline = read1

    import typer.testing

    monkeypatch.setattr(commands.store, "stdin_is_terminal", lambda: True)
    monkeypatch.setattr(typer.testing, "make_input_stream", lambda *args: Keyboard())
    ids = list(Store(three_runs).runs()["id"])
    before = snapshot(three_runs)
    exit_code, _, err = smlens("rm", ids[0], ids[1], "--store", three_runs)
    assert exit_code == code and err.rstrip().endswith(line), err
    assert "Aborted" not in err and snapshot(three_runs) == before


def test_rm_of_several_runs_in_a_script_removes_them_all_or_none(three_runs):
    ids = list(Store(three_runs).runs()["id"])
    before = snapshot(three_runs)
    assert_refused(*smlens("rm", ids[0], "nope", "--store", three_runs), "no run 'nope'")
    assert snapshot(three_runs) == before
    code, out, err = smlens("rm", ids[0], ids[1], "--store", three_runs, "--format", "json", "--yes")
    assert code == 0 and [r["id"] for r in json.loads(out)] == ids[:2]
    assert list(Store(three_runs).runs()["id"]) == ids[2:]
    assert not list((three_runs / ".staging").iterdir())
    assert sorted(p.name for p in (three_runs / "runs").iterdir()) == [f"run={ids[2]}"]


def test_an_internal_error_is_one_line_and_exit_70(tmp_path, monkeypatch):
    from profiler.ingest import store as store_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(store_module.Store, "runs", broken)
    Store(tmp_path / "store").ingest(DATA / "decode12_raw.csv")
    code, out, err = smlens("runs", "--store", tmp_path / "store")
    assert code == 70 and err.strip() == ("smlens: internal error (ZeroDivisionError: a bug); please report "
                                          "it (SMLENS_TRACEBACK=1 shows where)")
    # the gate: a bug is no verdict either, and CI sees exit 2 with its reports
    monkeypatch.setattr("profiler.gate_inputs._labelled", broken)
    markdown = tmp_path / "gate.md"
    code, out, err = smlens("gate", "-b", DATA / "decode12_raw.csv", "-c", DATA / "decode12_raw.csv",
                            "--markdown", markdown)
    assert_refused(code, out, err, "internal error (ZeroDivisionError: a bug)")
    assert "internal error" in markdown.read_text()
