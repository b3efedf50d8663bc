"""gnnflow.runtime.processes: the huge-page tunable the launcher and the CLI add, and the
environment change that lasts only while processes are started."""

from __future__ import annotations

import os

from gnnflow.runtime.processes import (
    HUGEPAGES_TUNABLE,
    TUNABLES_ENV,
    environ_set,
    huge_page_tunables,
)


def test_huge_page_tunables_are_added_once_and_can_be_turned_off():
    assert huge_page_tunables({}) == HUGEPAGES_TUNABLE
    assert huge_page_tunables({TUNABLES_ENV: "glibc.malloc.arena_max=2"}) == \
        f"glibc.malloc.arena_max=2:{HUGEPAGES_TUNABLE}"
    assert huge_page_tunables({TUNABLES_ENV: "glibc.malloc.hugetlb=0"}) is None  # the user's own setting
    assert huge_page_tunables({"GNNFLOW_HUGEPAGES": "0"}) is None


def test_environ_set_restores_the_variable_as_it_was(monkeypatch):
    monkeypatch.delenv("GNNFLOW_TEST_VAR", raising=False)
    with environ_set("GNNFLOW_TEST_VAR", "a"):
        assert os.environ["GNNFLOW_TEST_VAR"] == "a"
    assert "GNNFLOW_TEST_VAR" not in os.environ
    monkeypatch.setenv("GNNFLOW_TEST_VAR", "before")
    with environ_set("GNNFLOW_TEST_VAR", "b"):
        assert os.environ["GNNFLOW_TEST_VAR"] == "b"
    assert os.environ["GNNFLOW_TEST_VAR"] == "before"
    with environ_set("GNNFLOW_TEST_VAR", None):  # None: leave it alone
        assert os.environ["GNNFLOW_TEST_VAR"] == "before"
