"""The pieces examples/bert.py and examples/vit.py share: a transformer's layers in plain JAX,
their initialisation, and the ``--layers-per-ipu`` placement argument; with the
pipelined CNN examples (examples/resnext_training.py, examples/efficientnet_training.py),
the training flags and the options they set.

References:
    Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (multi-head attention);
    Ba et al., "Layer Normalization", 2016.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import optax

import hardware
import popdist_emu as popdist
from popdist_emu import arguments
from popdist_emu.runtime import layerwise


def refuse(program: str, message: str) -> NoReturn:
    """A bad argument: one line on standard error, exit status 2."""
    print(f"{program}: {message}", file=sys.stderr)
    raise SystemExit(2)


def init_params(shapes: Any, key: jax.Array, weight_std: Callable[[str, tuple], float]) -> Any:
    """Truncated-normal weights (``weight_std(path, shape)`` gives the standard deviation),
    zero biases and unit layer-norm scales, for a tree of ``ShapeDtypeStruct``.

    One compiled program makes them all: drawn one by one, each weight's shape compiled a
    sampler of its own (a third of a small model's start-up)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(shapes)

    @jax.jit
    def make(key: jax.Array) -> list:
        keys = jax.random.split(key, len(leaves))
        out = []
        for k, (path, s) in zip(keys, leaves, strict=True):
            name = jax.tree_util.keystr(path)
            if name.endswith("['scale']"):
                out.append(jnp.ones(s.shape, s.dtype))
            elif name.endswith("['b']") or name.endswith("['bias']"):
                out.append(jnp.zeros(s.shape, s.dtype))
            else:
                std = weight_std(name, s.shape)
                normal = jax.random.truncated_normal(k, -2, 2, s.shape)
                out.append((std * normal).astype(s.dtype))
        return out

    return jax.tree.unflatten(jax.tree.structure(shapes), make(key))


def layer_norm(p: Any, x: jax.Array, eps: float) -> jax.Array:
    """Layer norm computed in float32, returned in ``x``'s dtype."""
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)).astype(x.dtype)


def dense(p: Any, x: jax.Array) -> jax.Array:
    return x @ p["w"] + p["b"]


