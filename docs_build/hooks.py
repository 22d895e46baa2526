"""The MkDocs hook (``hooks:`` in mkdocs.yml) that fills each page's generated tables.

A page asks for a table with an HTML comment on a line of its own, invisible where the
Markdown is read as it is (on GitHub):

- ``<!-- generated: cli -->``: every console script's usage and options (``cli``);
- ``<!-- generated: poptorch-options -->``: the PopTorch option methods (``names``);
- ``<!-- generated: results NAME -->``: a benchmark's latest figures (``results``);
- ``<!-- generated: calibration FIT -->``: a shipped fit, ``shared`` or a family's
  (``calibration``);
- ``<!-- generated: run NAME -->`` and ``<!-- generated: runs NAME,NAME -->``: what the
  commands a page shows gave when ``benchmarks/documented_runs.py`` ran them (``runs``).

An unknown request, or a console script without a parser builder, fails the build: a
silently empty table would read as "no options".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

# MkDocs loads this file by its path; the repository root makes ``docs_build`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docs_build import calibration, cli, names, results, runs

DIRECTIVE = re.compile(r"^<!-- generated: ([a-z-]+)(?: (\S+))? -->$", re.MULTILINE)


def generate(kind: str, argument: str | None) -> str:
    """The Markdown for one request.

    Raises:
        PluginError: an unknown kind, a missing argument, a console script the site
            cannot document, a fit the calibration file does not hold, or a run
            ``benchmarks/documented_commands.py`` does not define.
    """
    try:
        if kind == "cli" and argument is None:
            return cli.all_references()
        if kind == "poptorch-options" and argument is None:
            return names.options_table()
        if kind == "results" and argument is not None:
            return results.render(argument)
        if kind == "calibration" and argument is not None:
            return calibration.render(argument)
        if kind == "run" and argument is not None:
            return runs.render_run(argument)
        if kind == "runs" and argument is not None:
            return runs.render_runs(argument)
    except (
        cli.UndocumentedScriptError,
        calibration.UnknownFitError,
        runs.UnknownRunError,
    ) as error:
        raise PluginError(str(error)) from None
    raise PluginError(f"unknown request <!-- generated: {kind} {argument or ''} -->")


def expand(markdown: str) -> str:
    """``markdown`` with each request replaced by what it asks for."""
    return DIRECTIVE.sub(lambda match: generate(match.group(1), match.group(2)), markdown)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' event for a page's Markdown, before it is rendered."""
    return expand(markdown)
