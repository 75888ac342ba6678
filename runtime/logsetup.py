"""Process logging with the reference driver's klog semantics: `-v` levels and `--logging-format`.

Admins keep their Helm value `logVerbosity` (default "4") when they switch from the
reference driver, so `-v N` / `LOG_VERBOSITY` means what it means to klog: errors, warnings
and info (V0) are always logged; a "V(n)" message only when the verbosity is at least n.
The reference documents what each level adds (its chart's values.yaml, `logVerbosity`:
https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu/blob/main/deployments/helm/dra-driver-nvidia-gpu/values.yaml):
1 cleanup and prepare/unprepare confirmations and retryable failures, 2 "is a noop" notes and
object callbacks, 3 informer listing, 6 API and gRPC request/response detail and checkpoint
writes, 7 health checks.

V-levels are Python level numbers between INFO and NOTSET, two apart::

    V0 = INFO (20)   V1 = 18   V2 = 16   V3 = 14   V4 = 12
    V5 = DEBUG (10)  V6 = 8    V7 = 6    V8 = 4    V9 = 2

so the existing `logger.debug(...)` calls are V5: hidden at the default verbosity 4, shown
from 5 up (as before). Verbosity v shows every record at level 20 - 2v or above; from 10 up
everything is shown (V10 and higher all share level 1). Write a V-message as
`vlog(log, 6, "…", *args)` or `log.log(v_level(6), "…", *args)`; guard an expensive
argument with `log.isEnabledFor(v_level(6))`.

`configure_logging` is for a process's entry point only: code that runs in-process in the
simulated cluster (see agent/cli.py) must never call it. Importing this module only names
the V-levels for `%(levelname)s` (`V1` … `V9`; DEBUG keeps its name).

Formats: `text` is klog's text format, header and all (`Lmmdd hh:mm:ss.uuuuuu PID
file:line] message`, L being I, W, E or F: what admins of the reference grep, e.g.
`^(E|W)[0-9]{4}` for warnings and errors; https://github.com/kubernetes/klog/blob/v2.130.1/klog.go,
formatHeader); `json` is one object a line like
klog's JSON output: `ts` (float Unix seconds), `caller` (`dir/file.py:line`), `msg`, `v`
(info lines only), `level` (warnings and errors only; klog has no such key), `err` and
`stacktrace` for an exception, `logger`, and the record's `extra=` keys.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import orjson

from api import names
from api.validation_error import ValidationError
from runtime.cli import env_option

ENV_LOGGING_FORMAT = "LOGGING_FORMAT"
VERBOSITY_FLAG = "-v/--verbosity"
FORMAT_FLAG = "--logging-format"
FORMATS = ("text", "json")
DEFAULT_VERBOSITY = 4
DEFAULT_FORMAT = "text"

_STEP = 2  # Python level numbers between two V-levels
_MAX_DISTINCT_V = (logging.INFO - 1) // _STEP  # 9: V9 is level 2, level 1 is everything else

for _n in range(1, _MAX_DISTINCT_V + 1):
    if logging.INFO - _STEP * _n != logging.DEBUG:
        logging.addLevelName(logging.INFO - _STEP * _n, f"V{_n}")


def v_level(n: int) -> int:
    """The Python level number of klog's V(n): INFO for 0, DEBUG for 5, at least 1."""
    if n < 0:
        raise ValueError(f"V-level {n} is negative")
    return max(1, logging.INFO - _STEP * n)


def v_of(levelno: int) -> int:
    """The lowest verbosity that shows a record of this level (0 for INFO and above)."""
    if levelno >= logging.INFO:
        return 0
    return math.ceil((logging.INFO - levelno) / _STEP)


def vlog(logger: logging.Logger, n: int, msg: str, *args: Any, **kwargs: Any) -> None:
    """`logger.log` at V(n), with the caller's file and line."""
    level = v_level(n)
    if logger.isEnabledFor(level):
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        logger.log(level, msg, *args, **kwargs)


def threshold(verbosity: int) -> int:
    """The logger level that lets V(0) … V(verbosity) through."""
    return v_level(verbosity)


# --- validation ------------------------------------------------------------------------------

_VERBOSITY_HELP = ("an integer from 0 (errors, warnings and info) up; 4 is the default, "
                   "6 adds API and gRPC request detail, 7 health checks")


def check_verbosity(verbosity: object) -> int:
    """`verbosity` if it is a non-negative int, else ValidationError naming the flag."""
    if isinstance(verbosity, bool) or not isinstance(verbosity, int) or verbosity < 0:
        raise ValidationError(
            f"invalid log verbosity {verbosity!r} ({VERBOSITY_FLAG}, env "
            f"{names.ENV_LOG_VERBOSITY}): use {_VERBOSITY_HELP}")
    return verbosity


