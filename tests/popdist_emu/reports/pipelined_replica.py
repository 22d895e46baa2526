"""A toy four-stage pipelined replica, for the reports' tests of a pipeline."""

import hardware


def four_stages(*, scale=lambda i: 1.0, blocks=lambda i: (f"B{i}",)):
    """Four stages, one per IPU, each ``scale(i)`` times the first's work; a stage's
    backward twice its forward."""

    def counts(i, k):
        return hardware.PassCounts(2e10 * k * scale(i), 1e6, 0.0, 50 * k)

    return tuple(
        hardware.StageProfile(
            i,
            blocks(i),
            counts(i, 1),
            counts(i, 2),
            output_bytes=50_000 if i < 3 else 0,
            input_bytes=50_000,
            activation_bytes=1_000_000,
            parameter_bytes=1_000_000,
            optimiser_state_bytes=2_000_000,
            gradient_bytes=1_000_000,
        )
        for i in range(4)
    )


def simulate_pipeline(profile, stages, layout, system="pod16"):
    """The one ``simulate_step`` of a pipelined replica of ``stages``."""
    model = hardware.ReplicaModel(profile, stages, "pipelined")
    return hardware.simulate_step(model, layout, hardware.get_system(system))
