"""A pytest plugin for benchmarks/autograd_suite.py: a per-test time limit (signal.alarm, for
machines without pytest-timeout) and one JSON line per test with its outcome and, for a failure,
the exception's type, message and the innermost frame it was raised at.

Loaded with `-p suite_plugin`; AUTOGRAD_SUITE_OUT names the output file and
AUTOGRAD_SUITE_TIMEOUT the limit in seconds (0: none)."""

from __future__ import annotations

import json
import os
import signal
import traceback

import pytest


class SuiteTimeout(Exception):
    """The test ran past the suite's per-test time limit."""


def _alarm(signum, frame):
    raise SuiteTimeout(f"the test ran past {os.environ.get('AUTOGRAD_SUITE_TIMEOUT')} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    seconds = int(os.environ.get("AUTOGRAD_SUITE_TIMEOUT", "0") or 0)
    if seconds > 0 and hasattr(signal, "SIGALRM"):
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(seconds)
        try:
            yield
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    else:
        yield


def _first_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a chain (`raise ... from`), where the failure began."""
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc


def _clip(text: str, n: int = 1000) -> str:
    """Long messages keep their start and their end (a check's numbers come last)."""
    return text if len(text) <= 2 * n else f"{text[:n]} ... {text[-n:]}"


def _describe(excinfo) -> dict:
    exc = excinfo.value
    first = _first_cause(exc)
    frames = traceback.extract_tb(first.__traceback__) if first.__traceback__ else []
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return {
        "exc_type": type(exc).__name__,
        "message": _clip(str(exc)),
        "cause_type": type(first).__name__,
        "cause_message": _clip(str(first)),
        "where": where,
    }


def _write(record: dict) -> None:
    path = os.environ.get("AUTOGRAD_SUITE_OUT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        record = {
            "nodeid": item.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "duration": round(call.duration, 3),
        }
        if call.excinfo is not None and not report.skipped:
            record.update(_describe(call.excinfo))
            if call.excinfo.errisinstance(SuiteTimeout):
                record["timeout"] = True
        _write(record)


def pytest_sessionstart(session):
    import tracegrad

    _write({"nodeid": "", "when": "session", "outcome": "", "tracegrad_file": tracegrad.__file__})


def pytest_collectreport(report):
    if report.failed:
        _write(
            {
                "nodeid": report.nodeid,
                "when": "collect",
                "outcome": "error",
                "exc_type": "CollectionError",
                "message": str(report.longrepr)[-2000:],
            }
        )
