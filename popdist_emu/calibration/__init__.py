"""Fits of the hardware model's free parameters to published throughput, and the shipped
``hardware/calibration.json`` they write.

The shared fit (``benchmarks/calibrate.py``) sets the five parameters of
``hardware.ModelParameters`` from MLPerf ResNet-50 rows; a family's fit
(``benchmarks/calibrate_bert.py``) sets a model family's own compute efficiency and host
synchronisation in closed form from terms each row's runs give. The commands supply what only
the examples can (a step profile, offline runs); the fits, their records and the file's
writes are here, so a test can fit again and compare with what ships. Uses ``hardware``,
``contract`` and SciPy, not the runtime.
"""

from popdist_emu.calibration._bands import BAND as BAND
from popdist_emu.calibration._bands import Band as Band
from popdist_emu.calibration._bands import BandRow as BandRow
from popdist_emu.calibration._bands import ScaleRow as ScaleRow
from popdist_emu.calibration._bands import band as band
from popdist_emu.calibration._bands import bands as bands
from popdist_emu.calibration._bands import coverage as coverage
from popdist_emu.calibration._bands import scale_out as scale_out
from popdist_emu.calibration._cv import CalibrationSet as CalibrationSet
from popdist_emu.calibration._cv import CrossValidated as CrossValidated
from popdist_emu.calibration._cv import TableRow as TableRow
from popdist_emu.calibration._cv import TermFit as TermFit
from popdist_emu.calibration._cv import cross_validate as cross_validate
from popdist_emu.calibration._cv import family_of as family_of
from popdist_emu.calibration._cv import fit as fit_table
from popdist_emu.calibration._cv import predict as predict_table
from popdist_emu.calibration._family import FAMILY_PARAMETERS as FAMILY_PARAMETERS
from popdist_emu.calibration._family import FamilyCalibration as FamilyCalibration
from popdist_emu.calibration._family import FamilyRow as FamilyRow
from popdist_emu.calibration._family import StepTerms as StepTerms
from popdist_emu.calibration._family import calibrate_family as calibrate_family
from popdist_emu.calibration._family import family_record as family_record
from popdist_emu.calibration._family import fit_family as fit_family
from popdist_emu.calibration._family import predict_family as predict_family
from popdist_emu.calibration._family import solve_step_terms as solve_step_terms
from popdist_emu.calibration._family import trial_efficiencies as trial_efficiencies
from popdist_emu.calibration._features import TERMS as TERMS
from popdist_emu.calibration._features import RowFeatures as RowFeatures
from popdist_emu.calibration._features import features_from_probes as features_from_probes
from popdist_emu.calibration._features import probe_points as probe_points
from popdist_emu.calibration._file import trial_family_parameters as trial_family_parameters
from popdist_emu.calibration._file import write_cross_validation as write_cross_validation
from popdist_emu.calibration._file import write_family_record as write_family_record
from popdist_emu.calibration._file import write_shared_record as write_shared_record
from popdist_emu.calibration._probe import refit_program as refit_program
from popdist_emu.calibration._probe import refitted_file as refitted_file
from popdist_emu.calibration._shared import RESNET50_DATA as RESNET50_DATA
from popdist_emu.calibration._shared import RESNET50_MICRO_BATCH as RESNET50_MICRO_BATCH
from popdist_emu.calibration._shared import RESNET50_ROWS as RESNET50_ROWS
from popdist_emu.calibration._shared import SHARED_PARAMETERS as SHARED_PARAMETERS
from popdist_emu.calibration._shared import PublishedRow as PublishedRow
from popdist_emu.calibration._shared import SharedCalibration as SharedCalibration
from popdist_emu.calibration._shared import calibrate_shared as calibrate_shared
from popdist_emu.calibration._shared import fit_shared as fit_shared
from popdist_emu.calibration._shared import predict_row as predict_row
from popdist_emu.calibration._shared import shared_record as shared_record
from popdist_emu.calibration._shared import simulate_row as simulate_row
from popdist_emu.calibration._user import Measurement as Measurement
from popdist_emu.calibration._user import MeasurementError as MeasurementError
from popdist_emu.calibration._user import UserFit as UserFit
from popdist_emu.calibration._user import read_measurements as read_measurements
from popdist_emu.calibration._user import refit as refit_measurements

__all__ = [
    "BAND",
    "FAMILY_PARAMETERS",
    "RESNET50_DATA",
    "RESNET50_MICRO_BATCH",
    "RESNET50_ROWS",
    "SHARED_PARAMETERS",
    "TERMS",
    "Band",
    "BandRow",
    "CalibrationSet",
    "CrossValidated",
    "FamilyCalibration",
    "FamilyRow",
    "Measurement",
    "MeasurementError",
    "PublishedRow",
    "RowFeatures",
    "ScaleRow",
    "SharedCalibration",
    "StepTerms",
    "TableRow",
    "TermFit",
    "UserFit",
    "band",
    "bands",
    "calibrate_family",
    "calibrate_shared",
    "coverage",
    "cross_validate",
    "family_of",
    "family_record",
    "features_from_probes",
    "fit_family",
    "fit_shared",
    "fit_table",
    "predict_family",
    "predict_row",
    "predict_table",
    "probe_points",
    "read_measurements",
    "refit_measurements",
    "refit_program",
    "refitted_file",
    "scale_out",
    "shared_record",
    "simulate_row",
    "solve_step_terms",
    "trial_efficiencies",
    "trial_family_parameters",
    "write_cross_validation",
    "write_family_record",
    "write_shared_record",
]
