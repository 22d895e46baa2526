"""``--print-topology``: the table of hosts, instances, replicas and IPUs of a job."""

from __future__ import annotations

from hardware import ReplicaLayout


def _span(first: int, count: int) -> str:
    return str(first) if count == 1 else f"{first}-{first + count - 1}"


def format_topology(layout: ReplicaLayout, *, simulated: bool = True) -> str:
    """A table with one row per instance: its (simulated) host, local index, replicas, IPUs.

    Replicas and IPUs are global indices: replica ``r`` uses IPUs
    ``r * ipus_per_replica`` to ``(r + 1) * ipus_per_replica - 1``, as PopRun numbers them.

    Returns:
        The table as text, ending with a newline.
    """
    ipr = layout.ipus_per_replica
    header = ("host", "instance", "local index", "replicas", "IPUs")
    rows: list[tuple[str, ...]] = [header]
    for instance in range(layout.num_instances):
        replicas = layout.replicas_of_instance(instance)
        rows.append(
            (
                layout.host_of_instance(instance),
                str(instance),
                str(layout.local_instance_index(instance)),
                _span(replicas.start, len(replicas)),
                _span(replicas.start * ipr, len(replicas) * ipr),
            )
        )
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    hosts = len(layout.hosts)
    lines = [
        f"{layout.num_replicas} replicas x {ipr} IPUs per replica = {layout.num_ipus} IPUs, "
        f"{layout.num_instances} instances on {hosts} host{'s' if hosts > 1 else ''} "
        + (
            "(host names are simulated: every instance runs on this machine)"
            if simulated
            else "(real hosts, reached through MPI)"
        )
    ]
    rule = "+".join("-" * (w + 2) for w in widths)
    for n, row in enumerate(rows):
        lines.append(
            "|".join(f" {cell:<{w}} " for cell, w in zip(row, widths, strict=True)).rstrip()
        )
        if n == 0:
            lines.append(rule)
    return "\n".join(lines) + "\n"
