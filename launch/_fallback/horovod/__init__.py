"""``horovod`` where Horovod is not installed: its ``horovod.torch`` over the job's instances.

Graphcore's PopTorch applications ``import horovod.torch as hvd`` for host-side collectives
between the instances PopRun starts; ``horovod.torch`` here is
``popdist_emu.popdist._horovod`` (PopDist's instances as Horovod's ranks, GCL's collectives
over the instances' transport). Found by the meta-path finder asked last
(``launch/_popdist_finder``), so an installed Horovod always wins.

References:
    Horovod documentation, "horovod.torch" API.
"""
