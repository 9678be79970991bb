"""The exit statuses of every ``dpsynth`` command, and the errors that carry them.

Layer: adapter. One table for the whole command line (docs/cli.md "Exit status", and the
epilog of ``dpsynth --help``), tested in ``tests/unit/test_cli_exit.py``:

====  ===========================================================================================
0     success: the outputs are written
1     input or configuration: an input or a file or setting it names cannot be used — a file
      that cannot be read or parsed, no CSV header, schema columns absent from the header,
      NDJSON without ``--schema``, a malformed schema, domain, config file or noise key, a key
      already bound to another input (docs/privacy.md P13), a worker setting refused at start;
      under replacement neighbours (the count is public) also a run that accepts no record or
      makes no release
2     usage: the command line is wrong — an unknown option, a value of the wrong type or out
      of its bounds, options that conflict or are missing, a path that does not exist
3     runtime: the run failed while working — an output that cannot be written, a broker lost,
      the worker's fatal error after start, an internal error (a bug: report it with the
      traceback)
====  ===========================================================================================

Under add/remove neighbours the exit status is part of what a run shows, so it depends only on
the configuration and the input's header, never on a count (docs/privacy.md P11).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import click

from dpsynth.errors import DpsynthError


class ExitCode(IntEnum):
    """The exit statuses of the module docstring."""

    OK = 0
    INPUT = 1
    USAGE = 2
    RUNTIME = 3


#: The table as ``--help`` shows it (``\b``: click keeps the lines as they are).
EXIT_STATUS_HELP = """\b
Exit status:
  0  success
  1  input or configuration: a file that cannot be read, schema columns absent
     from the CSV header, NDJSON without --schema, a malformed schema or key, a
     key bound to another input; under --neighbours replace also a run that
     accepts no record or makes no release
  2  usage: an unknown option, a bad value, options conflicting or missing
  3  runtime: an output that cannot be written, a broker lost, an internal error
"""


class InputError(click.ClickException):
    """An input or a configuration file cannot be used (exit status 1)."""

    exit_code = ExitCode.INPUT


class RuntimeFailure(click.ClickException):
    """The run failed while working: I/O, the broker, a bug (exit status 3)."""

    exit_code = ExitCode.RUNTIME


def fail_on_dpsynth_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn dpsynth's own errors into exit status 1 and failed writes into 3, cleanly."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DpsynthError as e:
            raise InputError(str(e)) from None
        except OSError as e:  # inputs are read (and their errors named) before any write
            where = f"{e.filename}: " if e.filename else ""
            raise RuntimeFailure(f"{where}{e.strerror or e}") from None

    return wrapper
