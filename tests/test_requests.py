"""The commands' requests from click's own parameters (ctx.params): some typer versions (the H200
image's) leave a Path option there as a string and convert it only for the command's function, so
`smlens sweep --keep DIR` died with "unsupported operand type(s) for /: 'str' and 'str'" there."""
from __future__ import annotations

from pathlib import Path

from commands.profile import ProfileRequest
from commands.sweep import SweepRequest


def test_a_path_option_given_as_a_string_is_a_path_in_the_request():
    params = {"keep": "/tmp/reports", "store": "s3://bucket/prefix", "model": "llama-3.1-8b",
              "batch": "1,4", "prompt": "256", "tag": ["a=1"], "layers": 2, "program": None}
    sweep = SweepRequest.from_options(params, {"layers"})
    profile = ProfileRequest.from_options(params, {"layers"})
    for request in (sweep, profile):
        assert request.keep == Path("/tmp/reports") and isinstance(request.keep, Path)
        assert request.store == "s3://bucket/prefix"  # a URL stays a string: Path would fold s3://
    assert profile.tag == ("a=1",)
    assert sweep.given == {"layers": 2}
