"""Errors a user can act on. The CLI prints `smlens: <message>` on one line and exits with `exit_code`."""
import os


class SmlensError(Exception):
    """Bad input or an environment problem: one line that says what to do, and an exit code."""

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(SmlensError):
    """The file, run or option given cannot be used (exit 2)."""


class EnvironmentProblem(SmlensError):
    """ncu, the GPU or a permission is missing (exit 3 unless said otherwise)."""

    exit_code = 3


EXIT_INTERNAL = 70  # a bug in smlens (BSD sysexits' EX_SOFTWARE)


def one_line(message: str) -> str:
    """`smlens: message` on one line whatever a file or run name holds: control characters
    (newlines, terminal escapes) and undecodable bytes of a file name are shown escaped."""
    return "smlens: " + "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)


def internal_error(err: Exception) -> str:
    """A bug's one line (exit EXIT_INTERNAL), or the traceback when SMLENS_TRACEBACK asks for it."""
    if os.environ.get("SMLENS_TRACEBACK"):
        raise err
    return (f"internal error ({type(err).__name__}: {str(err).strip()[:200]}); please report it "
            "(SMLENS_TRACEBACK=1 shows where)")
