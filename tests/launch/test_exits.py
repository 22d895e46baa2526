"""How an instance ended, and whether its failure ended the others (``launch._exits``)."""

from launch._exits import InstanceExit, how_it_ended, others_were_running, shell_code


def test_a_first_failure_ended_the_others_also_when_all_had_ended_before_the_look():
    """Instance 1 exits 3; its waiting peer ends itself (``gcl.PeerLeft``) before the
    watchdog's next look, so no instance is left running, yet the job was ended because of
    instance 1 (CI once lost the line's tail to that race)."""
    first = InstanceExit(1, 3, when_ns=100)
    peer_left = InstanceExit(0, 1, when_ns=200)
    both = {0: peer_left, 1: first}
    assert others_were_running(first, both, 2, finished=True)
    assert others_were_running(first, {1: first}, 2, finished=False)  # still running
    # The other had finished its program before the failure, or finished it well after:
    assert not others_were_running(first, {0: peer_left._replace(when_ns=50), 1: first}, 2, True)
    assert not others_were_running(first, {0: peer_left._replace(code=0), 1: first}, 2, True)
    assert not others_were_running(None, {0: peer_left._replace(code=0)}, 2, finished=True)


def test_an_end_is_named_as_a_shell_would_give_it():
    assert how_it_ended(3) == "exited with code 3"
    assert how_it_ended(-9) == "was killed by signal 9 (SIGKILL)"
    assert (shell_code(3), shell_code(-9), shell_code(0)) == (3, 137, 0)
    assert InstanceExit(1, -15, 0).describe() == "instance 1 was killed by signal 15 (SIGTERM)"


def test_a_lone_instance_s_failure_ended_no_other_instance():
    """One instance fails; the watchdog sees its early status (written before its exit
    handlers ran, so not yet among the exits): there was no other instance to end, so the
    failure's line must not say it ended "the other instances"."""
    first = InstanceExit(0, 1, when_ns=100)
    assert not others_were_running(first, {}, 1, finished=False)
    assert others_were_running(first, {}, 2, finished=False)  # its peer still runs
