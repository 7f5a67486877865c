"""The `smlens` command line: each command a few lines that turn its options into one call of
the application layer (commands/), which tests call directly.

Every SmlensError becomes one line on stderr and its exit code (README, "Exit codes"); anything
else is a bug, reported on one line with exit code 70 (SMLENS_TRACEBACK=1 shows the traceback).
A command's function returns its exit code (None: 0).
"""
from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path
from typing import List, Optional

import typer

import commands
from profiler.cli_help import Command, example
from profiler.errors import EXIT_INTERNAL, SmlensError, internal_error, one_line
from profiler.run.options import DEFAULT_WORKLOAD, DecoderOptions, DetGemmOptions, ProgramOptions
from reports.formats import Format, ViewsFormat


# click's exceptions, wherever this typer takes click from (newer ones carry their own copy)
_click_errors = sys.modules[typer.BadParameter.__module__]
_UsageError = _click_errors.UsageError
_HelpInstead = getattr(_click_errors, "NoArgsIsHelpError", ())  # `smlens store`: the help, as before


class _OneLineUsageError(_UsageError):
    def show(self, file=None) -> None:
        typer.echo(one_line(self.message), err=True)


def _one_line_usage(err: _UsageError) -> _UsageError:
    """click's usage error (an unknown option, a bad --format, a missing argument) as one line that
    names the command and its --help, like every other bad input; exit code 2 as before."""
    names, ctx = [], err.ctx
    while ctx is not None:
        names.insert(0, ctx.info_name if ctx.parent else "smlens")
        ctx = ctx.parent
    names = names or ["smlens"]
    where = f"{' '.join(names[1:])}: " if names[1:] else ""
    # "Value error, " is how this typer words a value outside an enum (--format xml)
    message = err.format_message().replace("Value error, ", "").rstrip(".")
    return _OneLineUsageError(f"{where}{message}; see `{' '.join(names)} --help`", err.ctx)


