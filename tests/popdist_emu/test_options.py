"""Options: PopTorch's names, validated with clear messages, sized from PopDist."""

import os
from unittest import mock

import pytest

from hardware import ReplicaLayout
from popdist_emu import Options, is_offline_mode


def test_defaults_follow_popdist():
    layout = ReplicaLayout(num_replicas=16, num_instances=4)
    with mock.patch.dict(os.environ, layout.instance_environment(2)):
        opts = Options(gradient_accumulation=3)
        assert opts.replication_factor == 4
        assert opts.num_total_replicas == 16
        assert opts.replica_offset == 8
        assert opts.global_batch_size(5) == 5 * 16 * 3


def test_outside_poprun_one_replica():
    opts = Options()
    assert (opts.replication_factor, opts.num_instances, opts.replica_offset) == (1, 1, 0)
    assert (opts.output_mode, opts.reduction, opts.prefetch_depth) == ("final", "mean", 3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"gradient_accumulation": 0}, "`gradient_accumulation` .*must be a positive int, got 0"),
        ({"device_iterations": 1.5}, "`device_iterations` .*got 1.5"),
        ({"replication_factor": True}, "`replication_factor` .*got True"),
        ({"output_mode": "last"}, "`output_mode` must be one of"),
        ({"reduction": "avg"}, "`reduction` .*must be one of"),
        ({"prefetch_depth": 0}, "`prefetch_depth` must be >= 1"),
        ({"sharding_domain": 0}, "`sharding_domain`"),
    ],
)
def test_bad_values_fail_clearly(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Options(**kwargs)


def test_replication_factor_must_match_poprun():
    layout = ReplicaLayout(num_replicas=8, num_instances=2)
    with (
        mock.patch.dict(os.environ, layout.instance_environment(0)),
        pytest.raises(ValueError, match="PopRun gave this instance 4 local replicas"),
    ):
        Options(replication_factor=2)


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        Options().gradient_accumulation = 2


def test_offline_mode_from_environment():
    with mock.patch.dict(os.environ, {"POPDIST_EMU_OFFLINE": "1"}):
        assert is_offline_mode()
    with mock.patch.dict(os.environ, {"POPDIST_EMU_OFFLINE": ""}):
        assert not is_offline_mode()
