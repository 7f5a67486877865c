"""What the terminal says in one screen and never cuts (issue 29), on the real H200 captures: the
kernels of most time named by their NVTX ranges, `--brief`, `--view` alone, shares that agree after
a role filter, whole names in validation lines, `runs`, `show` and `store check` whole when piped
and at 80 columns, and the tables' own renderer drawing what rich's Table draws."""
from __future__ import annotations

import io
import json
import re
import shutil

import pytest
from rich.console import Console

from profiler.ingest.capture import read_capture
from reports.runs import print_run, print_runs, run_summary
from reports.store_report import print_store_check
from reports.terminal import (brief_document, gap_tables, print_brief, print_views, top_kernels_of,
                              top_kernels_tables, verdict_of, view_tables)
from tests.cli import smlens
from tests.conftest import DATA
from views.registry import compute_views
from views.top_kernels import range_label, top_kernels, work_ranges

B4 = DATA / "h200_runs" / "gate-b4-r1.csv.gz"


def _text(width: int, *renderables, printer=None, **kwargs) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    if printer is not None:
        printer(*renderables, console=console, **kwargs)
    for renderable in renderables if printer is None else ():
        console.print(renderable)
    return console.export_text()


@pytest.fixture(scope="module")
def targeted(targeted_capture):
    return compute_views(targeted_capture.kernels), targeted_capture.kernels


@pytest.fixture(scope="module")
def b4():
    raw = read_capture(B4).kernels
    return compute_views(raw), raw


# --- the tables' renderer ----------------------------------------------------------------------------

@pytest.mark.parametrize("width", [80, 200])
def test_compact_tables_draw_what_richs_table_draws(targeted, width):
    """CompactTable writes its lines itself (rich's layout of 62 tables took 2.3 s of `smlens
    views`); on the real gap and V6 tables it draws rich's Table's text, cell for cell."""
    result, _ = targeted
    tables = gap_tables(result.gap, width)[0] + view_tables(result, "V6", width)[0]
    assert len(tables) >= 3
    for table in tables:
        ours, richs = _text(width, table), _text(width, table.rich_table())
        assert ours == richs
        assert max(len(line) for line in ours.splitlines()) == table.width <= width


# --- the kernels of most time ----------------------------------------------------------------------------

def test_kernels_are_named_by_their_nvtx_ranges(b4):
    """The batch-4 decode step: PyTorch's at::elementwise_kernel runs rotary embedding and the KV
    cache copy (rope_kv_cache) and silu-and-multiply (silu_mul); the NVTX range tells them apart."""
    result, raw = b4
    top = top_kernels(result.kernels, result.total_time_ns, raw, limit=30)
    elementwise = top[top["kernel_name"].str.startswith("void at::elementwise_kernel")]
    assert set(elementwise["label"]) == {"rope_kv_cache", "silu_mul"}
    assert elementwise["launches"].sum() == 7  # 5 of rope_kv_cache (two grids), 2 of silu_mul
    first = top.iloc[0]
    assert (first["role"], first["launches"], first["time_ns"], first["grid_blocks"], first["block_threads"],
            first["registers_per_thread"]) == ("gate_up_proj", 1, 58_304, 132, 384, 168)
    assert first["share_pct"] == pytest.approx(100 * 58_304 / 179_040)
    assert top["time_ns"].sum() == result.kernels["time_ns"].sum()  # every kernel in one row
    text = _text(200, *top_kernels_tables(top_kernels_of(result, raw), 200))
    assert re.search(r"^6 +8\.0 +4\.5 +2 +8 +128 +18 +decode +elementwise +rope_kv_cache "
                     r"\(at::elementwise_kernel\) *$", text, re.M)
    # a program's ranges name the module below the layer list
    assert range_label(["smlens:prefill", "smlens:gate_up_proj M=512 N=14336 K=4096 module=model.layers.0.mlp.up_proj"]) \
        == "mlp.up_proj"
    assert range_label(["<default domain>:prefill", "<default domain>:down_proj"]) == ""


