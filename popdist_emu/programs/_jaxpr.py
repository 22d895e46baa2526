"""The jaxprs inside an equation's parameters (``cond`` branches, ``scan`` bodies, ...).

``jax.extend.core.jaxprs_in_params`` does this from JAX 0.7 on; JAX 0.6 (the newest JAX on
Python 3.10) lacks it, so the same walk is written here against the public ``Jaxpr`` and
``ClosedJaxpr`` types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import jax.extend.core as jex


def sub_jaxprs(params: Mapping[str, object]) -> Iterator[jex.Jaxpr]:
    """Every ``Jaxpr`` in ``params``, a ``ClosedJaxpr`` unwrapped, in tuples and lists too."""
    if hasattr(jex, "jaxprs_in_params"):
        yield from jex.jaxprs_in_params(params)
        return
    for value in params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, jex.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jex.Jaxpr):
                yield item