def check_format(fmt: object) -> str:
    """`fmt` if it is a known format, else ValidationError naming the flag."""
    if fmt not in FORMATS:
        raise ValidationError(
            f"unknown logging format {fmt!r} ({FORMAT_FLAG}, env {ENV_LOGGING_FORMAT}): "
            f"use {' or '.join(FORMATS)}")
    return str(fmt)


def parse_verbosity(text: str) -> int:
    """argparse type of `-v`: argparse and `env_option` add the flag or env var name."""
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a log verbosity: use {_VERBOSITY_HELP}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is negative: use {_VERBOSITY_HELP}")
    return value


def parse_logging_format(text: str) -> str:
    """argparse type of `--logging-format`."""
    if text not in FORMATS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a logging format: use {' or '.join(FORMATS)}")
    return text


def add_logging_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    environ: Mapping[str, str] | None = None,
) -> None:
    """`-v/--verbosity` (env LOG_VERBOSITY) and `--logging-format` (env LOGGING_FORMAT)."""
    env_option(parser, "-v", "--verbosity", env=names.ENV_LOG_VERBOSITY, type=parse_verbosity,
               default=DEFAULT_VERBOSITY,
               help="log verbosity as in klog: 0 errors, warnings and info; 1-4 more detail; "
               "5 debug; 6 API and gRPC request/response detail; 7 health checks",
               environ=environ)
    env_option(parser, FORMAT_FLAG, env=ENV_LOGGING_FORMAT, type=parse_logging_format,
               default=DEFAULT_FORMAT,
               help="log format: text, or json (one JSON object a line, like klog's)",
               environ=environ)


# --- formats ---------------------------------------------------------------------------------

_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}


def _caller(record: logging.LogRecord) -> str:
    parts = record.pathname.replace(os.sep, "/").rsplit("/", 2)  # like zap's short caller
    return f"{'/'.join(parts[-2:])}:{record.lineno}"


def _severity(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "F"
    if levelno >= logging.ERROR:
        return "E"
    return "W" if levelno >= logging.WARNING else "I"


class KlogFormatter(logging.Formatter):
    """klog's text lines: the header, then the message (any V-level is an I line, as in
    klog), then a traceback if there is one. Local time, as klog writes it."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        header = (f"{_severity(record.levelno)}{time.strftime('%m%d %H:%M:%S', t)}."
                  f"{micros:06d} {record.process or os.getpid():7d} "
                  f"{record.filename}:{record.lineno}] ")
        text = header + record.getMessage()
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            text += "\n" + record.exc_text
        if record.stack_info:
            text += "\n" + self.formatStack(record.stack_info)
        return text


class JsonFormatter(logging.Formatter):
    """One klog-style JSON object per record (see the module docstring for the keys)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"ts": record.created, "caller": _caller(record),
                                 "msg": record.getMessage()}
        if record.levelno < logging.WARNING:
            entry["v"] = v_of(record.levelno)
        else:
            entry["level"] = record.levelname.lower()
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["err"] = str(exc) or type(exc).__name__
            entry["stacktrace"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["stacktrace"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        entry["logger"] = record.name
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in entry:
                entry[key] = value
        return orjson.dumps(entry, default=str).decode()


def make_formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if check_format(fmt) == "json" else KlogFormatter()


_HANDLER_MARK = "_compute_domain_logsetup"
LIBRARY_LOGGERS = ("urllib3", "pyroute2", "asyncio", "grpc", "kubernetes", "aiohttp")
LIBRARY_DEBUG_V = 9


def configure_logging(
    verbosity: int,
    fmt: str = DEFAULT_FORMAT,
    stream: TextIO | None = None,
    *,
    logger: logging.Logger | None = None,
) -> logging.Handler:
    """Send `logger`'s records (None: the root logger, i.e. the whole process) at V(0) to
    V(`verbosity`) to `stream` (None: stderr) in format `fmt`; the handler installed.

    Raises ValidationError, naming the flag and env var, for a negative verbosity or an
    unknown format. Calling it again replaces the handler an earlier call installed.
    """
    check_verbosity(verbosity)
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(make_formatter(fmt))
    setattr(handler, _HANDLER_MARK, True)
    target = logging.getLogger() if logger is None else logger
    for old in [h for h in target.handlers if getattr(h, _HANDLER_MARK, False)]:
        target.removeHandler(old)
        old.close()
    target.addHandler(handler)
    target.setLevel(threshold(verbosity))
    if logger is None:
        # Libraries' debug output (a netlink message per route lookup, urllib3's line per
        # request beside our V6 `"Response"` one) only from V9 on, where klog's own
        # libraries also say everything.
        quiet = threshold(verbosity) if verbosity >= LIBRARY_DEBUG_V else logging.INFO
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(quiet)
    return handler
