"""Fill a module's namespace with another module's public names."""

from __future__ import annotations


def forward(namespace: dict, module, skip=()) -> None:
    for name in dir(module):
        if name.startswith("__") or name in skip:
            continue
        namespace.setdefault(name, getattr(module, name))
