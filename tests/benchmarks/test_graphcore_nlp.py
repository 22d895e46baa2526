"""benchmarks/graphcore_nlp.py: the command lines of Graphcore's NLP applications (the runs
themselves are the benchmark's, minutes each)."""

from repo_scripts import load_benchmark

nlp = load_benchmark("graphcore_nlp")


def test_the_offline_runs_pass_compile_only_as_the_flag_the_programs_declare():
    # BERT's and GPT-2's arguments declare --compile-only with action="store_true": a value
    # after it ("True") is refused by their parsers before anything is simulated.
    for name in ("bert", "gpt2"):
        words = nlp.layouts(name, "offline")[0].args
        assert words.count("--compile-only") == 1, name
        after = words.index("--compile-only") + 1
        assert after == len(words) or words[after].startswith("--"), (name, words[after:])


def test_the_gpt2_offline_run_is_the_published_row_on_its_pod():
    (layout,) = nlp.layouts("gpt2", "offline")
    args, poprun = list(layout.args), list(layout.poprun)
    # benchmarks.yml's pytorch_gpt2_small_train_gen_pod16: 4 replicas of 4 IPUs.
    assert (
        args[args.index("--ipus-per-replica") + 1] == poprun[poprun.index("--ipus-per-replica") + 1]
    )
    assert (
        args[args.index("--replication-factor") + 1] == poprun[poprun.index("--num-replicas") + 1]
    )
    assert poprun[poprun.index("--system") + 1] == "bow-pod16"


def test_an_offline_run_is_compared_with_its_row_in_the_one_table_of_published_rows():
    table = nlp.calibration_set.all_rows()
    shown = nlp.figures("bert", "offline", "step 2.1 s -> 14,249.5 samples/s", "")
    assert shown["row"] == nlp.APPLICATIONS["bert"].published == "B15"
    assert shown["published_samples_per_s"] == table["B15"].published
    assert shown["error_percent"] == round(100 * (14_249.5 / table["B15"].published - 1), 1)
    # GPT-2's configuration is no published row's: its figure alone.
    assert nlp.figures("gpt2", "offline", "-> 1,028 samples/s", "") == {
        "simulated_samples_per_s": 1028.0
    }


def test_the_functional_layouts_say_why_their_losses_are_not_compared():
    """GPT-2 never seeds PyTorch and BERT's reader gives each instance its own records:
    the reason goes with the second layout's row, instead of a comparison."""
    for name in ("bert", "gpt2"):
        assert len(nlp.layouts(name, "functional")) == 2
        assert nlp.APPLICATIONS[name].uncompared, name
    assert "manual_seed" in nlp.APPLICATIONS["gpt2"].uncompared
