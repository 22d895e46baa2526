"""PopRun's host list: ``-H a,b`` and bracket ranges such as ``host[0-2,4]``.

Expanded in time linear in the number of names, with a cap on that number checked before
anything is expanded, and error messages that quote at most a short piece of the input.
"""

from __future__ import annotations

import re

from launch._errors import UsageError

# ASCII digits (\d also matches other scripts' digits), at most 63: a host name's label is at
# most 63 characters (RFC 1035, 2.3.4), so a longer number cannot be part of a host name.
_RANGE_ITEM = re.compile(r"^([0-9]{1,63})(?:-([0-9]{1,63}))?$")
# More host names than any IPU-POD has hosts (an IPU-POD256 has 64 hosts at most; even one
# host per replica of 65,536 replicas stays below it).
MAX_HOSTS = 65536


def short(text: str, limit: int = 60) -> str:
    """``text`` quoted, cut to ``limit`` characters, so an error stays one short line."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


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


def _expand_item(item: str, text: str, room: int) -> list[str]:
    if "[" not in item and "]" not in item:
        return [item]
    match = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\]([^\[\]]*)", item)
    if match is None:
        raise UsageError(
            f"--host {short(text)}: cannot read {short(item)}; write ranges as "
            f"prefix[0-2,4] with one pair of brackets per host pattern."
        )
    prefix, body, suffix = match.groups()
    names: list[str] = []
    for part in body.split(","):
        bounds = _RANGE_ITEM.match(part.strip())
        if bounds is None:
            raise UsageError(
                f"--host {short(text)}: range item {short(part)} is not N or N-M (ASCII digits, "
                f"at most 63); write ranges such as host[0-2,4]."
            )
        first, last = bounds.group(1), bounds.group(2) or bounds.group(1)
        if int(last) < int(first):
            raise UsageError(
                f"--host {short(text)}: range {short(part)} runs backwards; write it as "
                f"{last}-{first}."
            )
        if int(last) - int(first) + 1 > room - len(names):
            raise UsageError(
                f"--host {short(text)} names more than {MAX_HOSTS} hosts; give at most one "
                f"host per instance."
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
                f"--host {short(text)} has an empty host name; separate host names with "
                f"single commas, e.g. -H host0,host1."
            )
        names.extend(_expand_item(item, text, MAX_HOSTS - len(names)))
        if len(names) > MAX_HOSTS:
            raise UsageError(
                f"--host {short(text)} names more than {MAX_HOSTS} hosts; give at most one "
                f"host per instance."
            )
    seen: set[str] = set()
    duplicates: dict[str, None] = {}  # ordered, each once
    for name in names:
        if name in seen:
            duplicates[name] = None
        seen.add(name)
    if duplicates:
        shown = sorted(duplicates)[:5]
        more = f" (and {len(duplicates) - 5} others)" if len(duplicates) > 5 else ""
        raise UsageError(
            f"--host {short(text)} names {', '.join(shown)}{more} more than once; list each "
            f"host once (instances are divided evenly among the hosts)."
        )
    return tuple(names)