def attention(p: Any, x: jax.Array, heads: int, bias: jax.Array | None = None) -> jax.Array:
    """Multi-head self-attention (one ``qkv`` projection, softmax in float32) and its output
    projection ``out``; ``bias`` is added to the scores (an attention mask)."""
    b, s, h = x.shape
    qkv = dense(p["qkv"], x).reshape(b, s, 3, heads, h // heads)
    qh, kh, vh = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", qh, kh) / math.sqrt(h // heads)
    if bias is not None:
        scores = scores + bias.astype(scores.dtype)
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
    return dense(p["out"], jnp.einsum("bhqk,bkhd->bqhd", probs, vh).reshape(b, s, h))


def in_float32(
    inner: optax.GradientTransformation,
    state_dtype: Any = jnp.float32,
    first_moment_dtype: Any = None,
) -> optax.GradientTransformation:
    """``inner`` computed in float32 whatever the weights' precision, the floats of its state
    stored as ``state_dtype``, the first moment (optax's ``mu``) as ``first_moment_dtype``
    where given (float16 with a float32 second moment).

    Graphcore's BERT and ViT keep the moments in float32 unless their configuration says
    FLOAT16 (PopART's accumulator types default to FLOAT). Computing in float16 fails: Adam's
    ``eps`` (1e-8) rounds to zero, a squared gradient below 6e-8 underflows, and a weight
    whose gradient and moments are zero would get 0/0. So the gradients, weights and stored
    state are read as float32, and the updates cast back to each gradient's dtype.
    """
    first = state_dtype if first_moment_dtype is None else first_moment_dtype

    def cast_one(x: Any, dtype: Any) -> Any:
        return x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

    def cast(tree: Any, dtype: Any) -> Any:
        return jax.tree.map(lambda x: cast_one(x, dtype), tree)

    def store(state: Any) -> Any:
        # optax's ScaleByAdamState names its first moment ``mu``.
        def one(path: Any, x: Any) -> Any:
            is_first = any(getattr(key, "name", None) == "mu" for key in path)
            return cast_one(x, first if is_first else state_dtype)

        return jax.tree_util.tree_map_with_path(one, state)

    def init(params: Any) -> Any:
        return store(inner.init(cast(params, jnp.float32)))

    def update(grads: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        weights = None if params is None else cast(params, jnp.float32)
        updates, state = inner.update(cast(grads, jnp.float32), cast(state, jnp.float32), weights)
        updates = jax.tree.map(lambda u, g: u.astype(g.dtype), updates, grads)
        return updates, store(state)

    return optax.GradientTransformation(init, update)


def adamw_in_float32(
    learning_rate: float, state_dtype: Any = jnp.float32, first_moment_dtype: Any = None
) -> optax.GradientTransformation:
    """``optax.adamw`` through :func:`in_float32`: float16 moments as PopART's ``accl1_type``
    (which PopART BERT's ``use_half_optimizer_state`` sets) and PopTorch's
    ``first_order_momentum_accum_type`` (Graphcore's PopTorch BERT's
    ``enable_half_first_order_momentum``) store them."""
    return in_float32(optax.adamw(learning_rate), state_dtype, first_moment_dtype)


def lamb_in_float32(
    learning_rate: float, state_dtype: Any = jnp.float32, first_moment_dtype: Any = None
) -> Any:
    """``popdist.lamb`` (shardable by RTS) with its Adam moments through :func:`in_float32`:
    float32 by default, as Graphcore's LAMB keeps them; float16 where its BERT's
    ``lamb_m_dtype`` (the first moment) or ``lamb_accl_dtype`` (both) says FLOAT16. The trust
    ratio and the tail run as ``popdist.lamb``'s."""
    base = popdist.lamb(learning_rate)
    return layerwise(in_float32(base.inner, state_dtype, first_moment_dtype), base.tail)


def layers_per_ipu(program: str, text: str | None, layers: int, ipus: int) -> list[int]:
    """``--layers-per-ipu`` as a list of ``ipus`` counts (default: as even as possible, extras
    on later IPUs); refused in one line (exit 2) unless they are non-negative and sum to
    ``layers``."""
    if text is None:
        base, extra = divmod(layers, ipus)
        return [base + (1 if i >= ipus - extra else 0) for i in range(ipus)]
    try:
        counts = [int(c) for c in text.split(",")]
    except ValueError:
        counts = []
    if len(counts) != ipus or sum(counts) != layers or min(counts, default=-1) < 0:
        default = ",".join(map(str, layers_per_ipu(program, None, layers, ipus)))
        refuse(
            program,
            f"--layers-per-ipu {text!r} must give {ipus} non-negative counts (one per IPU "
            f"holding layers) summing to the model's {layers} layers, e.g. {default}.",
        )
    return counts


def add_training_arguments(
    parser: Any, *, steps: int, learning_rate: float, proportion_help: str
) -> None:
    """The flags both pipelined examples take: accumulation, iterations, steps, the
    optimiser's learning rate, seed, recomputation, strategy, RTS, offloading, half partials
    and the matmuls' available memory proportion (one value or one per IPU)."""
    parser.add_argument(
        "--gradient-accumulation",
        type=arguments.positive_int,
        help="default: PopTorch's least, 2 x stages - 1 (1 sharded)",
    )
    parser.add_argument("--device-iterations", type=arguments.positive_int, default=1)
    parser.add_argument("--steps", type=arguments.positive_int, default=steps)
    parser.add_argument("--learning-rate", type=arguments.positive_float, default=learning_rate)
    parser.add_argument("--seed", type=arguments.seed, default=0)
    parser.add_argument("--recompute", action="store_true")
    parser.add_argument("--strategy", choices=("pipelined", "sharded"), default="pipelined")
    parser.add_argument("--replicated-tensor-sharding", action="store_true")
    parser.add_argument("--offload-optimiser", action="store_true")
    parser.add_argument(
        "--enable-half-partials",
        action="store_true",
        help="half-precision partials in the matmuls and convolutions (PopLibs' partialsType "
        "half; Graphcore's enable_half_partials, PopTorch's Precision.setPartialsType)",
    )
    parser.add_argument(
        "--available-memory-proportion",
        type=arguments.proportion,
        nargs="+",
        default=[hardware.DEFAULT_AVAILABLE_MEMORY_PROPORTION],
        metavar="P",
        help=f"PopLibs' availableMemoryProportion of the matmuls, in (0, 1]: one value for "
        f"every IPU, or one per IPU ({proportion_help})",
    )


def check_steps(parser: Any, args: Any) -> None:
    """``--steps`` must be whole calls of ``--device-iterations`` steps."""
    if args.steps % args.device_iterations:
        parser.error(
            f"--steps {args.steps} must be a multiple of --device-iterations "
            f"{args.device_iterations} (one call runs device-iterations steps)"
        )


def pipeline_options(program: str, args: Any, placement: Sequence[Any], **extra: Any) -> Any:
    """``popdist.Options`` from the flags ``add_training_arguments`` adds, for the stages of
    ``placement``: PopTorch's least gradient accumulation for them unless one is given, the
    memory proportions per IPU (a bad list refused in one line) and ``extra`` options."""
    ga = args.gradient_accumulation or hardware.min_gradient_accumulation(
        len(placement), args.strategy
    )
    try:
        amp = arguments.per_ipu_proportions(
            args.available_memory_proportion, popdist.getNumIpusPerReplica()
        )
    except ValueError as error:
        refuse(program, str(error))
    cls = popdist.PipelinedExecution if args.strategy == "pipelined" else popdist.ShardedExecution
    return popdist.Options(
        gradient_accumulation=ga,
        device_iterations=args.device_iterations,
        replicated_tensor_sharding=args.replicated_tensor_sharding,
        offload_optimiser=args.offload_optimiser,
        execution_strategy=cls(*placement),
        recomputation=args.recompute,
        available_memory_proportion=amp,
        partials_type="half" if args.enable_half_partials else "float",
        **extra,
    )
