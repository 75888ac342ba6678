"""klog-style verbosity and formats (runtime/logsetup.py), and the flags of both programs."""

from __future__ import annotations

import argparse
import io
import itertools
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from api.validation_error import ValidationError
from runtime.logsetup import (
    add_logging_flags,
    configure_logging,
    v_level,
    v_of,
    vlog,
)

BIN = Path(sys.executable).parent
_names = itertools.count()


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    """A logger of its own (not the root: pytest's capture stays as it is)."""
    log = logging.getLogger(f"test_logsetup.{next(_names)}")
    log.propagate = False
    yield log
    for handler in list(log.handlers):
        log.removeHandler(handler)


def ours(log: logging.Logger) -> list[logging.Handler]:
    """The handlers configure_logging installed (pytest may add its capture handlers)."""
    return [h for h in log.handlers if type(h) is logging.StreamHandler]


def emit_all(log: logging.Logger) -> None:
    log.error("an error")
    log.warning("a warning")
    log.info("plain info")
    for n in range(1, 10):
        vlog(log, n, "at V%d", n)
    log.debug("a debug line")


def shown(log: logging.Logger, verbosity: int) -> str:
    out = io.StringIO()
    configure_logging(verbosity, "text", out, logger=log)
    emit_all(log)
    return out.getvalue()


def test_verbosity_0_shows_errors_warnings_and_info_but_not_v1(logger):
    text = shown(logger, 0)
    assert "an error" in text and "a warning" in text and "plain info" in text
    assert "at V1" not in text and "a debug line" not in text


def test_verbosity_4_shows_v4_not_v5_or_debug(logger):
    text = shown(logger, 4)
    assert "at V4" in text and "at V1" in text
    assert "at V5" not in text and "a debug line" not in text


def test_python_debug_is_v5(logger):
    assert v_level(5) == logging.DEBUG
    text = shown(logger, 5)
    assert "at V5" in text and "a debug line" in text and "at V6" not in text


def test_verbosity_7_shows_v7_not_v8(logger):
    text = shown(logger, 7)
    assert "at V7" in text and "at V6" in text and "at V8" not in text


@pytest.mark.parametrize("verbosity", range(12))
def test_v_n_is_shown_exactly_from_verbosity_n(verbosity, logger):
    text = shown(logger, verbosity)
    for n in range(1, 10):
        assert (f"at V{n}\n" in text) == (n <= verbosity), (verbosity, n)
    assert all(v_of(v_level(n)) == n for n in range(10))


def test_text_is_klogs_layout_header_and_all(logger):
    """What admins of the reference grep: klog's header (severity letter, mmdd, time with
    microseconds, pid, file:line), `^(E|W)[0-9]{4}` finding warnings and errors only."""
    out = io.StringIO()
    configure_logging(2, "text", out, logger=logger)
    logger.info("hello %s", "world")
    vlog(logger, 2, "detail")
    logger.warning("careful")
    logger.error("broken")
    try:
        raise ValueError("bad value")
    except ValueError:
        logger.exception("failed")
    lines = out.getvalue().splitlines()
    header = r"\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +" + str(os.getpid()) + r" test_logsetup\.py:\d+\] "
    for line, (severity, message) in zip(lines, [("I", "hello world"), ("I", "detail"),
                                                 ("W", "careful"), ("E", "broken"),
                                                 ("E", "failed")], strict=False):
        assert re.fullmatch(severity + header + re.escape(message), line), line
    assert [ln for ln in lines if re.match(r"^(E|W)[0-9]{4}", ln)] == lines[2:5]
    assert lines[5] == "Traceback (most recent call last):" and lines[-1] == "ValueError: bad value"


def test_json_lines_are_klog_like(logger):
    out = io.StringIO()
    configure_logging(6, "json", out, logger=logger)
    logger.info("plain %d", 1)
    vlog(logger, 6, "detail %s", "x", extra={"claim": "ns/name"})
    logger.warning("careful")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("it failed")
    info, detail, warning, error = (orjson.loads(line) for line in out.getvalue().splitlines())
    for entry in (info, detail, warning, error):
        assert isinstance(entry["ts"], float) and entry["logger"] == logger.name
        file, line = entry["caller"].rsplit(":", 1)
        assert file == "unit/test_logsetup.py" and line.isdigit()
    assert info["msg"] == "plain 1" and info["v"] == 0
    assert detail["msg"] == "detail x" and detail["v"] == 6 and detail["claim"] == "ns/name"
    assert "v" not in warning and warning["level"] == "warning"
    assert error["err"] == "boom" and "RuntimeError" in error["stacktrace"] and "v" not in error


def test_configuring_again_replaces_the_handler(logger):
    first, second = io.StringIO(), io.StringIO()
    configure_logging(0, "text", first, logger=logger)
    configure_logging(0, "json", second, logger=logger)
    logger.info("once")
    assert first.getvalue() == "" and orjson.loads(second.getvalue())["msg"] == "once"
    assert len(ours(logger)) == 1


