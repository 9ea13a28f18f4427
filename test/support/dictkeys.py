"""Dict literals of a Python text (an easyconfig) that name a key twice."""

from __future__ import annotations

import ast


def duplicate_keys(text: str) -> list[str]:
    """`line: key` for every key that a dict literal of a Python text names a second time."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Dict):
            continue
        seen: set[object] = set()
        for key in node.keys:
            if key is None:  # {**other}
                continue
            try:
                value: object = ast.literal_eval(key)
            except ValueError:
                value = ast.dump(key)
            if value in seen:
                found.append((key.lineno, repr(value)))
            seen.add(value)
    return [f"{line}: {key}" for line, key in sorted(found)]