class _Summaries(typer.core.TyperGroup):
    """A group whose --help gives each command's summary whole (the first sentence of its help),
    wrapped to the terminal: click cuts it to one line with "...", at any width."""

    def format_commands(self, ctx, formatter):
        shown = [(name, self.get_command(ctx, name)) for name in self.list_commands(ctx)]
        rows = [(name, cmd.get_short_help_str(limit=10_000)) for name, cmd in shown if cmd and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class _Group(_Summaries):
    """The top-level group: every command's usage errors pass through here (see _one_line_usage)."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except _HelpInstead:
            raise
        except _UsageError as err:
            raise _one_line_usage(err) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (_HelpInstead, _OneLineUsageError):
            raise
        except _UsageError as err:
            raise _one_line_usage(err) from None


# Plain help (rich_markup_mode=None): option names are never cut to fit a panel.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=_Group,
                  rich_markup_mode=None, help="What an NVIDIA GPU is really doing during LLM inference.")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version  # 25 ms every start would pay

        try:
            typer.echo(f"smlens {version('smlens')}")
        except PackageNotFoundError:
            typer.echo("smlens (not installed: run from a source tree)")
        raise typer.Exit(0)


@app.callback()
def _main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")):
    """What an NVIDIA GPU is really doing during LLM inference."""


StoreOpt = typer.Option(None, "--store", envvar="SMLENS_STORE", metavar="PATH",
                        help="Store folder or s3://bucket/prefix (default ./smlens-store).")
FormatOpt = typer.Option(Format.table, "--format")
RUN_HELP = "Run id, id prefix (4 characters or more), name or 'latest'."
SHAPES_HELP = "File of '[phase/]role M N K' lines for captures whose NVTX ranges carry no shapes."


def fail(message: str, code: int = 2) -> None:
    typer.echo(one_line(message), err=True)
    raise typer.Exit(code)


def guarded(func):
    """The command body with every SmlensError turned into one stderr line and its exit code, and
    its returned exit code (None: 0) the process's."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with warnings.catch_warnings():
                # numpy's "invalid value" warnings: the views say n/a for such values themselves
                warnings.simplefilter("ignore", RuntimeWarning)
                code = func(*args, **kwargs)
        except SmlensError as err:
            fail(str(err), err.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except BrokenPipeError:  # `smlens ... | head`: stop quietly, and keep the final flush quiet too
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0)
        except (typer.Exit, typer.Abort, SystemExit):
            raise
        except Exception as err:  # a bug: one line, not a traceback, unless asked for
            fail(internal_error(err), EXIT_INTERNAL)
        if isinstance(code, int) and code:
            raise typer.Exit(code)

    return wrapper


def command(func, group: typer.Typer = app, name: Optional[str] = None):
    """Register a command (see `guarded`), with its example under its --help (cli_help.EXAMPLES,
    by the words after `smlens`)."""
    words = " ".join(w for w in (group.info.name, name or func.__name__) if w)
    return group.command(name, cls=Command, epilog=example(words))(guarded(func))


# --- store: ingest, runs, show, rm, store check / repair ---------------------------------------


@command
def ingest(files: List[Path] = typer.Argument(..., help="ncu CSV (raw or details page, gzip ok) or .ncu-rep"),
           store: Optional[str] = StoreOpt,
           name: Optional[str] = typer.Option(None, help="Run name (default: the file name)."),
           tag: Optional[List[str]] = typer.Option(None, help="KEY=VALUE, repeatable."),
           shapes: Optional[Path] = typer.Option(None, help=SHAPES_HELP),
           roles_from_eager_order: bool = typer.Option(
               False, help="CUDA-graph captures (--graph-profiling node): kernels without role "
                           "ranges take the roles of an eager step of the same phase, in order."),
           format: Format = FormatOpt):
    """Read ncu captures into the Parquet store, one run per file."""
    commands.store.ingest(files, store, name, tag, shapes, roles_from_eager_order, format)


@command
def runs(store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """List the runs in the store."""
    commands.store.list_runs(store, format)


@command
def show(run: Optional[str] = typer.Argument(None, help=RUN_HELP),
         kernel: Optional[str] = typer.Option(None, "--kernel", help="One kernel in depth, by its id: every "
                                              "figure by view, its counters, its validations."),
         baseline: Optional[str] = typer.Option(None, "--baseline", help="With --kernel: the matched kernel "
                                                "of this run beside each figure."),
         store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """One run: where it came from, and its kernels by phase and role; or one kernel in depth."""
    commands.compare.show_run_or_kernel(run, kernel, baseline, store, format)


@command
def rm(run: List[str] = typer.Argument(..., help="Run id, id prefix (4 characters or more) or name; "
                                                 "several remove several."),
       yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking; needed when standard "
                                                           "input is not a terminal."),
       store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """Remove runs from the store (all of them, or none when one reference is unknown or ambiguous).
    At a terminal it asks first; a script passes --yes."""
    commands.store.remove_runs(run, store, yes, _ask, format)


def _ask(question: str) -> bool:
    """The terminal's yes or no; no answer (Ctrl-D) is no, Ctrl-C an interruption."""
    try:
        return typer.confirm(question, err=True)
    except typer.Abort as err:  # click's "Aborted!" and exit 1 for Ctrl-C or Ctrl-D at the question
        if isinstance(err.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None
        return False


store_app = typer.Typer(name="store", no_args_is_help=True, cls=_Summaries, help="Check the store for damage, and repair it.")
app.add_typer(store_app)


def store_check(store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """Every inconsistency of the store and what `smlens store repair` would do: exit 0 when there
    is none, 2 when there are some."""
    return commands.store.check_store(store, format)


def store_repair(store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """Make the store consistent: finish interrupted writes, rebuild the runs table from the run
    folders' own records, and move what cannot be read to quarantine/ (nothing is deleted)."""
    return commands.store.repair_store(store, format)


command(store_check, store_app, "check")
command(store_repair, store_app, "repair")


# --- gate ---------------------------------------------------------------------------------------


@command
def gate(baseline: Optional[List[str]] = typer.Option(
             None, "--baseline", "-b", help="Baseline run(s): a capture file, a stored run (id, id prefix "
             "of 4 characters or more, name, 'latest'), or tag:KEY=VALUE[~N]. Repeat the option or "
             "separate with commas."),
         current: Optional[List[str]] = typer.Option(
             None, "--current", "-c", help="Current run(s), the same forms as --baseline."),
         rules: Optional[Path] = typer.Option(None, "--rules", help="gate.toml (default: built-in rules)."),
         markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write a Markdown summary here."),
         junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here."),
         shapes: Optional[Path] = typer.Option(None, help=SHAPES_HELP),
         allow_mismatch: bool = typer.Option(False, "--allow-mismatch", help="Gate runs of different "
                                             "devices, workloads, model shapes or phases (refused "
                                             "by default: exit 2)."),
         store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """Gate current runs against baseline runs: exit 0 pass, 1 regression, 2 could not judge."""
    return commands.gate.gate(baseline, current, rules, markdown, junit, shapes, allow_mismatch, store, format)


# --- views, report, demo ------------------------------------------------------------------------


@command
def views(run: Optional[str] = typer.Argument(None, help=RUN_HELP),
          phase: Optional[List[str]] = typer.Option(None, "--phase", help="Only this phase (repeatable; "
                                                    "time shares become shares of it)."),
          role: Optional[List[str]] = typer.Option(None, "--role", help="Only this role (repeatable)."),
          kernel: Optional[str] = typer.Option(None, "--kernel",
                                               help="Only kernels whose name matches this regular expression."),
          view: Optional[List[str]] = typer.Option(None, "--view",
                                                   help="Only these views, V1..V8 (repeatable, or V2,V3)."),
          baseline: Optional[List[str]] = typer.Option(None, "--baseline", help="What changed against this "
                                                       "run, first; repeat it with runs of the same build "
                                                       "for a noise floor."),
          repeat: Optional[List[str]] = typer.Option(None, "--repeat", help="With --baseline: more runs of "
                                                     "RUN's build, for the noise floor (repeatable)."),
          brief: bool = typer.Option(False, "--brief", help="One screen: the verdict, each phase and role's "
                                     "time and bound, the kernels of most time."),
          store: Optional[str] = StoreOpt,
          format: ViewsFormat = typer.Option(ViewsFormat.table, "--format")):
    """The eight counter-validated views of a run: the gap per phase and role, then each view."""
    commands.views.show_views(run, phase, role, kernel, view, store, format, baseline, repeat, brief)


@command
def report(run: Optional[str] = typer.Argument(None, help=RUN_HELP),
           baseline: Optional[List[str]] = typer.Option(None, "--baseline",
                                                        help="Compare with this run: figures as value (Δ %); "
                                                        "repeat it with runs of the same build for a noise "
                                                        "floor."),
           repeat: Optional[List[str]] = typer.Option(None, "--repeat", help="With --baseline: more runs of "
                                                      "RUN's build, for the noise floor (repeatable)."),
           phase: Optional[str] = typer.Option(None, help="Only this phase (time shares become "
                                               "shares of it)."),
           role: Optional[str] = typer.Option(None, help="Only this role."),
           per_token: bool = typer.Option(False, "--per-token", help="Times, bytes and FLOPs per token "
                                          "of each phase (the M of its GEMMs, else the batch and "
                                          "prompt tags): batch 8 against batch 1 on equal terms."),
           output: Path = typer.Option(Path("smlens-report.html"), "--output", "-o", help="HTML file to write."),
           store: Optional[str] = StoreOpt, format: Format = FormatOpt):
    """One self-contained HTML report of a run (or a comparison) that opens offline."""
    commands.views.report(run, output, baseline, phase, role, per_token, store, format, repeat)


@command
def demo(output: Path = typer.Option(Path("smlens-demo.html"), "--output", "-o", help="HTML file to write."),
         format: Format = FormatOpt):
    """No GPU needed: a bundled real H200 capture into a temporary store, its views and its report."""
    commands.views.demo(output, format)


# --- profile, doctor ----------------------------------------------------------------------------


def _given(ctx: typer.Context) -> list[str]:
    """The options the user gave, not left at their defaults, in the command's order (an option of
    another workload is refused, and the first such is the one named)."""
    return [key for key in ctx.params
            if getattr(ctx.get_parameter_source(key), "name", "DEFAULT") != "DEFAULT"]


@command
def profile(ctx: typer.Context,
            program: Optional[List[str]] = typer.Argument(
                None, help="After `--`: a program to profile instead of the built-in decoder workload."),
            # the workload (profiler/run/options.py: each workload's own)
            workload: str = typer.Option(DEFAULT_WORKLOAD, help="Built-in workload: decoder (layers of a "
                                         "model) or det-gemm (the deterministic GEMMs and baselines "
                                         "on the model's projections, one run per --impl)."),
            model: str = typer.Option(DecoderOptions.model, help="Built-in workload: llama-3.1-8b, "
                                      "llama-3.1-70b, qwen2.5-7b, mistral-7b, gemma-2-9b, tiny."),
            tokens: str = typer.Option(DetGemmOptions.tokens, help="det-gemm: GEMM rows M; M <= 64 "
                                       "is decode, more is prefill."),
            impl: str = typer.Option(DetGemmOptions.impl, help="det-gemm: det, cublas_bf16, "
                                     "layercast, bi_tc, portable."),
            layers: int = typer.Option(DecoderOptions.layers, help="Decoder layers in the stack."),
            batch: str = typer.Option(DecoderOptions.batch, help="Batch size(s), e.g. 1,8,32: one run each."),
            prompt: str = typer.Option(DecoderOptions.prompt, help="Prompt length(s), e.g. 512,2048: "
                                       "one run each."),
            decode_steps: int = typer.Option(DecoderOptions.decode_steps,
                                             help="Decode steps after the prompt."),
            dtype: str = typer.Option(DecoderOptions.dtype, help="bf16, fp16, fp32, or fp8 (e4m3 weights, torch._scaled_mm)."),
            phases: str = typer.Option(DecoderOptions.phases, help="Phases to profile."),
            dedup: bool = typer.Option(DecoderOptions.dedup, help="Profile one layer per phase and "
                                       "one decode step."),
            tp: int = typer.Option(DecoderOptions.tp, "--tp", help="Tensor parallel: ranks, one "
                                   "process and GPU each (the decoder split Megatron-style, or the "
                                   "ranks of a program after `--`)."),
            layer: int = typer.Option(DecoderOptions.layer, help="With dedup: the layer profiled "
                                      "(default the first)."),
            include: Optional[List[str]] = typer.Option(None, help="Program only: `setup` also "
                                                        "profiles what runs outside forwards "
                                                        "(labelled phase setup)."),
            annotate: bool = typer.Option(ProgramOptions.annotate, help="Program only: annotate its "
                                          "torch modules (phases, layers, roles, shapes) with NVTX "
                                          "ranges."),
            nvtx_include: Optional[List[str]] = typer.Option(None, help="Program only: ncu NVTX "
                                                             "include filter, repeatable."),
            launch_skip: Optional[int] = typer.Option(None, help="Program only: kernels to skip."),
            launch_count: Optional[int] = typer.Option(None, help="Program only: kernels to profile."),
            kernel_name: Optional[str] = typer.Option(None, help="Program only: ncu --kernel-name."),
            # what to collect, and how ncu runs (ProfileRequest)
            views: Optional[str] = typer.Option(None, help="Views to collect metrics for, e.g. V1,V3 "
                                                "(default all)."),
            metrics: Optional[str] = typer.Option(None, help="Collect exactly these ncu metrics "
                                                  "(comma-separated, or @FILE) instead of the views'."),
            cache_control: str = typer.Option("auto", help="auto (cold prefill flushed, the rest "
                                              "not), all or none."),
            graph_profiling: Optional[str] = typer.Option(None, help="node or graph (CUDA graphs)."),
            time_limit: Optional[float] = typer.Option(None, help="Seconds; stop and keep what was "
                                                       "profiled (partial)."),
            ncu: Optional[str] = typer.Option(None, help="ncu executable (default: PATH)."),
            keep: Optional[Path] = typer.Option(None, help="Keep ncu reports, CSVs and logs here."),
            # what is stored, and what is shown
            repeat: int = typer.Option(1, help="Profile each configuration N times (for `smlens gate`)."),
            name: Optional[str] = typer.Option(None, help="Run name (default from the workload)."),
            tag: Optional[List[str]] = typer.Option(None, help="KEY=VALUE, repeatable."),
            store: Optional[str] = StoreOpt,
            plan: bool = typer.Option(False, "--plan", help="Print the ncu commands, metrics and "
                                      "expected kernel count; run nothing."),
            quiet: bool = typer.Option(False, help="No progress bar."),
            format: Format = FormatOpt):
    """Profile LLM prefill and decode with ncu and store the run (see --plan first)."""
    commands.profile.profile(commands.profile.ProfileRequest.from_options(ctx.params, _given(ctx)))


@command
def sweep(ctx: typer.Context,
          program: Optional[List[str]] = typer.Argument(
              None, help="After `--`: a program whose arguments hold {batch}, {prompt} (and {model})."),
          model: Optional[str] = typer.Option(None, help="Model(s), e.g. llama-3.1-8b,qwen2.5-7b "
                                              f"(default {DecoderOptions.model})."),
          batch: str = typer.Option(DecoderOptions.batch, help="Batch sizes, e.g. 1,4,16,64."),
          prompt: str = typer.Option(DecoderOptions.prompt, help="Prompt lengths, e.g. 256,1024,4096."),
          layers: int = typer.Option(DecoderOptions.layers, help="Decoder layers in the stack."),
          decode_steps: int = typer.Option(DecoderOptions.decode_steps, help="Decode steps after the prompt."),
          dtype: str = typer.Option(DecoderOptions.dtype, help="bf16, fp16, fp32 or fp8."),
          phases: str = typer.Option(DecoderOptions.phases, help="Phases to profile."),
          dedup: bool = typer.Option(DecoderOptions.dedup, help="One layer per phase and one decode step."),
          layer: int = typer.Option(DecoderOptions.layer, help="With dedup: the layer profiled."),
          annotate: bool = typer.Option(ProgramOptions.annotate, help="Program only: annotate its modules."),
          views: Optional[str] = typer.Option(None, help="Views to collect metrics for (default all)."),
          metrics: Optional[str] = typer.Option(None, help="Collect exactly these ncu metrics."),
          cache_control: str = typer.Option("auto", help="auto, all or none."),
          graph_profiling: Optional[str] = typer.Option(None, help="node or graph (CUDA graphs)."),
          time_limit: Optional[float] = typer.Option(None, help="Seconds for the whole sweep; a point "
                                                     "that would not fit is not started."),
          ncu: Optional[str] = typer.Option(None, help="ncu executable (default: PATH)."),
          keep: Optional[Path] = typer.Option(None, help="Keep each point's ncu reports and logs here."),
          from_runs: Optional[List[str]] = typer.Option(
              None, "--from-runs", help="Show a sweep of stored runs instead, each a point by its model, "
              "batch and prompt tags: an id, a name or tag:KEY=VALUE, repeatable."),
          allow_mixed: bool = typer.Option(False, help="Show runs of different devices or ncu metric sets "
                                           "together."),
          output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write the sweep's HTML "
                                                "report here (- for standard output)."),
          phase: Optional[str] = typer.Option(None, help="The terminal table's phase."),
          role: Optional[str] = typer.Option(None, help="The terminal table's role."),
          store: Optional[str] = StoreOpt,
          plan: bool = typer.Option(False, "--plan", help="Show the grid, what the store holds, the "
                                    "kernels and the time to expect; run nothing."),
          quiet: bool = typer.Option(False, help="No progress bar per ncu run (a line per point stays)."),
          format: Format = FormatOpt):
    """Profile a grid of models x batch sizes x prompt lengths, one stored run per point (the same
    command resumes an interrupted sweep), and show how each gap moves along it."""
    commands.sweep.sweep(commands.sweep.SweepRequest.from_options(ctx.params, _given(ctx)))


@command
def doctor(ncu: Optional[str] = typer.Option(None, help="ncu executable (default: PATH)."),
           deep: bool = typer.Option(False, help="Profile one tiny kernel to test counter access."),
           format: Format = FormatOpt):
    """Can this machine profile? ncu, GPU and driver, counter permission, packages."""
    return commands.profile.doctor(ncu, deep, format)


# --- bench: the determinism benchmark ----------------------------------------------------------

bench_app = typer.Typer(name="bench", no_args_is_help=True, rich_markup_mode=None, cls=_Summaries,
                        help="Deterministic FP32-FMA GEMMs: bits and speed.")
app.add_typer(bench_app)


def determinism(model: str = typer.Option("llama-3.1-8b", help="Model whose four projections to run."),
                batches: str = typer.Option("1..256", help="Batch sizes for batch invariance, e.g. 1..256 or 1,2,4."),
                repeats: int = typer.Option(50, min=1, help="Runs per digest set and timed replays per case."),
                impl: str = typer.Option("det,layercast,cublas_bf16,bi_tc", help="Implementations (det first)."),
                bits: bool = typer.Option(True, help="Check batch invariance, run to run and the CPU reference."),
                layer: bool = typer.Option(True, help="Also time a decoder layer: prefill 2048 + 32 decode steps."),
                timing: bool = typer.Option(True, help="Time each projection (decode M=1,8,16, prefill 2048)."),
                emulate: bool = typer.Option(False, help="Emulate a sample of det's outputs on the CPU at "
                                             "M = 1..2048 and compare the bits."),
                generate: bool = typer.Option(False, help="Greedy-decode a prompt alone and in batches of 2, 8, "
                                              "32 (det, cuBLAS bf16, LayerCast) and compare logits and tokens."),
                seed: int = typer.Option(0, help="Input seed (inputs are drawn on the CPU: the same everywhere)."),
                out: Optional[Path] = typer.Option(None, "--out", help="Write the JSON result here."),
                format: Format = FormatOpt):
    """Bits (batch invariance, run to run, CPU reference) and speed against the baselines, on the GPU."""
    commands.bench.determinism(model, batches, repeats, impl, bits, layer, timing, emulate, generate, seed,
                               out, format)


def compare(a: Path = typer.Argument(..., help="Result of `smlens bench determinism --out` on one GPU."),
            b: Path = typer.Argument(..., help="The same on another GPU (or software stack)."),
            impl: str = typer.Option("det", help="Implementations whose bits decide the exit code."),
            format: Format = FormatOpt):
    """Did two runs give the same bits? Names every differing case. Exit 0 when the bits of every
    case of --impl match, 1 when some differ, 2 when a case of --impl could not be compared."""
    return commands.bench.compare(a, b, impl, format)


command(determinism, bench_app)
command(compare, bench_app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
