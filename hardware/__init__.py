"""IPU-POD hardware model: replica layout, specs, cost and memory models, simulated time.

Pure Python and NumPy: depends on nothing else of this project, and imports no JAX.
"""

from hardware._layout import (
    VALID_IPUS_PER_REPLICA as VALID_IPUS_PER_REPLICA,
)
from hardware._layout import (
    LayoutError as LayoutError,
)
from hardware._layout import (
    ReplicaLayout as ReplicaLayout,
)

__all__ = [
    "VALID_IPUS_PER_REPLICA",
    "LayoutError",
    "ReplicaLayout",
]