def test_a_tp_runs_kernels_are_named_by_their_work_not_their_rank_range():
    """A tensor-parallel run (h200_tp, Llama-3.1-8B TP2 batch 8): inside a kernel's role range are
    its rank marker (`smlens_rank:rank=0 ...`) and NCCL's communicator set-up; the terminal's kernels of most time name the
    elementwise kernels by the role range inside it, as the report's table does."""
    raw = read_capture(DATA / "h200_tp" / "llama-3.1-8b-tp2-b8-p512.csv.gz").kernels
    result = compute_views(raw)
    stacks = [list(s) for s in raw["nvtx_stack"] if s is not None and len(s)]
    # what the label must look past
    assert any(s[-2].startswith("smlens_rank:") and s[-1].startswith("NCCL:") for s in stacks)
    top = top_kernels_of(result, raw, limit=60)
    elementwise = top[top["kernel_name"].str.startswith("void at::elementwise_kernel")]
    assert set(elementwise["label"]) == {"rope_kv_cache", "silu_mul"}
    assert set(elementwise["rank"]) == {0.0, 1.0}
    assert range_label(["smlens:decode", "smlens:elementwise op=silu_mul", "smlens_rank:rank=1 tp=2 device=1",
                        "NCCL:ncclAllReduce"]) == "silu_mul"
    assert work_ranges(None) == [] and work_ranges("NCCL:ncclAllReduce") == []


def test_the_full_output_has_the_kernels_of_most_time(targeted):
    result, raw = targeted
    text = _text(80, result, {"name": "targeted"}, printer=print_views, raw=raw)
    table = text[text.index("Kernels of most time"):]
    assert re.search(r"^2 +264\.7 +9\.9 +2 +132 +384 +168 +warm_prefill +gate_up_proj *$\n"
                     r"^    nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN$", table, re.M)
    assert text.index("The gap") < text.index("Kernels of most time") < text.index("Validations")
    assert max(len(line) for line in text.splitlines()) <= 80 and "\u2026" not in text


# --- --brief ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [80, 200])
def test_brief_is_one_screen(targeted, width):
    result, raw = targeted
    text = _text(width, result, {"name": "h200-demo", "id": "4e2c3541"}, printer=print_brief, raw=raw)
    lines = text.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= width and "\u2026" not in text
    words = " ".join(text.split())
    assert words.startswith("h200-demo run 4e2c3541 decode takes the most time (36 % of the workload)")
    assert re.search(r"^gate_up_proj +9\.9 tensor +9\.9 tensor +4\.5 memory *$", text, re.M)
    assert re.search(r"^all +27\.7 tensor +27\.8 tensor +30\.6 latency *$", text, re.M)
    assert "other" not in text.split("Kernels of most time")[0].split("Time %")[1]  # setup apart, as in the verdict
    kernels = re.findall(r"^(\d+) +[\d,.]+ +[\d.]+ +\d+ ", text, re.M)
    assert kernels == [str(n) for n in range(1, len(kernels) + 1)] and len(kernels) >= (8 if width == 80 else 10)
    assert re.search(r"^1 +268\.5 +10\.1 +10 +1,056 +256 +44 +other \(setup\) +elementwise", text, re.M)


def test_brief_json_has_the_verdict_groups_and_kernels(b4):
    result, raw = b4
    document = json.loads(json.dumps(brief_document(result, "b4", raw=raw), allow_nan=False))
    assert document["run"] == "b4" and document["verdict"]["summary"].startswith("decode takes the most time")
    gate_up = next(g for g in document["groups"] if g["role"] == "gate_up_proj")
    assert gate_up["bound"] == "memory" and gate_up["time_ns"] == 58_304
    labels = [k["label"] for k in document["top_kernels"]]
    assert len(labels) == 10 and "rope_kv_cache" in labels and "silu_mul" in labels
    assert document["top_kernels"][0]["short_name"] == "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_TNT"


# --- --view alone, shares, names ---------------------------------------------------------------------------

