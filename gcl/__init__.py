"""GCL collectives over the global ring of simulated replicas (local hops are copies,
remote hops are MPI messages)."""

__all__: list[str] = []
