"""Every row of benchmarks/validate.py is a command line its example accepts.

The rows run only under ``validate.py`` (minutes each); a flag an example renames or starts
refusing would break them silently until then. Parsing is instant, so each row's words go
through its example's own parser here, and a BERT row's ``--att-ffn-placement`` through the
placement check with its launch's IPUs per replica.
"""

import sys
from pathlib import Path

import pytest
from example_modules import load_example

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def _rows():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import validate
    finally:
        sys.path.remove(str(BENCHMARKS))
    groups = (
        validate.BERT_CALIBRATION_ROWS,
        validate.BERT_ROWS,
        validate.BERT_TF2_ROWS,
        validate.BERT_POPART_ROWS,
        validate.BERT_POPTORCH_ROWS,
        validate.BERT_TF1_ROWS,
        validate.VIT_ROWS,
        validate.RESNEXT_ROWS,
        validate.EFFICIENTNET_ROWS,
    )
    return [row for group in groups for row in group]


ROWS = _rows()


@pytest.mark.parametrize("row", ROWS, ids=[row.key for row in ROWS])
def test_row_is_a_command_line_its_example_accepts(row):
    example = load_example(row.example.removesuffix(".py"))
    args = example.parse_args(row.words.split())
    launch = row.launch.split()
    ipus = int(launch[launch.index("--ipus-per-replica") + 1])
    assert row.value("--micro-batch-size") == args.micro_batch_size
    if getattr(args, "att_ffn_placement", None):
        layers = example.CONFIGS[args.model][0]
        placement = example.att_ffn_placement(args.att_ffn_placement, layers, ipus)
        assert max(ipu for ipu, _, _ in placement) < ipus
