"""Where the disk caches live, which of their folders and files may be trusted, and file hashes.

The kernel cache (cache.py) and the persisted programs (program_cache.py) share these. They are
apart from cache.py so that a warm first call, which loads a persisted program and runs it on
the interpreter, checks its folder without importing the kernel cache's machinery.
"""

from __future__ import annotations

import contextlib
import os
import stat

from . import config

log = config.log

refused: set[str] = set()  # directories already reported as unsafe


def cache_dir() -> str | None:
    """The cache directory in use (None if the disk cache is off)."""
    if config.cache_off():
        return None
    chosen = config.cache_dir()
    if chosen is not None:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tracegrad")


def safe_dir(path: str, create: bool) -> bool:
    """Whether `path` is a directory only this user can write to (creating it if asked)."""
    try:
        if create and not os.path.isdir(path):
            os.makedirs(path, mode=0o700, exist_ok=True)
            os.chmod(path, 0o700)
        st = os.stat(path)
    except OSError as exc:
        if path not in refused:  # a file where the folder should be, no permission...
            refused.add(path)
            log.warning("tracegrad: not using the disk cache at %s (%s)", path, exc)
        return False
    ok = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
    if not ok and path not in refused:
        refused.add(path)
        log.warning(
            "tracegrad: not using the disk cache at %s: it must be a directory owned by you "
            "that no other user can write to (chmod 700 it, or set %s)",
            path,
            config.CACHE_DIR,
        )
    return ok


def safe_file(path: str) -> bool:
    """Whether `path` is a regular file (not a link) only this user can write to."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


def write_atomically(path: str, data: bytes, sync: bool = False) -> None:
    """`data` as the file `path`, owner only, through a temporary file renamed into place: a
    reader sees the whole file or none (`sync`: on disk before the rename)."""
    import tempfile  # not on a warm first call's path, which writes nothing

    directory, suffix = os.path.dirname(path), os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def source_hash(paths: list[str]) -> str:
    """A hash of the text of some source files (the code a kernel calls into)."""
    import hashlib  # here: its OpenSSL costs 4-6 ms of a start-up that does not hash sources

    h = hashlib.sha256()
    for path in sorted(paths):
        try:
            with open(path, "rb") as f:
                h.update(f.read())
        except OSError:
            h.update(b"missing " + path.encode())
    return h.hexdigest()[:16]
