"""PopDist API and the replicated training runtime of the emulator."""

__all__: list[str] = []
