# A pytest plugin: CPython's refleak hunt (regrtest -R) for tests/python.
# With --refleaks=W:R each test runs W times to warm up, then R times
# more, all in one interpreter; after each run (and a full collection)
# the plugin reads sys.gettotalrefcount() (a debug interpreter's count of
# every reference: python3.11-dbg) and sys.getallocatedblocks(), and a
# test fails where each of its R runs left more references than the one
# before: regrtest's rule, for a leak grows at every run and noise does
# not (with --refleaks-blocks, more blocks too: off by default, for
# python3.11-dbg's blocks moved by tens a run with the references
# exactly flat, converging over runs, cause not found).
# Each test's deltas are written to the file --refleaks-log names (else
# to stdout), as regrtest shows them: "test: refs [3, 3, 3], blocks [1,
# 1, 1]".  Forked workers count in their own processes, unseen here.
#
# A test runs again with its module's and session's fixtures kept, and
# once more at the end, uncounted, to tear down as a plain run would; only
# that last run's result is reported (or the first that fails, which ends
# the runs).
#
# Only code built for the debug interpreter counts its references: torch
# and numpy built for the release one (Debian's) change refcounts without
# counting, and the count drifts wherever they make or drop an object;
# tests/python_refleak_test.sh says which tests count exactly.
import gc
import sys

import pytest
from _pytest.runner import runtestprotocol


def pytest_addoption(parser):
    group = parser.getgroup("forkload refleaks")
    group.addoption("--refleaks", metavar="W:R",
                    help="run each test W + R times and fail it where each "
                    "of the last R runs grew the references")
    group.addoption("--refleaks-log", metavar="PATH",
                    help="write each test's deltas there")
    group.addoption("--refleaks-blocks", action="store_true",
                    help="fail a test whose blocks grew at each run too")


def pytest_configure(config):
    spec = config.getoption("refleaks")
    if spec:
        warm, runs = (int(x) for x in spec.split(":"))
        config.pluginmanager.register(
            _Refleaks(warm, runs, config.getoption("refleaks_log"),
                      config.getoption("refleaks_blocks")),
            "forkload-refleaks")


def counts():
    gc.collect()
    refs = sys.gettotalrefcount() if hasattr(sys, "gettotalrefcount") \
        else 0
    return refs, sys.getallocatedblocks()


def leaked(deltas):
    """regrtest's rule: every run grew."""
    return all(d >= 1 for d in deltas)


def _finalizers(item):
    """{node: its finalizers now} for the nodes set up above item."""
    return {node: (fins, len(fins)) for node, (fins, _)
            in item.session._setupstate.stack.items() if node is not item}


def _drop_added(kept):
    """pytest adds a finalizer of each module- or session-scoped fixture a
    test uses to the fixture's node at each run of the test (the first
    finishes the fixture, the others find nothing to do): those a run
    after the first added go, or the count grows by them."""
    for fins, n in kept.values():
        del fins[n:]


class _Refleaks:
    def __init__(self, warm, runs, log, blocks):
        self.blocks = blocks
        self.warm = warm
        self.runs = runs
        self.log = open(log, "a") if log else sys.stdout

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid,
                                           location=item.location)
        # Made before the runs: what the counting itself keeps is the same
        # object count after each run.
        refs, blocks = [0] * self.runs, [0] * self.runs
        counted = 0
        before = counts()
        for i in range(self.warm + self.runs + 1):
            # Captured output is kept on the item for its report: a run's
            # own, not every run's so far.
            item._report_sections = []
            # The counted runs tear down the test's own fixtures and keep
            # its module's (as if the next test were its parent: pytest
            # keeps what the next test's chain of nodes shares); the last,
            # reported, one tears down what the next test does not share.
            last = i == self.warm + self.runs
            kept = _finalizers(item)
            reports = runtestprotocol(item, log=False, nextitem=nextitem
                                      if last else item.parent)
            if i > 0 and not last:
                _drop_added(kept)
            if last or any(r.failed for r in reports):
                break
            after = counts()
            if i >= self.warm:
                refs[i - self.warm] = after[0] - before[0]
                blocks[i - self.warm] = after[1] - before[1]
                counted += 1
            before = after
        if counted == self.runs:
            self.log.write("%s: refs %s, blocks %s\n" %
                           (item.nodeid, refs, blocks))
            self.log.flush()
            what = [name for name, d, rule in (
                ("references", refs, True), ("blocks", blocks, self.blocks))
                if rule and leaked(d)]
            if what:
                # The last run's call fails, saying so.
                for r in reports:
                    if r.when == "call":
                        r.outcome = "failed"
                        r.longrepr = ("leaks %s: refs %s, blocks %s (each "
                                      "of %d runs grew)" % (
                                          " and ".join(what), refs, blocks,
                                          self.runs))
        for r in reports:
            item.ihook.pytest_runtest_logreport(report=r)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid,
                                            location=item.location)
        return True
