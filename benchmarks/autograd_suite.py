"""HIPS autograd's own test suite, run against tracegrad through a stand-in `autograd` package.

    python3 benchmarks/autograd_suite.py --autograd-repo PATH [--rev HEAD] [--only test_complex.py]
        [--backend cpu|numpy] [--tracegrad-rev REV] [--timeout 60] [--json out.json]

PATH is a git repository of autograd (a checkout or a bare copy). The tests folder of its commit
REV is extracted (git archive) into a temporary folder and run by pytest in a subprocess, with
benchmarks/autograd_shim first on PYTHONPATH: `import autograd` there is the shim (see
benchmarks/autograd_shim/README.md), never autograd's own code. Each test gets a time limit, and
its outcome is collected by a small pytest plugin (autograd_shim/suite_plugin.py).

The report gives the totals and the failures grouped by their first cause: complex numbers, an
unsupported NumPy/SciPy function (named), np.asarray of a traced value, bool() of a traced value,
a wrong number (a derivative check or an assertion on values failed: listed one by one),
autograd's internals (vector spaces, boxes, which tracegrad does not have), and the rest.

`--backend numpy` runs tracegrad's interpreter (the oracle) instead of the default backend, to
separate kernel issues from derivative-rule issues. `--tracegrad-rev REV` measures a commit of
this repository (its tracegrad package, git-archived beside the tests) instead of the installed
tracegrad, so that uncommitted work in the tree does not leak into a measurement.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHIM = HERE / "autograd_shim"
REPO_ROOT = HERE.parent
# The test count of autograd's suite that issue 36's target is stated against.
AUTOGRAD_SUITE_COUNT = 510


def fail(message: str) -> None:
    print(f"autograd_suite: {message}", file=sys.stderr)
    raise SystemExit(2)


def git(repo: Path, *args: str, binary: bool = False):
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, check=False, text=not binary
    )


def resolve_commit(repo: Path, rev: str, what: str) -> str:
    if not repo.exists():
        fail(f"{what} {repo} does not exist; pass the path of a git repository of it")
    probe = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if probe.returncode != 0:
        fail(
            f"{what} {repo} is not a git repository with a commit {rev!r} "
            f"({(probe.stderr or '').strip() or 'no such commit'}); pass a checkout or a bare "
            "copy of it (e.g. --autograd-repo /work/.mirror/HIPS+autograd/repo)"
        )
    return probe.stdout.strip()


def extract(repo: Path, commit: str, folder: str, into: Path, what: str) -> None:
    listing = git(repo, "ls-tree", "-d", "--name-only", commit, folder)
    if listing.returncode != 0 or not listing.stdout.strip():
        fail(f"{what} {repo} has no {folder}/ folder at {commit[:10]}: is it the right repository?")
    archive = git(repo, "archive", commit, folder, binary=True)
    if archive.returncode != 0:
        fail(f"git archive of {folder}/ failed in {repo}: {archive.stderr.decode()[:500]}")
    untar = subprocess.run(
        ["tar", "-x", "-C", str(into)], input=archive.stdout, capture_output=True, check=False
    )
    if untar.returncode != 0:
        fail(f"extracting {folder}/ failed: {untar.stderr.decode()[:500]}")


# ---- classification of failures by their first cause

INTERNALS_FILES = ("test_vspaces.py",)  # autograd's vector-space machinery, tested directly


def _unsupported_name(text: str) -> str | None:
    m = re.search(r"(np\.[\w.]+|scipy\.[\w.]+) is not supported on traced values", text)
    return m.group(1) if m else None


def _traced_at(text: str, record: dict) -> str:
    """The user's line that tracegrad's message names (`at file:line: source`), shortened."""
    m = re.search(r"^\s*at (\S+?):(\d+)(?::\s*(.*))?$", text, re.MULTILINE)
    if not m:
        return record.get("where", "")
    return f"{Path(m.group(1)).name}:{m.group(2)}: {(m.group(3) or '').strip()[:90]}"


def _mismatch(text: str) -> str:
    """A derivative check's name and its two numbers, without the (long) argument."""
    check = re.search(r"(?:Derivative \((\w+)\)|(Value)) check of (\S+) failed", text)
    analytic = re.search(r"analytic:\s*(\S+)", text)
    numeric = re.search(r"numeric:\s*(\S+)", text)
    if check and analytic and numeric:
        return (
            f"{check.group(1) or check.group(2)} check of {check.group(3)}: "
            f"analytic {analytic.group(1)}, "
            f"numeric {numeric.group(1)}"
        )
    return text.strip()[:600]


