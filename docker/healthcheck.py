#!/usr/bin/env python3
"""The container's health check: JupyterLab answers on $JUPYTER_PORT (exit 0), or not (exit 1).

`/api` needs no token and answers {"version": ...} once the server is up."""

import json
import os
import sys
import urllib.request


def main() -> int:
    url = f"http://127.0.0.1:{os.environ.get('JUPYTER_PORT', '8888')}/api"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            ok = response.status == 200 and "version" in json.load(response)
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    if not ok:
        print(f"unhealthy: {url} did not answer with a version", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
