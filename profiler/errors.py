"""Errors a user can act on. The CLI prints `smlens: <message>` on one line and exits with `exit_code`."""


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
