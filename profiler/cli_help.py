"""The command line's help in words: values named for what they are (typer names the Python type,
`<list[Path]>`), and an example under each command's --help."""
from __future__ import annotations

from typing import get_args, get_origin

import typer


def _metavar(param) -> str:
    """What a value looks like, in words (typer names the Python type: <list[Path]>)."""
    desc = getattr(param, "type_descriptor", None)  # typer >= 0.20; older typer: click's types
    kind = getattr(param, "type", None)
    choices = desc.choices if desc is not None and desc.is_choice else getattr(kind, "choices", None)
    if choices:
        return "|".join(str(getattr(c, "value", c)) for c in choices)
    annotation = getattr(desc, "annotation", None)
    if get_origin(annotation) is list:
        annotation = get_args(annotation)[0]
    if (desc is not None and desc.is_path) or getattr(kind, "name", "") == "path":
        word = "PATH"
    else:
        word = {int: "N", float: "NUMBER"}.get(annotation) or {"integer": "N", "float": "NUMBER"}.get(
            getattr(kind, "name", ""), "TEXT")
    if isinstance(param, typer.core.TyperArgument):
        return param.name.upper().rstrip("S") if word in ("TEXT", "PATH") else word
    return word


class Command(typer.core.TyperCommand):
    """A command whose help names values in words, with an example under it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.metavar is None and not getattr(param, "is_flag", False):
                param.metavar = _metavar(param)
            if isinstance(param, typer.core.TyperArgument) and hasattr(param, "display_type_rich"):
                param.display_type_rich = lambda ctx: None  # the metavar says it


# One example per command, by the words after `smlens`, shown under its --help (\b keeps click
# from re-wrapping it).
EXAMPLES = {
    "ingest": "smlens ingest run.csv.gz --name llama-b8 --tag batch=8 --shapes shapes.txt",
    "runs": "smlens runs --format json",
    "show": "smlens show latest",
    "rm": "smlens rm llama-b8",
    "gate": "smlens gate --baseline tag:branch=main --current latest --markdown gate.md",
    "views": "smlens views latest --phase decode --view V3,V7 | less -S",
    "report": "smlens report llama-b8 --baseline llama-b1 --per-token -o compare.html",
    "demo": "smlens demo -o smlens-demo.html",
    "profile": "smlens profile --model llama-3.1-8b --batch 1,8 --plan",
    "doctor": "smlens doctor --deep",
    "sweep": "smlens sweep --model llama-3.1-8b --batch 1,4,16,64 --prompt 256,1024,4096 --plan",
    "store check": "smlens store check --store s3://bucket/smlens --format json",
    "store repair": "smlens store repair && smlens store check",
    "bench determinism": "smlens bench determinism --batches 1,8,64 --out h200.json",
    "bench compare": "smlens bench compare h200.json h100.json",
}


def example(name: str):
    return f"\b\nExample:\n  {EXAMPLES[name]}" if name in EXAMPLES else None
