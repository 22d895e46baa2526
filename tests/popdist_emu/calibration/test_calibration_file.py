"""``calibration.json`` rewritten one part at a time: the other part is kept, and a family's
trial parameters are there while a block runs and gone after it, whatever happens."""

import json
import re

import pytest

import hardware
from popdist_emu import calibration

SHARED = {"parameters": {"compute_efficiency": 0.3}, "rows": [{"system": "pod16"}]}
FAMILY = {"parameters": {"matmul_efficiency": 0.4, "multi_ipu_sync_seconds": 0.1}, "rows": []}


@pytest.fixture
def path(tmp_path):
    file = tmp_path / "calibration.json"
    file.write_text(json.dumps({**SHARED, "families": {"BERT": FAMILY}}, indent=2) + "\n")
    return file


def test_the_shared_record_keeps_the_families(path):
    calibration.write_shared_record({"parameters": {"compute_efficiency": 0.5}}, path)
    stored = json.loads(path.read_text())
    assert stored == {"parameters": {"compute_efficiency": 0.5}, "families": {"BERT": FAMILY}}


def test_a_new_file_gets_the_shared_record_alone(tmp_path):
    path = tmp_path / "calibration.json"
    calibration.write_shared_record(SHARED, path)
    assert json.loads(path.read_text()) == SHARED


def test_a_family_record_keeps_the_shared_part_and_the_other_families(path):
    calibration.write_family_record("ViT", {"parameters": {"compute_efficiency": 0.5}}, path)
    stored = json.loads(path.read_text())
    assert stored["parameters"] == SHARED["parameters"] and stored["rows"] == SHARED["rows"]
    assert stored["families"]["BERT"] == FAMILY
    assert stored["families"]["ViT"] == {"parameters": {"compute_efficiency": 0.5}}


def test_trial_parameters_are_read_in_the_block_and_the_text_is_restored(path):
    original = path.read_text()
    trial = {"matmul_efficiency": 0.45, "multi_ipu_sync_seconds": 0.2}
    with calibration.trial_family_parameters("BERT", trial, path):
        assert hardware.load_parameters(path).matmul_efficiency == 0.45
    assert path.read_text() == original
    with calibration.trial_family_parameters("BERT", None, path):  # the prior
        assert hardware.load_parameters(path).matmul_efficiency == 0.2
    assert path.read_text() == original


def test_trial_parameters_are_gone_after_a_block_that_fails(path):
    original = path.read_text()
    with (
        pytest.raises(RuntimeError, match="a run failed"),
        calibration.trial_family_parameters("BERT", {"compute_efficiency": 0.9}, path),
    ):
        raise RuntimeError("a run failed")
    assert path.read_text() == original


def test_a_write_that_fails_names_the_file_and_leaves_nothing(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    path = blocker / "calibration.json"
    refusal = rf"could not write {re.escape(str(path))} \(.+\); it is unchanged"
    with pytest.raises(OSError, match=refusal):
        calibration.write_shared_record(SHARED, path)
    assert blocker.read_text() == "x" and list(tmp_path.iterdir()) == [blocker]


def test_the_shared_record_keeps_the_cross_validation(path):
    """validate.py --write stores the bands the reports read; a refit of the shared terms
    (calibrate.py --write) once dropped them."""
    calibration.write_cross_validation({"bands": {"seen": [0.9, 1.1]}}, path)
    calibration.write_shared_record({"parameters": {"compute_efficiency": 0.5}}, path)
    stored = json.loads(path.read_text())
    assert stored["cross_validation"] == {"bands": {"seen": [0.9, 1.1]}}
    assert stored["families"] == {"BERT": FAMILY}
