"""``poprun-emu --version``: the installed distribution's version."""

# Used when the source tree runs without being installed (no distribution metadata).
FALLBACK_VERSION = "0.1.0"


def launcher_version() -> str:
    """The installed ``popdist-emu`` version, or FALLBACK_VERSION when not installed."""
    from importlib import metadata  # only --version pays for it

    try:
        return metadata.version("popdist-emu")
    except metadata.PackageNotFoundError:
        return FALLBACK_VERSION
