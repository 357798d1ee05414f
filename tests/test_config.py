"""tracegrad/base/config.py: the one reader of TRACEGRAD_* variables, its table and its semantics."""

import logging
import os
import re
from pathlib import Path

import pytest

import tracegrad
from tracegrad.runtime import backends
from tracegrad.base import config
from tracegrad.base import cache
from tracegrad.runtime import program, program_cache, tiered

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(tracegrad.__file__).parent


def test_the_table_is_the_same_in_the_docstring_and_in_the_docs():
    table = config.markdown_table()
    assert table in config.__doc__
    assert table in (ROOT / "docs" / "api.md").read_text()
    names = [v.name for v in config.VARIABLES]
    assert len(set(names)) == len(names) and all(n.startswith("TRACEGRAD_") for n in names)


def test_no_other_module_reads_a_tracegrad_variable():
    """Every TRACEGRAD_* name the package mentions in code is one of the table's, and only
    config.py reads the environment for them."""
    known = {v.name for v in config.VARIABLES}
    reads = re.compile(r"(environ|getenv|\benv)\b[^\n]*TRACEGRAD_")
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        for name in re.findall(r"TRACEGRAD_[A-Z_]+", text):
            assert name in known, f"{path.relative_to(ROOT)} names {name}, missing from config"
        if path.name != "config.py":
            assert not reads.search(text), f"{path.relative_to(ROOT)} reads TRACEGRAD_* itself"


def test_settings_are_read_at_each_call(monkeypatch):
    monkeypatch.setenv(config.BACKEND, " numpy ")
    assert config.backend() == "numpy" == backends.default_backend_name()
    monkeypatch.setenv(config.BACKEND, "cpu")
    assert backends.default_backend_name() == "cpu"
    monkeypatch.delenv(config.BACKEND)
    assert config.backend() == ""

    monkeypatch.setenv(config.LOG, "retrace, cuda")
    assert config.log_topics() == {"retrace", "cuda"}
    assert config.log_enabled("cuda") and not config.log_enabled("other")
    monkeypatch.setenv(config.LOG, "all")
    assert config.log_enabled("other")
    monkeypatch.setenv(config.LOG, "")
    assert config.log_topics() == set()

    for value, on in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(config.DEBUG_NANS, value)
        assert config.debug_nans() is on and program._debug_nans() is on

    monkeypatch.setenv(config.MATH, " LIBM ")
    assert config.math() == "libm"

    monkeypatch.setenv(config.DUMP_KERNELS, "/some/folder")
    assert config.dump_kernels() == "/some/folder"
    monkeypatch.setenv(config.DUMP_KERNELS, "")
    assert config.dump_kernels() is None


@pytest.mark.parametrize(
    "name, read",
    [
        (config.TIERED, tiered.enabled),
        (config.PROGRAM_CACHE, program_cache.enabled),
    ],
)
def test_switches_are_on_unless_turned_off(monkeypatch, name, read):
    monkeypatch.delenv(name, raising=False)
    assert read()
    for value in ("0", "off", " False ", "NO"):
        monkeypatch.setenv(name, value)
        assert not read(), value
    for value in ("1", "on", "yes", ""):
        monkeypatch.setenv(name, value)
        assert read(), value


def test_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(config.CACHE_DIR, str(tmp_path / "here"))
    assert cache.cache_dir() == str(tmp_path / "here") and not config.cache_off()
    for value in ("off", "0", "None", "", " "):
        monkeypatch.setenv(config.CACHE_DIR, value)
        assert config.cache_off() and cache.cache_dir() is None, value
    monkeypatch.delenv(config.CACHE_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert not config.cache_off() and config.cache_dir() is None
    assert cache.cache_dir() == os.path.join(str(tmp_path), "tracegrad")


def test_megabytes_and_a_value_that_is_not_a_number(monkeypatch, caplog):
    monkeypatch.setenv(config.CACHE_MAX_MB, "0.5")
    assert config.cache_max_bytes() == 2**19
    monkeypatch.delenv(config.CACHE_MAX_MB)
    assert config.cache_max_bytes() == config.DEFAULT_MB * 2**20
    monkeypatch.setenv(config.PROGRAM_MEMORY_MB, "lots")
    with caplog.at_level(logging.WARNING, logger="tracegrad"):
        assert config.program_memory_bytes() == config.DEFAULT_MB * 2**20
    assert "ignoring TRACEGRAD_PROGRAM_MEMORY_MB='lots'" in caplog.text


def test_the_doctor_lists_every_variable():
    from tracegrad.cli import doctor

    assert list(doctor.ENVIRONMENT) == [v.name for v in config.VARIABLES]


def test_values_that_are_not_understood_are_logged_once(monkeypatch, caplog):
    monkeypatch.setenv(config.CACHE_MAX_MB, "-5")
    monkeypatch.setenv(config.TIERED, "banana")
    with caplog.at_level(logging.WARNING, logger="tracegrad"):
        assert config.cache_max_bytes() == config.DEFAULT_MB * 2**20
        assert config.tiered()  # the default: on
        config.tiered()
    assert "ignoring TRACEGRAD_CACHE_MAX_MB='-5'" in caplog.text
    assert caplog.text.count("ignoring TRACEGRAD_TIERED='banana'") == 1
