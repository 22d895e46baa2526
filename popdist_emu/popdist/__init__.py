"""The PopDist API and its framework helpers (PopTorch, PopART, TensorFlow); JAX-free.

``import popdist`` in a host program loads this package only, so it stays cheap: nothing here
imports JAX at module level.
"""

from popdist_emu.popdist._api import API_NAMES as API_NAMES
from popdist_emu.popdist._api import checkNumIpusPerReplica as checkNumIpusPerReplica
from popdist_emu.popdist._api import execute_on_instances as execute_on_instances
from popdist_emu.popdist._api import getDeviceId as getDeviceId
from popdist_emu.popdist._api import getInstanceIndex as getInstanceIndex
from popdist_emu.popdist._api import getLocalInstanceIndex as getLocalInstanceIndex
from popdist_emu.popdist._api import getNumInstances as getNumInstances
from popdist_emu.popdist._api import getNumIpusPerReplica as getNumIpusPerReplica
from popdist_emu.popdist._api import getNumLocalReplicas as getNumLocalReplicas
from popdist_emu.popdist._api import getNumTotalReplicas as getNumTotalReplicas
from popdist_emu.popdist._api import getReplicaIndexOffset as getReplicaIndexOffset
from popdist_emu.popdist._api import init as init
from popdist_emu.popdist._api import isPopdistEnvSet as isPopdistEnvSet
from popdist_emu.popdist._frameworks import configureSessionOptions as configureSessionOptions
from popdist_emu.popdist._frameworks import set_ipu_config as set_ipu_config
from popdist_emu.popdist._poptorch_options import Options as PopTorchOptions
from popdist_emu.popdist._poptorch_options import TensorLocationSettings as TensorLocationSettings

__all__ = [
    "API_NAMES",
    "PopTorchOptions",
    "TensorLocationSettings",
    "checkNumIpusPerReplica",
    "configureSessionOptions",
    "execute_on_instances",
    "getDeviceId",
    "getInstanceIndex",
    "getLocalInstanceIndex",
    "getNumInstances",
    "getNumIpusPerReplica",
    "getNumLocalReplicas",
    "getNumTotalReplicas",
    "getReplicaIndexOffset",
    "init",
    "isPopdistEnvSet",
    "set_ipu_config",
]
