"""SHA-256 without OpenSSL's start-up cost (stage: base).

`hashlib` loads OpenSSL's libcrypto when it is imported: 4-6 ms of every process's start-up.
CPython's own SHA-256 module loads in under 1 ms and gives the same digests, at about a seventh
of OpenSSL's speed on long inputs (5.5 ms against 0.75 ms per MiB on the benchmark machine). So
short inputs (cache keys, the texts of graphs) use CPython's, and inputs of `LONG` bytes or more,
or any input in a process that has imported hashlib already, use OpenSSL's. Either way the
digest is the same.
"""

from __future__ import annotations

import sys
from typing import Any

try:  # CPython 3.12 and later
    from _sha2 import sha256 as _builtin_sha256
except ImportError:
    try:  # CPython 3.11
        from _sha256 import sha256 as _builtin_sha256
    except ImportError:  # another interpreter: hashlib's is the only one
        _builtin_sha256 = None

# Where importing OpenSSL (4-6 ms) costs less than hashing with CPython's SHA-256 does.
LONG = 1 << 20


def sha256(data: Any = b"") -> Any:
    """A SHA-256 hash object (hashlib's interface: `update`, `hexdigest`) holding `data`, any
    C-contiguous buffer."""
    # hashlib's constructor if hashlib is imported: not just in sys.modules, where another thread
    # (the background compilation, importing Numba) may be running its module body still
    openssl = getattr(sys.modules.get("hashlib"), "sha256", None)
    if openssl is None and (_builtin_sha256 is None or _nbytes(data) >= LONG):
        import hashlib  # waits for an import of it under way in another thread

        openssl = hashlib.sha256
    if openssl is not None:
        return openssl(data)
    return _builtin_sha256(data)


def _nbytes(data: Any) -> int:
    nbytes = getattr(data, "nbytes", None)  # an array or a memoryview: len() counts rows
    return len(data) if nbytes is None else nbytes
