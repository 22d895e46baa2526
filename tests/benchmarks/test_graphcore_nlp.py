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
