"""The PopTorch option methods the emulator supports, accepts without effect, or refuses.

Read off ``popdist.poptorch.Options`` itself: the methods its classes define are supported
(each checks its arguments), and the two tables its ``__getattr__`` consults,
``_NO_EFFECT`` and ``_REFUSED``, are the others. A method added to either table shows on
the PopTorch page without anyone retyping it.
"""

from __future__ import annotations

import inspect


def _groups() -> dict[str, type]:
    """Each option group's name, as programs write it, and the class that serves it."""
    from popdist_emu.popdist import _poptorch_groups as groups
    from popdist_emu.popdist import _poptorch_options as options

    return {
        "Options": options.Options,
        "Training": groups._Training,
        "Precision": groups._Precision,
        "TensorLocations": groups._TensorLocations,
        "Distributed": groups._Distributed,
        "TensorLocationSettings": groups.TensorLocationSettings,
    }


def _summary(member: object) -> str:
    doc = inspect.getdoc(member) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    return first.replace("|", "\\|")


def _qualified(group: str, name: str) -> str:
    return f"`opts.{name}`" if group == "Options" else f"`opts.{group}.{name}`"


def option_rows() -> list[tuple[str, str, str]]:
    """(method, what the emulator does, why), for every method the three sources name."""
    from popdist_emu.popdist import _poptorch_options as options

    rows = []
    for group, cls in _groups().items():
        for name, member in vars(cls).items():
            if name.startswith("_") or not (callable(member) or isinstance(member, property)):
                continue
            if group == "TensorLocationSettings":
                shown = f"`TensorLocationSettings().{name}`"
            else:
                shown = _qualified(group, name)
            kind = "supported (reads)" if isinstance(member, property) else "supported"
            rows.append((shown, kind, _summary(member)))
    for group, names in options._NO_EFFECT.items():
        for name in names:
            rows.append((_qualified(group, name), "no effect, warns once", ""))
    for (group, name), reason in options._REFUSED.items():
        rows.append((_qualified(group, name), "refused", reason))
    return rows


def options_table() -> str:
    """The Markdown table of :func:`option_rows`, supported first."""
    lines = ["| method | in the emulator | note |", "|---|---|---|"]
    lines += [f"| {name} | {kind} | {note} |" for name, kind, note in option_rows()]
    return "\n".join(lines)
