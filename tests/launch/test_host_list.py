"""Host lists: comma lists and bracket ranges as PopRun's -H takes them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch import UsageError, parse_hosts


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost", ("localhost",)),
        ("a,b", ("a", "b")),
        (" a , b ", ("a", "b")),
        ("host[0-2,4]", ("host0", "host1", "host2", "host4")),
        ("node[01-03]", ("node01", "node02", "node03")),
        ("a,host[1-2]", ("a", "host1", "host2")),
        ("r[1-2]-ipu", ("r1-ipu", "r2-ipu")),
        ("h[7]", ("h7",)),
        ("pod[8-11]", ("pod8", "pod9", "pod10", "pod11")),
    ],
)
def test_host_lists(text, expected):
    assert parse_hosts(text) == expected


@given(st.integers(0, 50), st.integers(0, 20))
def test_a_range_expands_to_every_index_in_order(first, count):
    hosts = parse_hosts(f"h[{first}-{first + count}]")
    assert hosts == tuple(f"h{n}" for n in range(first, first + count + 1))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a,,b", "empty host name"),
        ("", "empty host name"),
        ("host[2-0]", "runs backwards"),
        ("host[a-b]", "is not N or N-M"),
        ("host[0-1", "cannot read"),
        ("h[0-1][2]", "cannot read"),
        ("a,b,a", "names a more than once"),
        ("h[0-1],h1", "names h1 more than once"),
    ],
)
def test_bad_host_lists_are_refused(text, match):
    with pytest.raises(UsageError, match=match):
        parse_hosts(text)


def test_huge_ranges_are_refused_by_a_cap_in_one_short_line():
    with pytest.raises(UsageError, match="more than 65536 hosts") as refused:
        parse_hosts("h[0-100000]")
    assert len(str(refused.value)) < 300
    with pytest.raises(UsageError, match="more than 65536 hosts"):
        parse_hosts("a[0-40000],b[0-40000]")


def test_many_duplicates_are_found_in_linear_time_and_listed_briefly():
    # 60,002 names with 5,001 repeated: quadratic counting would take minutes.
    with pytest.raises(UsageError, match=r"names h0, h1, h10, h100, h1000 \(and 4996 others\)"):
        parse_hosts("h[0-55000],h[0-5000]")
