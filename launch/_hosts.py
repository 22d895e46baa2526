"""PopRun's host list: ``-H a,b`` and bracket ranges such as ``host[0-2,4]``."""

from __future__ import annotations

import re

from launch._errors import UsageError

_RANGE_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")


def _split_top_level(text: str) -> list[str]:
    """Splits on commas outside brackets, so ``a,host[0-2,4]`` has two items."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def _expand_item(item: str, text: str) -> list[str]:
    if "[" not in item and "]" not in item:
        return [item]
    match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\]([^\[\]]*)", item)
    if match is None:
        raise UsageError(
            f"--host {text!r}: cannot read {item!r}; write ranges as prefix[0-2,4] with one "
            f"pair of brackets per host pattern."
        )
    prefix, body, suffix = match.groups()
    names = []
    for part in body.split(","):
        bounds = _RANGE_ITEM.match(part.strip())
        if bounds is None:
            raise UsageError(
                f"--host {text!r}: range item {part!r} is not N or N-M; write ranges such as "
                f"host[0-2,4]."
            )
        first, last = bounds.group(1), bounds.group(2) or bounds.group(1)
        if int(last) < int(first):
            raise UsageError(
                f"--host {text!r}: range {part!r} runs backwards; write it as {last}-{first}."
            )
        # Zero-padded bounds (node[01-12]) keep their width, as cluster host lists do.
        width = len(first) if first.startswith("0") and len(first) > 1 else 0
        names.extend(f"{prefix}{n:0{width}d}{suffix}" for n in range(int(first), int(last) + 1))
    return names


def parse_hosts(text: str) -> tuple[str, ...]:
    """Expands a PopRun host list into host names, in order.

    Args:
        text: ``-H/--host`` value: comma-separated names, each possibly with one bracket
            range, e.g. ``"a,b"``, ``"host[0-2,4]"`` or ``"node[01-03]"``.

    Returns:
        The host names, e.g. ``("host0", "host1", "host2", "host4")``.

    Raises:
        UsageError: an empty name, a malformed range or a host named twice.
    """
    names: list[str] = []
    for item in _split_top_level(text.strip()):
        item = item.strip()
        if not item:
            raise UsageError(
                f"--host {text!r} has an empty host name; separate host names with single "
                f"commas, e.g. -H host0,host1."
            )
        names.extend(_expand_item(item, text))
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(
            f"--host {text!r} names {', '.join(duplicates)} more than once; list each host once "
            f"(instances are divided evenly among the hosts)."
        )
    return tuple(names)
