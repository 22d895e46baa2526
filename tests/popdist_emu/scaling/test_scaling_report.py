"""The scaling report's honest numbers: calibration rows labelled as such, with their
leave-one-out errors; held-out rows apart; poor fits and extrapolations said in words."""

import hardware
from popdist_emu.scaling._report import _published_rows, narrative


def _row(replicas, throughput, extrapolations=()):
    low, high = hardware.load_calibration().band(throughput)
    return {
        "status": "ok",
        "replicas": replicas,
        "samples_per_second": throughput,
        "samples_per_second_low": low,
        "samples_per_second_high": high,
        "extrapolations": list(extrapolations),
        "speedup": 1.0,
        "efficiency": 1.0,
        "global_batch": 100,
    }


def test_calibration_rows_are_labelled_with_their_leave_one_out_error():
    series = [{"label": "rn50", "rows": [_row(16, 29223.0), _row(512, 500000.0)]}]
    published = [
        {"replicas": 16, "throughput": 29500.0, "label": "MLPerf v1.1 POD16"},  # a fitted row
        {"replicas": 512, "throughput": 520000.0, "label": "someone's POD512"},
    ]
    fitted, held_out = _published_rows(series, published)
    assert [r[0] for r in fitted] == ["MLPerf v1.1 POD16"]
    (row,) = [r for r in hardware.load_calibration().rows if r.replicas == 16]
    assert fitted[0][-1] == f"{100 * row.leave_one_out_error:+.1f} %"  # calibration.json's
    assert fitted[0][-2] == f"{100 * (29223.0 / 29500.0 - 1):+.1f} %"  # its (fitted) error
    assert [r[0] for r in held_out] == ["someone's POD512"]
    assert held_out[0][-1] == f"{100 * (500000 / 520000 - 1):+.1f} %"


def test_points_leaning_on_the_bert_fit_are_checked_against_its_rows_whatever_the_name():
    # A matmul-dominated or multi-IPU program's points carry band_family "BERT" (from their
    # summary's uncertainty); the published BERT row is then a calibration row of that fit.
    series = [{"label": "TinyLM", "rows": [{**_row(4, 1400.0), "band_family": "BERT"}]}]
    published = [{"replicas": 4, "throughput": 1419.0, "label": "MLPerf v1.0 POD16"}]
    bert = hardware.load_calibration(family="BERT")
    (row,) = [r for r in bert.rows if r.published == 1419.0]
    fitted, held_out = _published_rows(series, published)
    assert held_out == [] and fitted[0][-1] == f"{100 * row.leave_one_out_error:+.1f} %"


def test_the_narrative_names_the_extrapolated_points():
    why = "collectives across more Pods follow the fitted GW-Link latency"
    rows = [
        _row(256, 3e5),
        _row(1024, 8e5, [f"1,024 IPUs: beyond the largest calibration row (256 IPUs); {why}"]),
        _row(4096, 1.2e6, [f"4,096 IPUs: beyond the largest calibration row (256 IPUs); {why}"]),
    ]
    series = {"label": "rn50", "rows": rows, "analysis": {
        "law": "amdahl", "fit": None, "efficiency_below": {}, "fastest_growing_phase": None,
    }}  # fmt: skip
    lines = narrative(series)
    extrapolated = [line for line in lines if line.startswith("EXTRAPOLATED")]
    assert extrapolated == [
        "EXTRAPOLATED at 1,024, 4,096 replicas: beyond the largest calibration row "
        f"(256 IPUs); {why}"
    ]