def classify(record: dict) -> tuple[str, str]:
    """(group, detail) for a failed or erroring test."""
    if record.get("timeout"):
        return "timeout", f"over the per-test limit ({record.get('message', '')})"
    if record.get("when") == "collect":
        return "collection error", record.get("message", "")[-300:]
    text = f"{record.get('cause_message', '')}\n{record.get('message', '')}"
    exc = record.get("cause_type") or record.get("exc_type", "")
    outer = record.get("exc_type", "")
    nodeid = record["nodeid"]
    if "autograd internals" in text or nodeid.split("::")[0].endswith(INTERNALS_FILES):
        return "autograd internals", text.strip().splitlines()[0][:200] if text.strip() else exc
    on_complex = re.search(
        r"([^;\n]{0,90}?) of (?:a )?complex (?:Hermitian )?(?:matrix|matrices|values)", text
    )
    if on_complex and outer != "AssertionError":
        return "complex numbers", f"{on_complex.group(1).strip()}: refused on complex input"
    name = _unsupported_name(text)
    if name:
        return "unsupported function", name
    lowered = text.lower()
    if "convert a traced value to a numpy array" in lowered or "__array__" in text:
        return "np.asarray of a traced value", _traced_at(text, record)
    if "bool() of) a traced value" in lowered or "cannot branch on" in lowered:
        return "bool() of a traced value", _traced_at(text, record)
    if "drew random numbers" in lowered:
        return "random draws while tracing", text.strip().splitlines()[0][-120:]
    if "complex" in lowered and outer != "AssertionError":
        return "complex numbers", text.strip().splitlines()[0][:200]
    if outer == "Failed" and "DID NOT RAISE" in text:
        return "expected error not raised", text.strip().splitlines()[0][:200]
    if outer == "AssertionError":
        if "space mismatch" in text or "Structure mismatch" in text or "dtype" in text:
            return "wrong shape or type", text.strip()[:400]
        return "wrong number", _mismatch(text)
    first_line = text.strip().splitlines()[0][:160] if text.strip() else ""
    return "other", f"{exc}: {first_line}"


GROUP_ORDER = (
    "wrong number",
    "wrong shape or type",
    "complex numbers",
    "unsupported function",
    "np.asarray of a traced value",
    "bool() of a traced value",
    "random draws while tracing",
    "expected error not raised",
    "autograd internals",
    "timeout",
    "collection error",
    "other",
)


def summarise(records: list[dict]) -> dict:
    tests = [r for r in records if r["when"] not in ("collect", "session")]
    counts = collections.Counter(r["outcome"] for r in tests)
    errors = sum(1 for r in tests if r["when"] == "setup" and r["outcome"] == "failed")
    failed = [r for r in tests if r["outcome"] == "failed"]
    failed += [r for r in records if r["when"] == "collect"]
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for r in failed:
        group, detail = classify(r)
        groups[group].append({"nodeid": r["nodeid"], "detail": detail})
    return {
        "collected": len(tests),
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0) - errors,
        "errors": errors,
        "skipped": counts.get("skipped", 0),
        "collection_errors": sum(1 for r in records if r["when"] == "collect"),
        "groups": {g: groups[g] for g in GROUP_ORDER if groups.get(g)},
    }


