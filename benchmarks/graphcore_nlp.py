"""Graphcore's NLP applications (BERT pre-training, GPT-2 training) as entries of
``benchmarks/graphcore_programs.py``: how each is run, unchanged, and what its runs show.

Each runs from the user's checkout of graphcore/examples (commit 3cc8f81f), with the
interpreter of a virtual environment that holds the application's requirements (``--python``;
see docs/graphcore-applications.md), through ``python -m launch`` (``poprun-emu``) of that
interpreter, so the instances import them too. Only command-line arguments are chosen:

- ``functional``: a small configuration, once per layout (one instance, then two), on the
  program's own generated data (GPT-2) or on pre-training records written for it (BERT:
  ``bert_pretraining_records.py``, since its generated data set cannot feed two instances);
  the losses it prints, first and last;
- ``offline``: ``--offline-mode`` at the configuration of one of Graphcore's published rows,
  with the program's own ``--compile-only`` (it compiles on its generated datum and exits); the
  simulated throughput beside the published figure (``benchmarks/published_rows.md``).

References:
    graphcore/examples ``nlp/bert/pytorch`` (``configs_pretraining.yml``: ``demo_tiny_128``,
    ``pretrain_base_128``; ``benchmarks.yml``) and ``nlp/gpt2/pytorch`` (``benchmarks.yml``:
    ``pytorch_gpt2_small_train_gen_pod16``; ``run/pretraining_test.sh``).
    Graphcore performance results (graphcore.ai/performance-results): BERT-Base phase 1,
    SL128, PyTorch, Bow Pod16, SDK 3.3, row B15 of ``benchmarks/published_rows.md``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import calibration_set


class Layout(NamedTuple):
    """One run of an application: its name, the launcher's options and the program's."""

    name: str
    poprun: tuple[str, ...]
    args: tuple[str, ...]


class Application(NamedTuple):
    """A Graphcore application: where it is and its runs in each mode."""

    path: str  # inside the checkout
    functional: tuple[Layout, ...]
    offline: Layout
    published: str | None  # the key of the published row its offline run is the configuration of
    loss: str  # a regular expression whose first group is the loss a step prints
    # Functional runs: a script of benchmarks/ that writes the program's input files into
    # the folder named after it (relative to the run's working directory), run with the
    # application's interpreter first; empty for none.
    data: tuple[str, ...] = ()
    # Why the functional layouts' losses are not compared (the runs train on other data or
    # from other weights by the program's design); empty: compare them.
    uncompared: str = ""


# Its pre-training records (demo_tiny_128 reads data/*.tfrecord), not --dataset generated:
# that data set holds one instance's combined batch, which PopTorch's DataLoader splits
# between the processes, so on two instances neither would get a batch
# (benchmarks/bert_pretraining_records.py writes the records).
_BERT_TINY = (
    "--config",
    "demo_tiny_128",
    "--dataset",
    "pretraining",
    "--training-steps",
    "10",
    "--disable-progress-bar",
    "--checkpoint-output-dir",
    "checkpoints",
)
_GPT2_TEST = (
    *("--model", "gpt2-test", "--max-len", "64", "--layers-per-ipu", "0", "4"),
    *("--matmul-proportion", "0.2", "0.2", "--ipus-per-replica", "2", "--epochs", "3"),
    *("--gradient-accumulation", "16", "--device-iterations", "1", "--batch-size", "1"),
    *("--enable-sequence-serialized", "False", "--embedding-serialization-factor", "1"),
    *("--recompute-checkpoint-every-layer", "True", "--enable-half-partials", "True"),
    *("--dataset", "generated", "--learning-rate", "0.001"),
)
_IPR2 = ("--ipus-per-replica", "2")
# benchmarks.yml's pytorch_gpt2_small_train_gen_pod16, word for word, plus --compile-only
# (a flag: arguments.py declares it ``action="store_true"``, so a value after it is refused).
_GPT2_SMALL_POD16 = (
    *("--model", "gpt2", "--ipus-per-replica", "4", "--replication-factor", "4"),
    *("--gradient-accumulation", "2048", "--device-iterations", "8", "--batch-size", "1"),
    *("--layers-per-ipu", "0", "4", "4", "4"),
    *("--matmul-proportion", "0.15", "0.15", "0.15", "0.15", "--max-len", "1024"),
    *("--optimizer", "AdamW", "--learning-rate", "0.00015", "--lr-schedule", "cosine"),
    *("--lr-warmup", "0.01", "--remap-logit", "True", "--enable-sequence-serialized", "True"),
    *("--embedding-serialization-factor", "4", "--recompute-checkpoint-every-layer", "True"),
    *("--enable-half-partials", "True", "--replicated-tensor-sharding", "True"),
    *("--dataset", "generated", "--epochs", "1", "--compile-only"),
)

APPLICATIONS = {
    "bert": Application(
        "nlp/bert/pytorch/run_pretraining.py",
        (
            Layout("1 instance", ("--num-replicas", "1", "--ipus-per-replica", "4"), _BERT_TINY),
            Layout(
                "2 instances",
                ("--num-replicas", "2", "--num-instances", "2", "--ipus-per-replica", "4"),
                _BERT_TINY,
            ),
        ),
        Layout(
            "bow-pod16, pretrain_base_128",
            (
                *("--num-replicas", "4", "--ipus-per-replica", "4"),
                *("--offline-mode", "yes", "--system", "bow-pod16"),
            ),
            ("--config", "pretrain_base_128", "--dataset", "generated", "--compile-only"),
        ),
        "B15",  # Bow Pod16, BERT-Base phase 1 SL128, PyTorch, SDK 3.3
        r"total loss: *([0-9.]+)",
        ("bert_pretraining_records.py", "data"),
        uncompared="the record reader gives each instance and data-loader worker its own "
        "records, so "
        "each layout trains on other batches",
    ),
    "gpt2": Application(
        "nlp/gpt2/pytorch/train_gpt2.py",
        (
            Layout("2 replicas, 1 instance", ("--num-replicas", "2", *_IPR2), _GPT2_TEST),
            Layout(
                "2 replicas, 2 instances",
                ("--num-replicas", "2", "--num-instances", "2", *_IPR2),
                _GPT2_TEST,
            ),
        ),
        Layout(
            "bow-pod16, gpt2_small_train_gen_pod16",
            (
                *("--num-replicas", "4", "--ipus-per-replica", "4"),
                *("--offline-mode", "yes", "--system", "bow-pod16"),
            ),
            _GPT2_SMALL_POD16,
        ),
        None,  # no published GPT-2 row in benchmarks/published_rows.md
        r"step \d+ of epoch \d+, loss: *([0-9.]+)",
        uncompared="train_gpt2.py never calls torch.manual_seed: every run draws other "
        "initial weights (Horovod's broadcast_parameters gives a run's instances its rank "
        "0's), so the layouts start from other weights",
    ),
}

_SIMULATED = re.compile(r"-> ([0-9,.]+) samples/s")


def layouts(name: str, mode: str) -> tuple[Layout, ...]:
    """The runs of application ``name`` in ``mode`` (none for a mode it has no run for)."""
    app = APPLICATIONS[name]
    return {"functional": app.functional, "offline": (app.offline,)}.get(mode, ())


def published_figures(simulated: float, key: str | None) -> dict[str, object]:
    """An offline run's simulated throughput beside published row ``key``'s figure (the one
    table of published rows, ``calibration_set.all_rows``) and their difference; only the
    simulated figure where the run is no published row's configuration."""
    shown: dict[str, object] = {"simulated_samples_per_s": simulated}
    if key is not None:
        row = calibration_set.all_rows()[key]
        shown["published_samples_per_s"] = row.published
        shown["error_percent"] = round(100 * (simulated / row.published - 1), 1)
        shown["row"] = key
        shown["published_row"] = f"{key}: {row.source}"
    return shown


def simulated_throughput(stdout: str) -> float | None:
    """The simulated samples per second an offline run printed first, if any."""
    simulated = [float(v.replace(",", "")) for v in _SIMULATED.findall(stdout)]
    return simulated[0] if simulated else None


def figures(name: str, mode: str, stdout: str, stderr: str) -> dict[str, object]:
    """What a run shows: the losses it printed (first, last, count), and offline the
    simulated throughput beside the published figure and their difference."""
    app = APPLICATIONS[name]
    text = stdout + "\n" + stderr
    losses = [float(v) for v in re.findall(app.loss, text)]
    shown: dict[str, object] = {}
    if losses:
        shown.update(first_loss=losses[0], last_loss=losses[-1], losses=losses)
    simulated = simulated_throughput(stdout)
    if mode == "offline" and simulated is not None:
        shown.update(published_figures(simulated, app.published))
    return shown
