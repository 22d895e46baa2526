"""The names of gcl's environment knobs that the launcher sets for every instance.

gcl owns these names (it reads them itself and may not import the runtime's contract
module); ``popdist_emu._environment`` re-exports them so the launcher sets them by constant.
The other knobs (``GCL_EMU_PIECE_BYTES``, ...) are read where they are used.
"""

ENV_TIMEOUT = "GCL_EMU_TIMEOUT"  # default collective timeout, seconds
DEFAULT_TIMEOUT_S = 120.0  # the collective timeout when ENV_TIMEOUT is unset
ENV_ON_FAILURE = "GCL_EMU_ON_FAILURE"  # "exit": end a failing process without MPI_Finalize
ENV_WAITING_FILE = "GCL_EMU_WAITING_FILE"  # where to record a wait of over a second
