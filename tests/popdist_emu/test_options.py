"""Options: PopTorch's names, validated with clear messages, sized from PopDist."""

import os
from unittest import mock

import pytest

from contract import layout_environment
from hardware import ReplicaLayout
from popdist_emu import Options, is_offline_mode


def test_defaults_follow_popdist():
    layout = ReplicaLayout(num_replicas=16, num_instances=4)
    with mock.patch.dict(os.environ, layout_environment(layout, 2)):
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
        mock.patch.dict(os.environ, layout_environment(layout, 0)),
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


def test_layout_is_resolved_once_and_held():
    layout = ReplicaLayout(num_replicas=16, num_instances=4)
    with mock.patch.dict(os.environ, layout_environment(layout, 1)):
        opts = Options(gradient_accumulation=2)
    # A later change of the environment does not change existing options.
    other = ReplicaLayout(num_replicas=8, num_instances=8)
    with mock.patch.dict(os.environ, layout_environment(other, 5)):
        assert (opts.layout, opts.instance_index) == (layout, 1)
        assert (opts.num_total_replicas, opts.num_instances, opts.replica_offset) == (16, 4, 4)
        assert Options(gradient_accumulation=2) != opts  # the new environment's job
    assert opts == Options(gradient_accumulation=2, layout=layout, instance_index=1)


def test_an_explicit_layout_needs_no_environment():
    layout = ReplicaLayout(num_replicas=8, num_instances=2)
    opts = Options(layout=layout, instance_index=1)
    assert (opts.replication_factor, opts.replica_offset, opts.num_instances) == (4, 4, 2)
    with pytest.raises(ValueError, match="the given layout has 4 local replicas"):
        Options(layout=layout, replication_factor=2)
    with pytest.raises(ValueError, match="`instance_index` 2 is outside"):
        Options(layout=layout, instance_index=2)


def test_the_job_is_resolved_with_the_layout():
    layout = ReplicaLayout(num_replicas=4, num_instances=2)
    variables = layout_environment(layout, 1) | {"POPDIST_EMU_JOB_DIR": "/tmp/job-7"}
    with mock.patch.dict(os.environ, variables):
        opts = Options()
        assert Options(layout=layout, instance_index=1).job_dir == ""  # environment unread
    assert opts.job_dir == "/tmp/job-7"
    assert Options(layout=layout, job_dir="/tmp/job-8").job_dir == "/tmp/job-8"
    with pytest.raises(ValueError, match="`job_dir` must be a str"):
        Options(job_dir=7)
