"""The ``poprun-emu`` launcher: PopRun options to MPI instances. Imports no JAX."""

__all__: list[str] = []
