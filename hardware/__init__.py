"""IPU-POD hardware model: replica layout, specs, cost and memory models, simulated time.

Pure Python and NumPy: depends on nothing else of this project, and imports no JAX.
"""

from hardware._collectives import CollectiveTime as CollectiveTime
from hardware._collectives import collective_time as collective_time
from hardware._collectives import group_span as group_span
from hardware._collectives import link_bandwidths as link_bandwidths
from hardware._collectives import ring_seconds as ring_seconds
from hardware._compute import compute_seconds as compute_seconds
from hardware._compute import matmul_flops as matmul_flops
from hardware._host_band import band_factors as band_factors
from hardware._host_band import combined as combined_uncertainty
from hardware._host_band import host_half_width as host_half_width
from hardware._host_band import host_share as host_share
from hardware._host_band import relative_spread as relative_spread
from hardware._host_compute import host_compute_seconds as host_compute_seconds
from hardware._host_compute import host_servers as host_servers
from hardware._host_io import host_io_seconds as host_io_seconds
from hardware._layout import VALID_IPUS_PER_REPLICA as VALID_IPUS_PER_REPLICA
from hardware._layout import LayoutError as LayoutError
from hardware._layout import ReplicaLayout as ReplicaLayout
from hardware._memory import CATEGORIES as MEMORY_CATEGORIES
from hardware._memory import MemoryBreakdown as MemoryBreakdown
from hardware._memory import OutOfMemoryError as OutOfMemoryError
from hardware._memory import check_memory as check_memory
from hardware._memory import memory_per_ipu as memory_per_ipu
from hardware._memory import replica_memory as replica_memory
from hardware._parameters import CALIBRATION_FILE as CALIBRATION_FILE
from hardware._parameters import DEFAULT_PREFETCH_DEPTH as DEFAULT_PREFETCH_DEPTH
from hardware._parameters import FITTED_PARAMETERS as FITTED_PARAMETERS
from hardware._parameters import SHARED_FAMILY as SHARED_FAMILY
from hardware._parameters import ModelParameters as ModelParameters
from hardware._parameters import UnknownFamilyError as UnknownFamilyError
from hardware._parameters import check_family as check_family
from hardware._parameters import family_names as family_names
from hardware._parameters import load_parameters as load_parameters
from hardware._pipeline import SCHEDULES as PIPELINE_SCHEDULES
from hardware._pipeline import STRATEGIES as PIPELINE_STRATEGIES
from hardware._pipeline import PipelineEvent as PipelineEvent
from hardware._pipeline import PipelineSchedule as PipelineSchedule
from hardware._pipeline import StageCost as StageCost
from hardware._pipeline import check_strategy as check_strategy
from hardware._pipeline import min_gradient_accumulation as min_gradient_accumulation
from hardware._pipeline import pipeline_slots as pipeline_slots
from hardware._pipeline import program_order as program_order
from hardware._pipeline import ramp_bubble_fraction as ramp_bubble_fraction
from hardware._pipeline import schedule_pipeline as schedule_pipeline
from hardware._pipeline import stash_depth as stash_depth
from hardware._planner import (
    DEFAULT_AVAILABLE_MEMORY_PROPORTION as DEFAULT_AVAILABLE_MEMORY_PROPORTION,
)
from hardware._planner import PARTIALS_TYPES as PARTIALS_TYPES
from hardware._planner import PLANNER_WARNING as PLANNER_WARNING
from hardware._planner import ConvOp as ConvOp
from hardware._planner import check_proportion as check_proportion
from hardware._planner import plan_op as plan_op
from hardware._planner import proportion_for_ipu as proportion_for_ipu
from hardware._planner_step import PlannerReport as PlannerReport
from hardware._planner_step import plan_profile as plan_profile
from hardware._planner_step import plan_step as plan_step
from hardware._replica import ReplicaModel as ReplicaModel
from hardware._replica import as_replica as as_replica
from hardware._replica import micro_step_stage as micro_step_stage
from hardware._replica import stage_costs as stage_costs
from hardware._specs import BOW_2000 as BOW_2000
from hardware._specs import BOW_IPU as BOW_IPU
from hardware._specs import GC200 as GC200
from hardware._specs import IPU_M2000 as IPU_M2000
from hardware._specs import SYSTEMS as SYSTEMS
from hardware._specs import IpuSpec as IpuSpec
from hardware._specs import MachineSpec as MachineSpec
from hardware._specs import SystemSelectionError as SystemSelectionError
from hardware._specs import SystemSpec as SystemSpec
from hardware._specs import default_system as default_system
from hardware._specs import get_system as get_system
from hardware._specs import select_system as select_system
from hardware._stage import PassCounts as PassCounts
from hardware._stage import StageProfile as StageProfile
from hardware._step import ReplicaReport as ReplicaReport
from hardware._step import simulate_step as simulate_step
from hardware._step_profile import METHODS as COLLECTIVE_METHODS
from hardware._step_profile import CollectiveRecord as CollectiveRecord
from hardware._step_profile import RunSettings as RunSettings
from hardware._step_profile import StepProfile as StepProfile
from hardware._step_profile import resolve_group as resolve_group
from hardware._step_simulation import PHASES as PHASES
from hardware._step_simulation import TRACKS as TRACKS
from hardware._step_simulation import StepSimulation as StepSimulation
from hardware._step_simulation import TimelineEvent as TimelineEvent
from hardware._step_simulation import ipu_track as ipu_track
from hardware._terms import leaned_on as leaned_on
from hardware._terms import matmul_share as matmul_share
from hardware._terms import phase_terms as phase_terms
from hardware._timeline import multi_ipu_sync_calls as multi_ipu_sync_calls
from hardware._uncertainty import Calibration as Calibration
from hardware._uncertainty import calibration_for as calibration_for
from hardware._uncertainty import fixed_cost_share as fixed_cost_share
from hardware._uncertainty import load_calibration as load_calibration
from hardware._uncertainty import step_band as band_step_seconds