def print_report(summary: dict, settings: dict) -> None:
    print(
        f"autograd {settings['autograd_commit'][:10]} tests against tracegrad "
        f"{settings['tracegrad']} (backend {settings['backend']}, {settings['env']})"
    )
    print(
        f"passed {summary['passed']} / collected {summary['collected']} "
        f"(failed {summary['failed']}, errors {summary['errors']}, skipped {summary['skipped']}, "
        f"collection errors {summary['collection_errors']}); autograd's suite: "
        f"{AUTOGRAD_SUITE_COUNT} tests; {settings['seconds']:.0f} s"
    )
    for group, items in summary["groups"].items():
        print(f"\n{group}: {len(items)}")
        if group in ("wrong number", "wrong shape or type", "expected error not raised"):
            for item in items:
                detail = item["detail"].replace("\n", " | ")
                print(f"  {item['nodeid']}\n      {detail[:400]}")
            continue
        by_detail = collections.Counter(item["detail"] for item in items)
        for detail, n in by_detail.most_common():
            one = detail.replace("\n", " | ")[:160]
            print(f"  {n:4d}  {one}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autograd-repo", required=True, type=Path)
    parser.add_argument("--rev", default="HEAD", help="autograd's commit to test (HEAD)")
    parser.add_argument(
        "--only", action="append", default=[], help="a test file (or node id); repeatable"
    )
    parser.add_argument("-k", dest="keyword", help="pytest's -k expression")
    parser.add_argument("--backend", choices=("cpu", "numpy", "cuda"), default=None)
    parser.add_argument(
        "--tracegrad-rev", help="a commit of this repository whose tracegrad package to measure"
    )
    parser.add_argument("--timeout", type=int, default=60, help="seconds per test (60)")
    parser.add_argument("--json", type=Path, help="write the outcomes and the groups here")
    args = parser.parse_args(argv)

    autograd_repo = args.autograd_repo.resolve()
    commit = resolve_commit(autograd_repo, args.rev, "--autograd-repo")
    with tempfile.TemporaryDirectory(prefix="autograd_suite_") as tmp:
        tmp_path = Path(tmp)
        extract(autograd_repo, commit, "tests", tmp_path, "--autograd-repo")
        paths = [str(SHIM)]
        if args.tracegrad_rev:
            tg_commit = resolve_commit(REPO_ROOT, args.tracegrad_rev, "this repository")
            (tmp_path / "tracegrad_src").mkdir()
            extract(REPO_ROOT, tg_commit, "tracegrad", tmp_path / "tracegrad_src", "tracegrad")
            paths.append(str(tmp_path / "tracegrad_src"))
            tracegrad = f"commit {tg_commit[:10]}"
        else:
            probe = git(REPO_ROOT, "log", "-1", "--format=%h")
            dirty = git(REPO_ROOT, "status", "--porcelain", "--", "tracegrad").stdout.strip()
            tracegrad = (
                f"installed ({probe.stdout.strip()}{', with local changes' if dirty else ''})"
            )
        out_file = tmp_path / "outcomes.jsonl"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["AUTOGRAD_SUITE_OUT"] = str(out_file)
        env["AUTOGRAD_SUITE_TIMEOUT"] = str(args.timeout)
        if args.backend:
            env["TRACEGRAD_BACKEND"] = args.backend
        backend = args.backend or "default (" + default_backend(env) + ")"
        settings_env = (
            ", ".join(f"{k}={env[k]}" for k in sorted(env) if k.startswith("TRACEGRAD_"))
            or "TRACEGRAD_* unset: tiered first calls on"
        )
        targets = [f"tests/{t}" if not t.startswith("tests/") else t for t in args.only]
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "suite_plugin",
            "-p",
            "no:randomly",
            "-o",
            "addopts=",
            "-n",
            "0",
            "--tb=no",
            "--continue-on-collection-errors",
            "-W",
            "ignore::DeprecationWarning",
            *(["-k", args.keyword] if args.keyword else []),
            *(targets or ["tests"]),
        ]
        if not _has_xdist(env):
            command.remove("-n")
            command.remove("0")
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        records = []
        if out_file.exists():
            records = [json.loads(line) for line in out_file.read_text().splitlines() if line]
        if not records:
            print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
            fail(f"pytest produced no outcomes (exit code {proc.returncode})")
    summary = summarise(records)
    used = [r["tracegrad_file"] for r in records if r["when"] == "session"]
    tracegrad += f" from {used[0]}" if used else ""
    settings = {
        "autograd_commit": commit,
        "tracegrad": tracegrad,
        "backend": backend,
        "env": settings_env,
        "seconds": seconds,
        "pytest_exit_code": proc.returncode,
        "pytest_tail": proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else [],
    }
    print_report(summary, settings)
    if args.json:
        args.json.write_text(
            json.dumps({"settings": settings, "summary": summary, "tests": records}, indent=1)
        )
    return 0


def default_backend(env: dict) -> str:
    probe = subprocess.run(
        [sys.executable, "-c", "import tracegrad as tg; print(tg.default_backend_name())"],
        env=env,
        capture_output=True,
        text=True,
    )
    return probe.stdout.strip() or "unknown"


def _has_xdist(env: dict) -> bool:
    probe = subprocess.run(
        [sys.executable, "-c", "import xdist"], env=env, capture_output=True, check=False
    )
    return probe.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
