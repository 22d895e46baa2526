"""``popdist.poptorch`` inside instances: PopDist's PopTorch helpers, as far as they map.

Real host code writes ``opts = popdist.poptorch.Options()`` to get PopTorch options whose
replication factor is this instance's local replica count. The emulator's ``Options`` carries
the same default (``replication_factor = getNumLocalReplicas()``), so it stands in here; it is
loaded on first use because it pulls in the runtime.
"""


def __getattr__(name: str):
    if name != "Options":
        raise AttributeError(
            f"popdist.poptorch has no {name!r} in the emulator: only Options is provided; "
            f"use popdist_emu's runtime names instead."
        )
    import popdist_emu

    return popdist_emu.Options
