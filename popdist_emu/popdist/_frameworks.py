"""PopDist's TensorFlow and PopART helpers: they set, on the object passed in, the fields PopDist
documents, from the layout PopRun (here ``poprun-emu``) exported.

References:
    PopRun/PopDist User Guide, "Python API": ``popdist.tensorflow.set_ipu_config(config,
    ipus_per_replica, configure_device=True)`` and ``popdist.popart.configureSessionOptions(
    opts)``. The TensorFlow fields are those Graphcore's TensorFlow sets for PopDist
    (``config.select_ipus = [popdist.getDeviceId()]``,
    ``config.experimental.multi_replica_distribution.process_count/process_index``;
    graphcore/tensorflow, ``PopDistStrategy.update_ipu_config`` and its popdist tests); the
    PopART fields are PopART's distributed replicated-graph options
    (``enableReplicatedGraphs``, ``replicatedGraphCount``,
    ``enableDistributedReplicatedGraphs``, ``globalReplicaOffset``,
    ``globalReplicationFactor``; PopART User Guide, "Distributed training").
"""

from __future__ import annotations

from typing import Any

from popdist_emu.popdist import api as popdist


def _check_ipus(ipus_per_replica: int, where: str) -> None:
    if not popdist.checkNumIpusPerReplica(ipus_per_replica):
        raise ValueError(
            f"{where}: ipus_per_replica={ipus_per_replica} but PopRun was given "
            f"--ipus-per-replica {popdist.getNumIpusPerReplica()}; pass that value."
        )


def set_ipu_config(config: Any, ipus_per_replica: int, configure_device: bool = True) -> Any:
    """Configures a TensorFlow ``IPUConfig`` for this instance of a PopRun job.

    Sets ``config.experimental.multi_replica_distribution.process_count`` (instances) and
    ``.process_index`` (this instance) and, with ``configure_device``, ``config.select_ipus``
    to the one multi-IPU device that holds this instance's replicas
    (``[popdist.getDeviceId(ipus_per_replica)]``).

    Returns:
        ``config``, updated in place.

    Raises:
        ValueError: ``ipus_per_replica`` differs from PopRun's ``--ipus-per-replica``.
    """
    _check_ipus(ipus_per_replica, "popdist.tensorflow.set_ipu_config")
    if configure_device:
        config.select_ipus = [popdist.getDeviceId(ipus_per_replica)]
    distribution = config.experimental.multi_replica_distribution
    distribution.process_count = popdist.getNumInstances()
    distribution.process_index = popdist.getInstanceIndex()
    return config


def configureSessionOptions(opts: Any) -> Any:  # noqa: N802 - PopDist's name
    """Configures PopART ``SessionOptions`` for this instance's replicas of the job.

    Sets ``enableReplicatedGraphs`` (True), ``replicatedGraphCount`` (local replicas),
    ``enableDistributedReplicatedGraphs`` (True), ``globalReplicaOffset`` (this instance's
    first global replica) and ``globalReplicationFactor`` (replicas of the whole job).

    Returns:
        ``opts``, updated in place.
    """
    opts.enableReplicatedGraphs = True
    opts.replicatedGraphCount = popdist.getNumLocalReplicas()
    opts.enableDistributedReplicatedGraphs = True
    opts.globalReplicaOffset = popdist.getReplicaIndexOffset()
    opts.globalReplicationFactor = popdist.getNumTotalReplicas()
    return opts
