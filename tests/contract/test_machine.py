"""The machine's memory, one reader for the launcher and the instances."""

import os

import contract


def test_total_memory_is_the_machines_and_available_memory_is_part_of_it():
    total = contract.total_memory_bytes()
    available = contract.available_memory_bytes()
    physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert total is not None and abs(total - physical) <= 0.05 * physical  # MemTotal, in bytes
    assert 0 < available <= total