@pytest.mark.parametrize("verbosity", [-1, "4", True])
def test_bad_verbosity_names_the_flag_and_the_accepted_values(verbosity, logger):
    with pytest.raises(ValidationError) as err:
        configure_logging(verbosity, "text", io.StringIO(), logger=logger)
    message = str(err.value)
    assert "-v/--verbosity" in message and "LOG_VERBOSITY" in message and "from 0" in message
    assert ours(logger) == []


def test_unknown_format_names_the_flag_and_the_accepted_values(logger):
    with pytest.raises(ValidationError, match=r"unknown logging format 'xml' \(--logging-format, "
                       r"env LOGGING_FORMAT\): use text or json"):
        configure_logging(4, "xml", io.StringIO(), logger=logger)
    assert ours(logger) == []


# --- the flags -------------------------------------------------------------------------------


def parser_for(environ: dict[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p")
    add_logging_flags(parser, environ=environ)
    return parser


def test_flag_defaults_and_env():
    args = parser_for({}).parse_args([])
    assert (args.verbosity, args.logging_format) == (4, "text")
    args = parser_for({"LOG_VERBOSITY": "0", "LOGGING_FORMAT": "json"}).parse_args([])
    assert (args.verbosity, args.logging_format) == (0, "json")
    args = parser_for({"LOGGING_FORMAT": "json"}).parse_args(["-v", "7", "--logging-format",
                                                              "text"])
    assert (args.verbosity, args.logging_format) == (7, "text")


@pytest.mark.parametrize("env, words", [
    ({"LOGGING_FORMAT": "xml"}, ["LOGGING_FORMAT", "--logging-format", "text or json"]),
    ({"LOG_VERBOSITY": "-2"}, ["LOG_VERBOSITY", "-v", "negative", "from 0"]),
    ({"LOG_VERBOSITY": "high"}, ["LOG_VERBOSITY", "-v", "not a log verbosity"]),
])
def test_bad_env_values_are_clear_errors(env, words):
    with pytest.raises(SystemExit) as err:
        parser_for(env)
    assert all(w in str(err.value) for w in words), err.value


@pytest.mark.parametrize("argv, words", [
    (["--logging-format", "xml"], ["--logging-format", "'xml' is not a logging format",
                                   "text or json"]),
    (["-v", "-1"], ["-v/--verbosity", "negative", "from 0"]),
])
def test_bad_flag_values_are_clear_errors(argv, words, capsys):
    with pytest.raises(SystemExit):
        parser_for({}).parse_args(argv)
    stderr = capsys.readouterr().err
    assert all(w in stderr for w in words), stderr


@pytest.mark.parametrize("argv", [
    ["compute-domain-agent", "plugin", "--help"],
    ["compute-domain-agent", "daemon", "run", "--help"],
    ["compute-domain-controller", "--help"],
])
def test_help_documents_the_logging_flags(argv):
    out = subprocess.run([BIN / argv[0], *argv[1:]], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "--logging-format" in out.stdout and "LOGGING_FORMAT" in out.stdout
    assert "LOG_VERBOSITY" in out.stdout and "klog" in out.stdout


def test_the_controller_refuses_a_bad_logging_format():
    out = subprocess.run([BIN / "compute-domain-controller", "--image-name", "img",
                          "--logging-format", "yaml"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "'yaml' is not a logging format" in out.stderr


def test_a_process_logs_json_to_stderr():
    script = ("import logging\nfrom runtime.logsetup import configure_logging, vlog\n"
              "configure_logging(1, 'json')\nlog = logging.getLogger('agent.x')\n"
              "log.info('hello')\nvlog(log, 1, 'one')\nvlog(log, 2, 'two')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    lines = [orjson.loads(line) for line in out.stderr.splitlines()]
    assert [(e["msg"], e["v"], e["logger"]) for e in lines] == [("hello", 0, "agent.x"),
                                                               ("one", 1, "agent.x")]


@pytest.mark.parametrize(("verbosity", "shown"), [(6, False), (9, True)])
def test_library_debug_only_from_v9(verbosity, shown):
    """At -v 6 an admin reads our V6 lines, not a netlink or urllib3 line per request."""
    script = ("import logging\nfrom runtime.logsetup import configure_logging, vlog\n"
              f"configure_logging({verbosity})\n"
              "logging.getLogger('urllib3.connectionpool').debug('library detail')\n"
              "logging.getLogger('pyroute2.netlink').debug('netlink detail')\n"
              "vlog(logging.getLogger('runtime.kubecall'), 6, 'ours')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "ours" in out.stderr
    assert ("library detail" in out.stderr) is shown, out.stderr
    assert ("netlink detail" in out.stderr) is shown, out.stderr