def test_a_view_asked_for_is_printed_alone(targeted_capture):
    result = compute_views(targeted_capture.kernels, ["V8"])
    text = _text(80, result, {"name": "targeted"}, printer=print_views, only_views=True)
    assert text.startswith("targeted\n\nV8 Kernel selection")
    for before in ("Verdict", "The gap", "Capture:", "Validations", "time %:"):
        assert before not in text
    assert "* cublaslt_nvjet" in text


def test_a_role_filter_gives_the_verdict_the_gaps_shares(targeted):
    """--role attention: the verdict gave decode attention "50 % of the workload" (of attention's
    time alone) where the gap says 3.1 % (of the run's)."""
    result, _ = targeted
    attention = result.filter(role="attention")
    verdict = verdict_of(attention)
    gap = attention.gap[attention.gap["role"] == "all"].set_index("phase")["time_share_pct"]
    assert {p.phase: p.share_pct for p in verdict.phases} == {p: pytest.approx(s) for p, s in gap.items()}
    assert gap["decode"] == pytest.approx(3.13, abs=0.01)
    text = " ".join(_text(100, attention, {"name": "t"}, printer=print_views).split())
    assert "time shares are of the run's kernel time (2,670.0 µs), in the verdict as in the tables" in text
    assert "decode takes the most time (3.1 % of the workload)" in text


def test_validation_lines_keep_kernel_names_whole(b4):
    result, _ = b4
    for width in (80, 200):
        text = _text(width, result, {"name": "b4"}, printer=print_views)
        assert "\u2026" not in text
        assert "fail kernel 9 nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT (decode/o_proj):" in text


# --- runs, show, store check ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("brief") / "store"
    deep = tmp_path_factory.mktemp("captures") / "h200_captures_of_the_decoder" / "batch_4_prompt_512_two_decode_steps"
    deep.mkdir(parents=True)
    shutil.copy(B4, deep / B4.name)
    for file, extra in ((deep / B4.name, ["--tag", "batch=4", "--tag", "prompt=512", "--tag", "model=llama-3.1-8b"]),
                        (DATA / "targeted_raw.csv", ["--name", "targeted", "--tag", "source=bundled"])):
        code, _, err = smlens("ingest", file, "--store", path, *extra)
        assert code == 0, err
    return path, deep / B4.name


def test_runs_piped_and_at_80_columns_cut_nothing(store):
    path, _ = store
    code, out, _ = smlens("runs", "--store", path)  # not a terminal: the whole table, a run a line
    assert code == 0 and "\u2026" not in out
    assert re.search(r"^\S+ +gate-b4-r1\.csv\.gz +\S+ \S+ +NVIDIA H200 +19 +raw +batch=4 prompt=512 "
                     r"model=llama-3\.1-8b *$", out, re.M)
    from profiler.ingest.store import Store

    text = _text(80, Store(path, create=False).runs(), printer=print_runs)
    assert "\u2026" not in text and max(len(line) for line in text.splitlines()) <= 80
    for whole in ("gate-b4-r1.csv.gz", "targeted", "NVIDIA H200", "batch=4", "model=llama-3.1-8b", "source=bundled"):
        assert whole in text


def test_show_breaks_a_long_source_path_between_folders(store):
    path, source = store
    from profiler.ingest.store import Store

    the_store = Store(path, create=False)
    row = the_store.run("gate-b4-r1.csv.gz")
    summary = run_summary(row, the_store.kernels(row["id"], columns=["phase", "role", "gpu__time_duration.sum"]), 1)
    text = _text(80, summary, printer=print_run)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("source "))
    parts = [lines[at][len("source "):].strip()]
    while lines[at + len(parts)].startswith(" " * 14):
        parts.append(lines[at + len(parts)].strip())
    assert len(str(source)) > 66 and len(parts) >= 2 and "".join(parts) == str(source)
    assert all(part.endswith("/") for part in parts[:-1]) and parts[-1] == source.name
    code, out, _ = smlens("show", "gate-b4-r1.csv.gz", "--store", path)  # piped: one line
    assert code == 0 and re.search(rf"^source +{re.escape(str(source))}$", out, re.M)


