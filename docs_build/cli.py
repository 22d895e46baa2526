"""The command-line reference: each console script's options, read off its parser.

Every console script ``setup.cfg`` installs must have its parser builder here; one without
fails the build (:func:`console_scripts` against :data:`PARSERS`), so a new tool cannot ship
undocumented. The builders are imported, never run as programs.
"""

from __future__ import annotations

import argparse
import configparser
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _poprun_emu() -> argparse.ArgumentParser:
    from launch._cli import help_parser

    return help_parser()


def _poprun_emu_scaling() -> argparse.ArgumentParser:
    from popdist_emu.scaling._cli import _parser

    return _parser()


# Entry point (``module:function`` in setup.cfg) -> the builder of its parser.
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "launch._cli:main": _poprun_emu,
    "popdist_emu.scaling:main": _poprun_emu_scaling,
}


class UndocumentedScriptError(LookupError):
    """A console script whose parser the site does not know."""


def console_scripts(setup_cfg: Path = ROOT / "setup.cfg") -> dict[str, str]:
    """``setup.cfg``'s console scripts: name -> entry point."""
    config = configparser.ConfigParser()
    config.read(setup_cfg)
    lines = config.get("options.entry_points", "console_scripts", fallback="").splitlines()
    scripts = {}
    for line in lines:
        if "=" in line:
            name, target = (part.strip() for part in line.split("=", 1))
            scripts[name] = target
    return scripts


def parser_for(script: str, setup_cfg: Path = ROOT / "setup.cfg") -> argparse.ArgumentParser:
    """The parser of console script ``script`` of ``setup_cfg``.

    Raises:
        UndocumentedScriptError: ``script`` is not in setup.cfg, or its entry point has no
            builder in :data:`PARSERS`.
    """
    target = console_scripts(setup_cfg).get(script)
    if target is None:
        raise UndocumentedScriptError(f"{script!r} is not a console script of setup.cfg")
    if target not in PARSERS:
        raise UndocumentedScriptError(
            f"console script {script!r} ({target}) has no parser builder in docs_build/cli.py"
        )
    return PARSERS[target]()


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    metavar = action.metavar or action.dest.upper()
    text = metavar if isinstance(metavar, str) else " ".join(metavar)
    # A "|" inside a code span would keep its escaping backslash: one span per alternative.
    return " \\| ".join(f"`{part}`" for part in text.split("|"))


def options_table(parser: argparse.ArgumentParser) -> str:
    """A Markdown table of ``parser``'s options: spellings, value, what it does, and the
    default where the parser holds any (``poprun-emu`` states its defaults in the help)."""
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            # Kept on one line by the site's stylesheet (docs/stylesheets/extra.css).
            names = ", ".join(f'<code class="flag">{flag}</code>' for flag in action.option_strings)
        else:
            names = f"`{action.dest}` (positional)"
        default = action.default
        shown = (
            f"`{default}`"
            if default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0
            else ""
        )
        rows.append([names, _value(action), _escape(action.help or ""), shown])
    columns = ["option", "value", "description", "default"]
    if not any(row[3] for row in rows):
        columns, rows = columns[:3], [row[:3] for row in rows]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def reference(script: str) -> str:
    """One console script's reference: its usage line and its options table."""
    parser = parser_for(script)
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    return f"```\n{usage}\n```\n\n{options_table(parser)}\n"


def all_references() -> str:
    """A section per console script of setup.cfg, in its order."""
    return "\n".join(f"## `{name}`\n\n{reference(name)}" for name in console_scripts())
