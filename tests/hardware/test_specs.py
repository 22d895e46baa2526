"""System specs and system selection."""

import pytest
from deadlines import within

import hardware


def test_systems_cover_pod16_to_1024_pod64s_for_mk2_and_bow():
    for name in ("pod16", "pod64", "pod128", "pod256", "pod65536", "bow-pod16", "bow-pod256"):
        assert hardware.get_system(name).name == name
    assert hardware.get_system("pod65536").num_ipus == 65536
    assert hardware.get_system("pod65536").num_link_domains == 1024
    assert hardware.get_system("pod16").num_link_domains == 1
    assert hardware.get_system("bow-pod64").ipu is hardware.BOW_IPU
    assert hardware.get_system("pod64").machine is hardware.IPU_M2000


def test_specs_match_the_datasheets():
    # POD64 datasheet: 15.978 PF FP16 over 64 IPUs; Bow-2000: 1.4 PF over 4 IPUs.
    assert hardware.GC200.peak_fp16_flops * 64 == pytest.approx(15.978e15, rel=2e-3)
    assert hardware.BOW_IPU.peak_fp16_flops * 4 == pytest.approx(1.4e15)
    assert hardware.GC200.tiles * hardware.GC200.sram_per_tile == pytest.approx(897 * 2**20, 1e-3)


def test_unconfirmed_figures_say_so():
    assert "UNCONFIRMED" in hardware.GC200.sources["sram_per_tile"]
    assert "UNCONFIRMED" in hardware.IPU_M2000.sources["gw_link_bandwidth"]
    for spec in (hardware.GC200, hardware.BOW_IPU):
        assert set(spec.sources) >= {"tiles", "clock_hz", "peak_fp16_flops", "ipu_link_bandwidth"}


@pytest.mark.parametrize(
    ("num_ipus", "expected"),
    [
        (1, "pod16"),
        (16, "pod16"),
        (17, "pod64"),
        (64, "pod64"),
        (65, "pod128"),
        (65536, "pod65536"),
    ],
)
def test_default_system_is_the_smallest_mk2_pod_that_holds_the_job(num_ipus, expected):
    assert hardware.default_system(num_ipus).name == expected
    assert hardware.select_system("", num_ipus).name == expected


def test_a_job_larger_than_its_system_is_refused_with_both_numbers_and_the_fix():
    with pytest.raises(
        hardware.SystemSelectionError, match=r"needs 32 IPUs.*pod16 has only 16.*pod64"
    ):
        hardware.select_system("pod16", 32)
    with pytest.raises(hardware.SystemSelectionError, match=r"bow-pod64 has only 64.*bow-pod128"):
        hardware.select_system("bow-pod64", 128)
    with pytest.raises(hardware.SystemSelectionError, match="largest IPU-POD has 65536 IPUs"):
        hardware.default_system(2 * 65536)


def test_unknown_system_names_list_the_valid_ones():
    with pytest.raises(
        hardware.SystemSelectionError, match="not a known IPU-POD: use one of pod16"
    ):
        hardware.get_system("pod32")
    assert hardware.get_system("IPU-POD64").name == "pod64"


def test_system_selection_imports_no_jax():
    import subprocess
    import sys

    code = "import sys, hardware; hardware.select_system('pod64', 64); print('jax' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=within(120)
    )
    assert out.stdout.strip() == "False", out.stderr
