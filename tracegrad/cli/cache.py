"""`tracegrad cache info|list|clear`: the compiled-kernel disk cache."""

from __future__ import annotations

import argparse
import importlib
import time

import tracegrad as tg

from .common import CLIError, describe_cache, format_bytes, guarded


def cmd_cache(args: argparse.Namespace) -> int:
    info, clear = getattr(tg, "cache_info", None), getattr(tg, "clear_cache", None)
    if info is None or clear is None:
        raise CLIError(
            "the disk cache is not available in this build of tracegrad",
            hint="compiled programs are still cached in memory for the life of the process; "
            "tracegrad.clear_programs() empties that cache",
        )
    if args.action == "info":
        for line in describe_cache(info()):
            print(line)
        limit, _ = guarded(lambda: importlib.import_module("tracegrad.base.cache")._max_bytes())
        if limit is not None:
            print(
                f"{'limit':<9}  {format_bytes(limit)} (TRACEGRAD_CACHE_MAX_MB; the least "
                "recently used kernels go first)"
            )
        print("`tracegrad cache list` shows each entry")
        return 0
    if args.action == "list":
        return _cache_list()
    result = clear()
    print("cache cleared" + (f": {result}" if result not in (None, "") else ""))
    return 0


def _cache_list() -> int:
    cache = importlib.import_module("tracegrad.base.cache")
    root, entries = cache.cache_dir(), cache.entries()
    if root is None:
        print("the disk cache is off (TRACEGRAD_CACHE_DIR=off): nothing is on disk")
        return 0
    total = sum(e.bytes for e in entries)
    print(
        f"kernel cache {root}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
        f"{format_bytes(total)}" + ("" if entries else " (empty)")
    )
    if not entries:
        return 0
    print()
    print(f"  {'key':<12}  {'backend':<7}  {'size':>9}  {'last used':<16}  contents")
    for e in entries:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
        what = [e.summary]
        if e.signatures:
            what.append("compiled for arrays " + " | ".join(f"({s})" for s in e.signatures))
        if e.shapes:
            what.append("shapes " + " ".join(e.shapes))
        if e.sources:
            what.append("from " + " ".join(e.sources))
        print(
            f"  {e.key[:12]:<12}  {e.backend:<7}  {format_bytes(e.bytes):>9}  {used:<16}  "
            + "; ".join(what)
        )
    print()
    print(
        "Entries are kernels keyed by their source, shared by every function and shape that "
        "generates the same code. A cpu kernel is compiled per array rank and dtype (any "
        "shape); a cuda program bakes in its shapes and names the source lines it came from."
    )
    return 0
