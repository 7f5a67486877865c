"""Rich tables for `smlens bench`: a determinism result (bits, speed, the decoder layer, generation,
targets) and the comparison of two results. Reads the JSON-able dicts the benchmark writes; imports
nothing from profiler."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

_SHORT = {"det": "det", "layercast": "LayerCast", "cublas_bf16": "cuBLAS", "bi_tc": "BI-TC"}


def _table(title: str, columns: list[str], left: tuple[str, ...] = ("impl", "role")) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right", no_wrap=True)
    return t


def _role(role: str) -> str:
    return role.replace("_proj", "")


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"


def bits_table(result: dict) -> Table:
    bits = _table("bits: batch sizes that change row 0 / any row; distinct digests over the repeats",
                  ["impl", "role", "row 0", "any row", "digests", "CPU reference"])
    for e in result.get("bits", []):
        bi = e["batch_invariance"]
        r2r = "/".join(str(r["distinct"]) for r in e.get("run_to_run", [])) or "-"
        ref = e.get("reference")
        ref_cell = "-" if ref is None else ("equal" if ref["equal"] else f"[red]{ref['mismatches']} differ[/]")
        colour = "green" if bi["row0_changed"] == 0 else "yellow"
        bits.add_row(_SHORT.get(e["impl"], e["impl"]), _role(e["role"]),
                     f"[{colour}]{bi['row0_changed']}/{bi['batches']}[/]",
                     f"{bi['rows_changed']}/{bi['batches']}", r2r, ref_cell)
    return bits


def emulation_table(result: dict) -> Table:
    t = _table("det against the CPU emulation: sampled outputs, mismatches per M", ["role", "K", "samples", "M", "result"])
    for e in result.get("emulation", []):
        ms = ",".join(e["by_M"])
        verdict = "[green]equal[/]" if e["equal"] else f"[red]{e['mismatches']} of {e['checked']} differ[/]"
        t.add_row(_role(e["role"]), str(e["K"]), str(e["positions"]), ms, verdict)
    return t


def speed_table(result: dict) -> Table:
    impls = list(result.get("impls", {}))
    speed = _table("median us per call (det's speedup over each)", ["role", "M"] + [_SHORT.get(i, i) for i in impls]
                   + ["roof"], left=("role",))
    for row in result["timing"]:
        cells = []
        for i in impls:
            t = row["by_impl"].get(i)
            if t is None:
                cells.append("-")
                continue
            sp = row.get("det_speedup", {}).get(i)
            cells.append(f"{t['median_us']:.1f}" + (f" {sp:.2f}x" if sp else ""))
        d = row["by_impl"].get("det")
        # share of the bf16 weight-read floor: meaningful where decode is bound by it
        share = f"{100 * d['weight_roofline_share']:.0f}%" if d and row["M"] <= 64 else "-"
        speed.add_row(_role(row["role"]), str(row["M"]), *cells, share)
    return speed


def layer_table(layer: dict) -> Table:
    t = _table(f"decoder layer: prefill {layer['prompt']} + {layer['decode_steps']} decode steps (ms)",
               ["impl", "prefill", "decode", "total", "vs LayerCast"])
    for impl, r in layer["by_impl"].items():
        t.add_row(impl, f"{r['prefill_ms']:.2f}", f"{r['decode_ms']:.2f}", f"{r['total_ms']:.2f}",
                  f"{r.get('speedup_vs_layercast', float('nan')):.2f}x")
    return t


def generation_table(gen: dict) -> Table:
    t = _table(f"generation: prompt 0 alone and in batches ({gen['model']}, {gen['layers']} layers, "
               f"prompt {gen['prompt']}, {gen['new_tokens']} new tokens)",
               ["impl", "batch", "tokens same", "logits same", "prefill ms", "step ms", "ms/token"])
    for impl, r in gen["by_impl"].items():
        for B, row in r["by_batch"].items():
            t.add_row(_SHORT.get(impl, impl), B, _yes(row["tokens_identical"]), _yes(row["logits_identical"]),
                      _ms(row["prefill_ms"]), _ms(row["step_ms"]), _ms(row["ms_per_token"]))
    return t


def targets_table(targets: list[dict]) -> Table:
    t = _table("targets", ["target", "role", "M", "value", ""], left=("target", "role"))
    for g in targets:
        t.add_row(g["target"], _role(g["role"]), "" if g["M"] is None else str(g["M"]), f"{g['value']:.2f}",
                  "[green]pass[/]" if g["pass"] else "[red]miss[/]")
    return t


def render_result(result: dict, console=None) -> None:
    """Bits, speed and targets of one run as rich tables that fit a terminal."""
    con = console or Console()
    env = result.get("env", {})
    con.print(f"[bold]{result.get('model')}[/] on {env.get('gpu', result.get('device', '?'))} "
              f"(driver {env.get('driver', '?')}, torch {env.get('torch', '?')}, triton {env.get('triton', '?')}, "
              f"CUDA {env.get('cuda_runtime', '?')}); chain {result.get('chain_k')} k, "
              f"batches {result['batches'][0]}..{result['batches'][1]}, {result.get('repeats')} repeats")
    if result.get("bits"):
        con.print(bits_table(result))
    if result.get("emulation"):
        con.print(emulation_table(result))
    if result.get("timing"):
        con.print(speed_table(result))
        con.print("roof: det's share of the time to read the bf16 weights once at 4.8 TB/s")
    if result.get("layer", {}).get("by_impl"):
        con.print(layer_table(result["layer"]))
    if result.get("generation", {}).get("by_impl"):
        con.print(generation_table(result["generation"]))
    if result.get("targets"):
        con.print(targets_table(result["targets"]))


def render_comparison(cmp: dict, console=None) -> None:
    con = console or Console()
    con.print(f"A: {cmp['a']['gpu']} ({cmp['a']['created']})   B: {cmp['b']['gpu']} ({cmp['b']['created']})")
    t = Table()
    for col in ("impl", "role", "N", "K", "bits", "detail"):
        t.add_column(col, justify="right" if col in ("N", "K") else "left", no_wrap=col != "detail")
    colour = {"same bits": "green", "different bits": "red"}
    for r in cmp["rows"]:
        c = colour.get(r["status"], "yellow")
        t.add_row(r["impl"], r["role"], str(r["N"]), str(r["K"]), f"[{c}]{r['status']}[/]", r["detail"])
    con.print(t)
    for case in cmp.get("differing", []):
        con.print(f"[red]differs:[/] {case}")
    for impl, same in cmp["same_bits_by_impl"].items():
        con.print(f"{impl}: " + ("[green]same bits on both[/]" if same else "[red]bits differ[/]"))