def test_store_check_keeps_file_names_whole(store, tmp_path):
    path, _ = store
    damaged = tmp_path / "damaged"
    shutil.copytree(path, damaged)
    kernels = next(damaged.glob("runs/run=*/kernels.parquet"))
    kernels.write_text("junk")
    where = str(kernels.relative_to(damaged))
    code, out, _ = smlens("store", "check", "--store", damaged)
    assert code == 2 and re.search(rf"^kernels +{re.escape(where)}$", out, re.M)
    from profiler.ingest.stores import check

    report = check(damaged)
    for width in (40, 80):
        text = _text(width, report, printer=print_store_check)
        assert "kernels.parquet" in text and max(len(line) for line in text.splitlines()) <= width
        assert "smlens store repair: the run folder is moved to quarantine" in " ".join(text.split())


def test_a_tensor_parallel_runs_kernel_shares_are_of_their_ranks_time():
    """Rank 0 of the TP=2 capture spent 48.7 ms, most of it waiting in all-reduces, rank 1 1.7 ms:
    a kernel's share is of its own rank's time, as the gap's are (0.2 % of both ranks' time said
    nothing)."""
    raw = read_capture(DATA / "h200_tp" / "llama-3.1-8b-tp2-b1-p512.csv.gz").kernels
    result = compute_views(raw)
    top = top_kernels_of(result, raw, limit=40)
    gap = result.gap.set_index(["phase", "role", "rank"])["time_share_pct"]
    for rank in (0, 1):
        row = top[(top["phase"] == "warm_prefill") & (top["role"] == "gate_up_proj") & (top["rank"] == rank)].iloc[0]
        assert row["share_pct"] == pytest.approx(100 * row["time_ns"] / result.rank_time_ns[rank])
        assert row["share_pct"] == pytest.approx(gap[("warm_prefill", "gate_up_proj", rank)])  # one kernel
    assert top.loc[top["rank"] == 1, "share_pct"].max() > 5 > top.loc[top["rank"] == 0, "share_pct"].max()


# --- the command ---------------------------------------------------------------------------------------

def test_views_brief_command(store, monkeypatch):
    path, _ = store
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = smlens("views", "targeted", "--brief", "--store", path)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= 80 and "\u2026" not in out
    assert lines[0].startswith("targeted run ") and "Verdict" not in out and "The gap" not in out
    assert re.search(r"^1 +268\.5 +10\.1 +10 +1,056 +256 +44 +other \(setup\) +elementwise", out, re.M)  # registers read
    code, out, err = smlens("views", "targeted", "--brief", "--format", "json", "--store", path)
    assert code == 0, err
    document = json.loads(out)
    assert set(document) == {"run", "time_shares_of", "verdict", "groups", "top_kernels"}
    assert document["top_kernels"][0]["registers_per_thread"] == 44
    assert document["verdict"]["phases"][-1]["phase"] == "decode"


def test_views_of_one_view_prints_it_alone(store):
    path, _ = store
    code, out, err = smlens("views", "targeted", "--view", "V8", "--store", path)
    assert code == 0, err
    assert re.match(r"targeted run \w+\n\nV8 Kernel selection", out)
    assert "Verdict" not in out and "The gap" not in out and "docs/VIEWS.md defines every figure" not in out


def test_views_json_verdict_has_the_gaps_shares_after_a_role_filter(store):
    path, _ = store
    code, out, err = smlens("views", "targeted", "--role", "attention", "--format", "json", "--store", path)
    assert code == 0, err
    document = json.loads(out)
    gap = {g["phase"]: g["time_share_pct"] for g in document["gap"] if g["role"] == "all"}
    assert {p["phase"]: p["share_pct"] for p in document["verdict"]["phases"]} == \
        {p: pytest.approx(s) for p, s in gap.items()}
    assert gap["decode"] == pytest.approx(3.13, abs=0.01)