__all__ = [
    "BOW_2000",
    "BOW_IPU",
    "CALIBRATION_FILE",
    "COLLECTIVE_METHODS",
    "DEFAULT_PREFETCH_DEPTH",
    "FITTED_PARAMETERS",
    "GC200",
    "IPU_M2000",
    "MEMORY_CATEGORIES",
    "PARTIALS_TYPES",
    "PHASES",
    "PIPELINE_SCHEDULES",
    "PIPELINE_STRATEGIES",
    "PLANNER_WARNING",
    "SHARED_FAMILY",
    "SYSTEMS",
    "TRACKS",
    "VALID_IPUS_PER_REPLICA",
    "Calibration",
    "CollectiveRecord",
    "CollectiveTime",
    "ConvOp",
    "IpuSpec",
    "LayoutError",
    "MachineSpec",
    "MemoryBreakdown",
    "ModelParameters",
    "OutOfMemoryError",
    "PassCounts",
    "PipelineEvent",
    "PipelineSchedule",
    "PlannerReport",
    "ReplicaLayout",
    "ReplicaModel",
    "ReplicaReport",
    "RunSettings",
    "StageCost",
    "StageProfile",
    "StepProfile",
    "StepSimulation",
    "SystemSelectionError",
    "SystemSpec",
    "TimelineEvent",
    "UnknownFamilyError",
    "as_replica",
    "band_factors",
    "band_step_seconds",
    "calibration_for",
    "check_family",
    "check_memory",
    "check_proportion",
    "check_strategy",
    "collective_time",
    "combined_uncertainty",
    "compute_seconds",
    "default_system",
    "family_names",
    "fixed_cost_share",
    "get_system",
    "group_span",
    "host_compute_seconds",
    "host_half_width",
    "host_io_seconds",
    "host_servers",
    "host_share",
    "ipu_track",
    "leaned_on",
    "link_bandwidths",
    "load_calibration",
    "load_parameters",
    "matmul_flops",
    "matmul_share",
    "memory_per_ipu",
    "micro_step_stage",
    "min_gradient_accumulation",
    "multi_ipu_sync_calls",
    "phase_terms",
    "pipeline_slots",
    "plan_op",
    "plan_profile",
    "plan_step",
    "program_order",
    "proportion_for_ipu",
    "ramp_bubble_fraction",
    "relative_spread",
    "replica_memory",
    "resolve_group",
    "ring_seconds",
    "schedule_pipeline",
    "select_system",
    "simulate_step",
    "stage_costs",
    "stash_depth",
]
