"""launch._subnet: --host-subnet's interface and MPI words, refused in one line when wrong."""

import pytest

from launch._errors import UsageError
from launch._subnet import host_subnet_arguments, local_interface


def test_the_interface_in_the_subnet_is_found():
    assert local_interface("127.0.0.0/8") == "lo"
    assert host_subnet_arguments("hydra", "127.0.0.1/8") == ["-iface", "lo"]


def test_open_mpi_gets_the_subnet_itself():
    assert host_subnet_arguments("openmpi", "10.10.1.2/16") == [
        "--mca", "oob_tcp_if_include", "10.10.0.0/16", "--mca", "btl_tcp_if_include", "10.10.0.0/16"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("subnet", "said"),
    [
        ("198.51.100.0/24", "no network interface of this machine is in it (here: lo 127.0.0.1"),
        ("10.0.0.0/33", "is not an IPv4 subnet"),
        ("fd00::/8", "is not an IPv4 subnet"),
        ("eth0", "is not an IPv4 subnet"),
    ],
)
def test_a_subnet_that_cannot_be_used_is_refused(subnet, said):
    with pytest.raises(UsageError, match="--host-subnet") as refused:
        host_subnet_arguments("hydra", subnet)
    assert said in str(refused.value)
    assert "\n" not in str(refused.value)


@pytest.mark.timeout(60)
def test_the_launcher_refuses_it_before_any_start(poprun, tmp_path):
    (tmp_path / "p.py").write_text("raise SystemExit('started')\n")
    words = ["--real-hosts", "-H", "a,b", "--num-replicas=2", "--num-instances=2"]
    result = poprun(*words, "--host-subnet", "198.51.100.0/24", "p.py")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "--host-subnet 198.51.100.0/24" in result.stderr
    assert "started" not in result.stderr


@pytest.mark.timeout(60)
def test_without_real_hosts_it_is_named_as_having_no_effect(poprun, tmp_path):
    (tmp_path / "p.py").write_text("print('ran')\n")
    result = poprun("--host-subnet", "198.51.100.0/24", "p.py")
    assert result.returncode == 0, result.stderr
    assert "--host-subnet: no effect without --real-hosts" in result.stderr
    assert "ran" in result.stdout
