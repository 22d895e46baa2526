"""BERT pre-training (masked-LM and next-sentence heads) or SQuAD fine-tuning, in plain JAX,
pipelined over IPUs.

Run it under the launcher, e.g. the MLPerf v1.1 IPU-POD16 configuration, offline (compile
only, from shapes: the 340 M parameters are never materialised)::

    poprun-emu --offline-mode --num-replicas 4 --ipus-per-replica 4 examples/bert.py \\
        --model large --sequence-length 512 --layers-per-ipu 3,7,7,7 \\
        --micro-batch-size 2 --gradient-accumulation 192 --recompute --offload-optimiser

or train the tiny model for real on this machine::

    poprun-emu --num-replicas 2 --ipus-per-replica 2 examples/bert.py --model tiny

The model is BERT (Devlin et al. 2019; its blocks and synthetic data are in
``pipelined_training``): token, position and segment embeddings with layer
norm; encoder layers of multi-head self-attention and a GELU feed-forward network, each
with a residual connection and post layer norm; a masked-LM head (dense, GELU, layer norm,
then a decoder to the vocabulary, evaluated only at the masked positions, as MLPerf's
reference does) and a next-sentence head on the first token. The decoder has its own
weights, or with ``--tied-decoder`` multiplies by the word embeddings as BERT and
Graphcore's BERT do. Blocks: ``embeddings``, ``layer00`` ... and ``heads``; the embeddings
go on IPU 0 (alone with ``--encoder-start-ipu 1``), the layers follow ``--layers-per-ipu``,
the heads end the last stage, which wraps round to IPU 0 for a tied decoder.
``--att-ffn-placement`` (Graphcore's ``att_ffn_placement``) cuts each layer into
``attention00`` and ``ffn00`` blocks and places them on any IPU, as Graphcore's MLPerf v2.0
Bow configurations do, e.g. for a Bow-POD64 (the published configuration's settings)::

    poprun-emu --offline-mode yes --system bow-pod64 --num-replicas 8 --num-instances 8 \\
        --ipus-per-replica 8 examples/bert.py --model large --vocab-size 30912 \\
        --sequence-length 512 --max-predictions 76 --micro-batch-size 3 \\
        --gradient-accumulation 96 --encoder-start-ipu 1 --tied-decoder \\
        --att-ffn-placement "$PLACEMENT" --available-memory-proportion 1 \\
        --enable-half-partials --replicated-tensor-sharding --recompute \\
        --sequences-per-sample 2

with ``PLACEMENT="[[1,[3,3]],[2,[3,3]],[3,[3,3]],[4,[4,3]],[5,[3,4]],[6,[4,3]],[7,[3,4]],
[0,[1,1]]]"`` (on one line).

``--task squad`` (Graphcore's BERT ``task``) replaces the heads with SQuAD's span head (a
start and an end logit per token, Devlin et al. section 4.2), usually with ``--optimiser
adam`` (AdamW). Both optimisers, LAMB and Adam, compute in float32 and keep their moments in
float32, as Graphcore's BERTs do by default; ``--half-first-order-momentum`` stores the first
moment in float16 (LAMB's ``lamb_m_dtype`` FLOAT16; Adam's ``use_half_optimizer_state`` in
PopART BERT, ``enable_half_first_order_momentum`` in PopTorch BERT), ``--half-optimiser-state``
both (LAMB's ``lamb_accl_dtype`` FLOAT16).

The tiny model trains on SEEDED SYNTHETIC tokens (Zipf-distributed, so the masked-LM loss
can fall to the unigram entropy; the next-sentence label is the parity of the second
token; a SQuAD answer is a span of 1 to 4 tokens that starts and ends with a marker token),
not on a corpus.

The last line printed (by instance 0) is a JSON object with the simulated throughput in
sequences per second (MLPerf packs about 2 sequences per sample, ``--sequences-per-sample``).

References:
    Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for Language
    Understanding", NAACL 2019 (large: 24 layers, hidden 1024, 16 heads, FFN 4096,
    vocabulary 30,522); mlcommons/training_results_v1.1 Graphcore BERT (configurations);
    Graphcore examples, BERT ("layers_per_ipu", embeddings on IPU 0); You et al.,
    "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes" (LAMB).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pipelined_training
import popdist
from pipelined_training import (
    BERT_CONFIGS,
    BERT_TASKS,
    DTYPES,
    adamw_in_float32,
    add_training_arguments,
    bert_batch_shapes,
    bert_block_model,
    bert_param_shapes,
    check_steps,
    init_bert_params,
    lamb_in_float32,
    pipeline_options,
    refuse,
    synthetic_pretraining_data,
    synthetic_squad_data,
)

import hardware
import popdist_emu
from popdist_emu import arguments

OPTIMISERS = ("lamb", "adam")

_refuse = functools.partial(refuse, "bert.py")
layers_per_ipu = functools.partial(pipelined_training.layers_per_ipu, "bert.py")


def att_ffn_placement(text: str, layers: int, ipus: int) -> list[tuple[int, int, int]]:
    """``--att-ffn-placement`` (Graphcore's ``att_ffn_placement``) as ``(ipu, attention
    layers, feed-forward layers)`` per stage, in pipeline order.

    Each stage takes the next attention and feed-forward halves of the layers in model
    order (attention 0, FFN 0, attention 1, ...), so after every stage the attention count
    leads the FFN count by 0 or 1; the counts add up to the model's layers.
    """
    example = "[[1, [3, 3]], [2, [3, 3]], [0, [1, 1]]]"
    try:
        entries = [(int(i), int(a), int(f)) for i, (a, f) in json.loads(text)]
    except (ValueError, TypeError):
        _refuse(f"--att-ffn-placement {text!r} is not a JSON list like {example}.")
    attention = ffn = 0
    for ipu, a, f in entries:
        attention, ffn = attention + a, ffn + f
        if not 0 <= ipu < ipus or min(a, f) < 0 or attention - ffn not in (0, 1):
            _refuse(
                f"--att-ffn-placement entry [{ipu}, [{a}, {f}]]: the IPU must be in 0..{ipus - 1}, "
                "the counts non-negative, and each stage must end after a layer's attention "
                "or its FFN (attention count - FFN count 0 or 1 so far)."
            )
    if (attention, ffn) != (layers, layers):
        _refuse(
            f"--att-ffn-placement places {attention} attention and {ffn} FFN layers: give "
            f"each of the model's {layers} layers both, e.g. {example}."
        )
    return entries


def stages(
    model: str,
    counts: list[int] | None = None,
    *,
    att_ffn: list[tuple[int, int, int]] | None = None,
    encoder_start_ipu: int = 0,
    tied: bool = False,
) -> tuple:
    """The stages, in pipeline order, as Graphcore's BERT places them.

    The embeddings go on IPU 0: alone when ``encoder_start_ipu`` is 1 (Graphcore's
    ``encoder_start_ipu``), else with IPU 0's layers. The layers follow, ``counts`` per IPU
    from ``encoder_start_ipu`` on, or by ``att_ffn`` (attention and FFN halves on any IPU).
    The heads end the last stage; with a ``tied`` decoder they must share IPU 0 with the
    embeddings, so unless the last stage is on IPU 0 they form a stage of their own there:
    the pipeline wraps round to IPU 0.
    """
    placed: list[tuple[int, list[str]]] = []
    if att_ffn is None:
        counts = counts or []
        i = 0
        for k, count in enumerate(counts):
            placed.append((encoder_start_ipu + k, [f"layer{j:02d}" for j in range(i, i + count)]))
            i += count
    else:
        attention = ffn = want_attention = want_ffn = 0
        for ipu, a, f in att_ffn:  # att_ffn_placement's checks keep the halves in order
            want_attention, want_ffn, names = want_attention + a, want_ffn + f, []
            while attention < want_attention or ffn < want_ffn:
                if attention == ffn:
                    names.append(f"attention{attention:02d}")
                    attention += 1
                else:
                    names.append(f"ffn{ffn:02d}")
                    ffn += 1
            placed.append((ipu, names))
    if encoder_start_ipu or not placed:
        placed.insert(0, (0, ["embeddings"]))
    else:
        placed[0] = (placed[0][0], ["embeddings", *placed[0][1]])
    placed = [(ipu, names) for ipu, names in placed if names]
    if tied and placed[-1][0] != 0:
        placed.append((0, ["heads"]))
    else:
        placed[-1][1].append("heads")
    return tuple(popdist_emu.Stage(*names, ipu=ipu) for ipu, names in placed)


def check_sizes(args: argparse.Namespace, options, ipus: int, offline: bool) -> None:
    """Refuses (exit 2, before any compile) sizes no IPU or host can hold.

    One layer's attention scores for one micro-batch (micro x heads x seq^2) are live at
    once on the IPU computing that layer, recomputation or not; training for real, the
    host also holds a call's batch times the calls in flight (--prefetch-depth).
    """
    heads, seq, micro = BERT_CONFIGS[args.model][2], args.sequence_length, args.micro_batch_size
    try:
        ipu = popdist_emu.simulated_system(options.num_total_replicas * ipus, options.system).ipu
    except hardware.SystemSelectionError:
        return  # refused with its own message by simulate()
    arguments.refuse_unless_it_fits(
        "bert.py",
        f"--sequence-length {seq} (one layer's attention scores: --micro-batch-size {micro} "
        f"x {heads} heads x {seq}^2 in {args.precision})",
        micro * heads * seq * seq * jnp.dtype(DTYPES[args.precision]).itemsize,
        ipu.in_processor_memory,
        f"an IPU's In-Processor Memory ({ipu.name})",
        "lower --sequence-length or --micro-batch-size.",
    )
    if not offline:
        arguments.refuse_batch_unless_it_fits(
            "bert.py",
            f"--sequence-length {seq}",
            bert_batch_shapes(options, micro, seq, args.max_predictions, args.task),
            args.prefetch_depth,
        )


def parse_args(argv=None) -> argparse.Namespace:
    parser = arguments.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=tuple(BERT_CONFIGS), default="tiny")
    parser.add_argument(
        "--task",
        choices=BERT_TASKS,
        default=BERT_TASKS[0],
        help="Graphcore's BERT task: pre-training's masked-LM and next-sentence heads, or "
        "SQuAD fine-tuning's span head",
    )
    parser.add_argument(
        "--optimiser",
        choices=OPTIMISERS,
        default=OPTIMISERS[0],
        help="LAMB (pre-training) or Adam with decoupled weight decay (AdamW: fine-tuning)",
    )
    parser.add_argument(
        "--half-optimiser-state",
        action="store_true",
        help="the optimiser's two moments stored in float16, computed in float32 (Graphcore's "
        "MLPerf v2.0 BERT's lamb_accl_dtype FLOAT16); float32 by default",
    )
    parser.add_argument(
        "--half-first-order-momentum",
        action="store_true",
        help="the optimiser's first moment stored in float16 and its second in float32 "
        "(Graphcore's BERT's lamb_m_dtype FLOAT16 with LAMB; with Adam PopART BERT's "
        "use_half_optimizer_state, PopTorch BERT's enable_half_first_order_momentum)",
    )
    parser.add_argument("--sequence-length", type=arguments.int_at_least(2), default=128)
    parser.add_argument(
        "--max-predictions", type=arguments.positive_int, help="masked tokens per sequence"
    )
    parser.add_argument(
        "--layers-per-ipu",
        help="encoder layers on each IPU from --encoder-start-ipu on, e.g. 3,7,7,7",
    )
    parser.add_argument(
        "--encoder-start-ipu",
        type=int,
        choices=(0, 1),
        default=0,
        help="the first encoder layer's IPU: 1 leaves IPU 0 to the embeddings (and a tied "
        "decoder), as Graphcore's 8-IPU BERT configurations do",
    )
    parser.add_argument(
        "--att-ffn-placement",
        metavar="JSON",
        help="Graphcore's att_ffn_placement: [[ipu, [attention layers, FFN layers]], ...] per "
        "stage in pipeline order, e.g. the MLPerf v2.0 Bow runs' [[1, [3, 3]], ..., [0, [1, "
        "1]]] (attention and FFN as blocks of their own; instead of --layers-per-ipu)",
    )
    parser.add_argument(
        "--tied-decoder",
        action="store_true",
        help="the masked-LM decoder multiplies by the word embeddings (Graphcore's BERT); the "
        "heads then run on IPU 0, the pipeline's last stage wrapping round to it",
    )
    parser.add_argument(
        "--vocab-size",
        type=arguments.int_at_least(8),
        help="vocabulary (Graphcore's vocab_length; default the model's, 30,522 for base "
        "and large)",
    )
    parser.add_argument("--micro-batch-size", type=arguments.positive_int, default=2)
    add_training_arguments(
        parser,
        steps=30,
        learning_rate=2e-3,
        proportion_help="Graphcore's BERT-Large lists 0.15 0.18 0.2 0.25",
    )
    parser.add_argument("--precision", choices=tuple(DTYPES), default="fp16")
    parser.add_argument("--prefetch-depth", type=arguments.positive_int, default=3)
    parser.add_argument(
        "--sequences-per-sample",
        type=arguments.positive_float,
        default=1.0,
        help="packing factor (MLPerf: 2)",
    )
    args = parser.parse_args(argv)
    check_steps(parser, args)
    if args.att_ffn_placement is not None and args.layers_per_ipu is not None:
        parser.error("give --att-ffn-placement or --layers-per-ipu, not both")
    if args.half_optimiser_state and args.half_first_order_momentum:
        parser.error(
            "give --half-optimiser-state (both moments in float16) or "
            "--half-first-order-momentum (the first only), not both"
        )
    if args.task == "squad" and args.tied_decoder:
        parser.error("--tied-decoder is pre-training's: a SQuAD head has no decoder")
    if args.task == "squad" and args.max_predictions is not None:
        parser.error("--max-predictions is pre-training's: SQuAD predicts a span")
    if args.max_predictions is None:
        args.max_predictions = max(1, round(0.15 * args.sequence_length))
    if not 1 <= args.max_predictions <= args.sequence_length:
        parser.error(f"--max-predictions {args.max_predictions} must be in 1..sequence length")
    return args


def make_optimiser(args: argparse.Namespace) -> Any:
    """``--optimiser`` at ``--learning-rate``, computed in float32, its moments stored as
    ``--half-first-order-momentum`` and ``--half-optimiser-state`` say (float32 without)."""
    state = jnp.float16 if args.half_optimiser_state else jnp.float32
    first = jnp.float16 if args.half_first_order_momentum else None
    in_float32 = {"adam": adamw_in_float32, "lamb": lamb_in_float32}
    return in_float32[args.optimiser](args.learning_rate, state, first)


def main(argv=None) -> dict:
    start = time.perf_counter()
    args = parse_args(argv)
    ipus = popdist.getNumIpusPerReplica()
    layers, vocab, tied = BERT_CONFIGS[args.model][0], args.vocab_size or 0, args.tied_decoder
    if args.encoder_start_ipu >= ipus:
        _refuse(f"--encoder-start-ipu {args.encoder_start_ipu} needs 2 IPUs per replica or more.")
    counts, att_ffn = None, None
    if args.att_ffn_placement is not None:
        att_ffn = att_ffn_placement(args.att_ffn_placement, layers, ipus)
    else:
        counts = layers_per_ipu(args.layers_per_ipu, layers, ipus - args.encoder_start_ipu)
    placement = stages(
        args.model, counts, att_ffn=att_ffn, encoder_start_ipu=args.encoder_start_ipu, tied=tied
    )
    options = pipeline_options(
        "bert.py",
        args,
        placement,
        output_mode="all",
        prefetch_depth=args.prefetch_depth,
    )
    dtype, seq = DTYPES[args.precision], args.sequence_length
    offline = popdist_emu.is_offline_mode()
    check_sizes(args, options, ipus, offline)
    task = args.task
    if offline:  # shapes only: nothing is allocated
        params = bert_param_shapes(args.model, seq, dtype, vocab=vocab, tied=tied, task=task)
    else:
        key = jax.random.PRNGKey(args.seed)
        params = init_bert_params(args.model, seq, dtype, key, vocab=vocab, tied=tied, task=task)
    model = bert_block_model(args.model, split=att_ffn is not None, tied=tied, task=task)
    optimiser = make_optimiser(args)
    try:
        trainer = popdist_emu.Trainer(model, optimiser, params, options)
    except popdist_emu.PipelineError as err:
        print(f"bert.py: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    shapes = bert_batch_shapes(options, args.micro_batch_size, seq, args.max_predictions, task)
    try:
        simulation = popdist_emu.simulate(trainer, shapes, name=f"BERT-{args.model}")
    except hardware.OutOfMemoryError as error:
        print(error, file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    leader = popdist.getInstanceIndex() == 0
    report = {
        "model": args.model,
        "task": task,
        "optimiser": args.optimiser,
        "replicas": options.num_total_replicas,
        "instances": options.num_instances,
        "ipus_per_replica": ipus,
        "strategy": args.strategy,
        "layers_per_ipu": counts,
        "att_ffn_placement": att_ffn and [[i, [a, f]] for i, a, f in att_ffn],
        "encoder_start_ipu": args.encoder_start_ipu,
        "tied_decoder": tied,
        "stages": [{"ipu": st.ipu, "blocks": list(st.blocks)} for st in placement],
        "sequence_length": seq,
        "micro_batch_size": args.micro_batch_size,
        "gradient_accumulation": options.gradient_accumulation,
        "precision": args.precision,
        "recompute": args.recompute,
        "available_memory_proportion": options.available_memory_proportion,
        "partials_type": options.partials_type,
        # ``params`` are shapes offline and arrays otherwise: the same tree either way.
        "parameters": int(sum(math.prod(x.shape) for x in jax.tree.leaves(params))),
        "offline": offline,
    }
    if not offline:
        if task == "squad":
            data = synthetic_squad_data(args.model, seq, 512, args.seed, vocab)
        else:
            data = synthetic_pretraining_data(
                args.model, seq, args.max_predictions, 512, args.seed, vocab
            )
        loader = popdist_emu.ReplicaLoader(data, args.micro_batch_size, options, seed=args.seed)
        losses = []
        for call in range(args.steps // options.device_iterations):
            losses.extend(np.atleast_1d(trainer.step(loader.batch(call))).tolist())
        report |= {"first_loss": losses[0], "final_loss": losses[-1], "synthetic_data": True}
    popdist_emu.report_simulation(simulation, options)
    pipe = simulation.pipeline
    report |= {
        "simulated_step_seconds": simulation.simulated_step_seconds,
        "samples_per_second": simulation.samples_per_second,
        "sequences_per_second": simulation.samples_per_second * args.sequences_per_sample,
        "bubble_fraction": pipe.bubble_fraction,
        "balance": pipe.balance,
        "fixed_cost_share": hardware.fixed_cost_share(simulation),
        # host calls per step paying the multi-IPU host synchronisation (calibrate_bert.py)
        "multi_ipu_sync_calls": hardware.multi_ipu_sync_calls(simulation.layout),
        "memory_per_ipu_per_stage": [m.total for m in pipe.stage_memory],
        "memory_per_ipu": [m.total for m in pipe.ipu_memory],
        "system": simulation.system.name,
        "wall_seconds": round(time.perf_counter() - start, 3),
    }
    if leader:
        print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()
