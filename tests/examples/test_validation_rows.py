"""Every row of benchmarks/validate.py is a command line its example accepts; --rows picks rows.

The rows run only under ``validate.py`` (minutes each); a flag an example renames or starts
refusing would break them silently until then. Parsing is instant, so each row's words go
through its example's own parser here, and a BERT row's ``--att-ffn-placement`` through the
placement check with its launch's IPUs per replica.
"""

import pytest
from pipelined_training import BERT_CONFIGS
from repo_scripts import load_benchmark, load_example

validate = load_benchmark("validate")
ROWS = validate.EXAMPLE_ROWS


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


def test_rows_picks_exactly_the_named_rows_and_refuses_an_unknown_key():
    resnet, examples = validate.select_rows(["A9", "C8", "v1.1"], [])
    assert [row.key for row in examples] == ["A9", "C8"]
    assert [row.key for row in resnet] == ["v1.1"] * 4  # the four calibration rows
    everything = validate.select_rows(None, ["vit", "efficientnet"])
    assert everything[0] == validate.ROWS
    assert [row.key for row in everything[1]] == ["C8", "C4", "C5", "C6"]
    with pytest.raises(ValueError, match="'A99' names no row; the rows are A1, A2"):
        validate.select_rows(["A9", "A99"], [])
