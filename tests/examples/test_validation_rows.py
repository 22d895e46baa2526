"""Every published row an example runs is a command line its example accepts; --rows picks
rows.

The rows run only under ``benchmarks/row_features.py`` (minutes each); a flag an example
renames or starts refusing would break them silently until then. Parsing is instant, so each
row's words go through its example's own parser here, and a BERT row's
``--att-ffn-placement`` through the placement check with its launch's IPUs per replica.
"""

import pytest
from pipelined_training import BERT_CONFIGS
from repo_scripts import load_benchmark, load_example

calibration_set = load_benchmark("calibration_set")
row_features = load_benchmark("row_features")
ROWS = calibration_set.EXAMPLE_ROWS


@pytest.mark.parametrize("row", ROWS, ids=[row.key for row in ROWS])
def test_row_is_a_command_line_its_example_accepts(row):
    example = load_example(row.example.removesuffix(".py"))
    args = example.parse_args(row.words.split())
    launch = row.launch.split()
    ipus = int(launch[launch.index("--ipus-per-replica") + 1])
    assert row.value("--micro-batch-size") == args.micro_batch_size
    if getattr(args, "att_ffn_placement", None):
        layers = BERT_CONFIGS[args.model][0]  # bert.py's flag
        placement = example.att_ffn_placement(args.att_ffn_placement, layers, ipus)
        assert max(ipu for ipu, _, _ in placement) < ipus


def test_every_row_has_one_key_and_rows_refuses_an_unknown_one(capsys):
    rows = calibration_set.all_rows()
    resnet = len(calibration_set.ROWS)  # ResNet-50's rows, then the examples'
    assert list(rows)[resnet:] == [row.key for row in ROWS]
    assert [rows[key].key for key in ("A9", "C8")] == ["A9", "C8"]
    assert len(rows) == len(calibration_set.ROWS) + len(ROWS)  # no key names two rows
    with pytest.raises(SystemExit) as exit_:
        row_features.main(["--rows", "A9", "A99"])
    assert exit_.value.code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "A99" in x]
    assert "'A99' names no row; the rows are A1, A2" in line
