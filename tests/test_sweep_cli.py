"""`smlens sweep --from-runs` on the command line, over real H200 runs: the view in the terminal,
as JSON and as a report, and the one-line refusals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.ingest.store import Store
from tests.cli import smlens

RUNS = Path(__file__).parent / "data" / "h200_runs"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("sweep-cli") / "store"
    the_store = Store(path)
    for batch in (1, 8):
        the_store.ingest(RUNS / f"llama-3.1-8b-b{batch}-p512.csv.gz", name=f"llama-b{batch}",
                         tags={"model": "llama-3.1-8b", "batch": str(batch), "prompt": "512", "study": "s"})
    return path


def test_from_runs_by_tag_and_by_name(store, tmp_path):
    code, out, err = smlens("sweep", "--from-runs", "tag:study=s", "--store", store, "--format", "json")
    assert code == 0, err
    document = json.loads(out)["sweep_view"]
    assert [(p["batch"], p["status"]) for p in document["points"]] == [(1, "complete"), (8, "complete")]
    assert any("gate_up_proj" in f["text"] and "176x128x64" in f["text"] for f in document["findings"])
    report = tmp_path / "sweep.html"
    code, out, err = smlens("sweep", "--from-runs", "llama-b1", "--from-runs", "llama-b8", "--store", store,
                            "--phase", "decode", "-o", report)
    assert code == 0, err
    assert out.startswith("sweep: 2 point(s), 2 measured whole; batch 1, 8, prompt 512; llama-3.1-8b")
    assert "decode · gate_up_proj" in out and "cold_prefill · " not in out.split("\n\n", 1)[1]
    assert report.read_text().startswith("<!DOCTYPE html>") and f"wrote {report}" in err


@pytest.mark.parametrize("args, words", [
    (["--from-runs", "tag:study=nothing"], "no run in"),
    (["--from-runs", "tag:study"], "expected tag:KEY=VALUE"),
    (["--from-runs", "nosuchrun"], "no run 'nosuchrun'"),
    (["--from-runs", "tag:study=s", "--plan"], "--from-runs makes a sweep of stored runs"),
])
def test_bad_from_runs_is_one_line(store, args, words):
    code, _, err = smlens("sweep", *args, "--store", store)
    assert code == 2 and err.startswith("smlens: ") and words in err and len(err.strip().splitlines()) == 1


def test_runs_of_other_metric_sets_are_refused_unless_allowed(store, tmp_path):
    mixed = tmp_path / "mixed"
    Store(mixed).ingest(RUNS / "llama-3.1-8b-b1-p512.csv.gz", tags={"batch": "1", "prompt": "512"})
    Store(mixed).ingest(RUNS / "dedup-reference-all-layers.csv.gz", tags={"batch": "8", "prompt": "512"})
    code, _, err = smlens("sweep", "--from-runs", "tag:prompt=512", "--store", mixed)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "different ncu metric sets" in err and "--allow-mixed" in err
    code, out, err = smlens("sweep", "--from-runs", "tag:prompt=512", "--store", mixed, "--allow-mixed",
                            "--format", "json")
    assert code == 0, err
    assert len(json.loads(out)["sweep_view"]["points"]) == 2
