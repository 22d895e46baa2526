"""benchmarks/bert_pretraining_records.py: the records Graphcore's BERT reads on two
instances (its generated data set cannot feed them)."""

import importlib.util
import subprocess
import sys

import pytest
from deadlines import within
from repo_scripts import BENCHMARKS, load_benchmark

records = load_benchmark("bert_pretraining_records")
nlp = load_benchmark("graphcore_nlp")

# pretraining_data.py's TFRECORD_KEYS, in its order.
KEYS = (
    "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
    "next_sentence_labels",
)  # fmt: skip


def test_a_record_has_every_key_bert_reads_with_its_length_and_range():
    made = records.records(3, sequence_length=16, mask_tokens=4, vocab_size=50, seed=0)
    assert len(made) == 3
    for record in made:
        assert tuple(record) == KEYS
        assert all(kind == "int" for _, kind in record.values())
        ids, positions = record["input_ids"][0], record["masked_lm_positions"][0]
        assert len(ids) == 16 and all(0 <= t < 50 for t in ids)
        assert len(positions) == 4 == len(set(positions)) and positions == sorted(positions)
        assert all(0 <= p < 16 for p in positions)
        assert record["next_sentence_labels"][0] in ([0], [1])
    # Seeded: the same records each time, other records for another seed (another file).
    assert made == records.records(3, 16, 4, 50, seed=0)
    assert made != records.records(3, 16, 4, 50, seed=1)


def test_bert_runs_on_the_records_the_script_writes_into_its_config_s_input_files():
    app = nlp.APPLICATIONS["bert"]
    script, folder = app.data
    assert (BENCHMARKS / script).is_file() and folder == "data"  # demo_tiny_128: data/*.tfrecord
    for layout in nlp.layouts("bert", "functional"):
        args = list(layout.args)
        assert args[args.index("--dataset") + 1] == "pretraining"


def test_without_tfrecord_the_script_says_which_interpreter_to_use(tmp_path):
    pytest.importorskip("numpy")
    if importlib.util.find_spec("tfrecord") is not None:
        pytest.skip("tfrecord is installed here: the script would write the records")
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bert_pretraining_records.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=within(60),
    )
    assert proc.returncode == 2
    assert "run with the BERT application's interpreter" in proc.stderr.splitlines()[-1]
    assert not list(tmp_path.iterdir())  # refused before writing anything
