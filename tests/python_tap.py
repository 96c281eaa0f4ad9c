# A pytest plugin for tests/python_test.sh: each test's result as a TAP
# line, for automake's TAP driver, written to the file --tap-file names:
#   ok N - tests/python/test_x.py::test_y
#   not ok N - tests/python/test_x.py::test_z, then the failure as "# " lines
#   ok N - ... # SKIP reason              (pytest.skip, importorskip, marks)
#   not ok N - ... # TODO xfail: reason   (an expected failure: XFAIL)
# A test whose setup or teardown fails is "not ok" too, and so is a file
# that fails to be collected.  The plan is the driver's, and so is the
# line of a test that never ends: PATH.running names the test that runs
# while it runs.
#
# With --tap-block-torch=REASON, "import torch" raises ImportError(REASON),
# so that the tests needing torch skip with it while the others run: the
# driver asks for that where torch cannot be loaded (under
# AddressSanitizer, when it says so).  A test that imports torch through
# pytest.importorskip skips, and so does a file that imports it at its
# top, instead of failing to be collected.
import importlib.abc
import os
import sys

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("forkload TAP")
    group.addoption("--tap-file", metavar="PATH",
                    help="write each test's result there, in TAP")
    group.addoption("--tap-prefix", default="",
                    help="put this before each test's node id")
    group.addoption("--tap-block-torch", metavar="REASON",
                    help="make 'import torch' fail with REASON")


class _BlockTorch(importlib.abc.MetaPathFinder):
    def __init__(self, reason):
        self.reason = reason

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(self.reason, name=name)
        return None


def pytest_configure(config):
    reason = config.getoption("tap_block_torch")
    if reason:
        sys.meta_path.insert(0, _BlockTorch(reason))
        config.pluginmanager.register(_SkipBlocked(reason),
                                      "forkload-block-torch")
    path = config.getoption("tap_file")
    if path:
        config.pluginmanager.register(
            _Tap(path, config.getoption("tap_prefix")), "forkload-tap")


class _SkipBlocked:
    def __init__(self, reason):
        self.reason = reason

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outcome = yield
        report = outcome.get_result()
        if report.failed and self.reason in str(report.longrepr):
            report.outcome = "skipped"
            report.longrepr = (str(collector.path), None, self.reason)


def _one_line(s):
    # A '#' would start a TAP directive.
    return " ".join(str(s).split()).replace("#", "\\#")


def _skip_reason(report):
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        reason = report.longrepr[2]
    else:
        reason = str(report.longrepr or "")
    if reason.startswith("Skipped: "):
        reason = reason[len("Skipped: "):]
    return _one_line(reason) or "skipped"


class _Tap:
    def __init__(self, path, prefix):
        self.path = path
        self.out = open(path, "w", buffering=1)
        self.prefix = prefix
        self.n = 0
        self.reports = {}

    def _line(self, ok, name, directive="", diag=""):
        self.n += 1
        line = "%s %d - %s%s" % ("ok" if ok else "not ok", self.n,
                                 _one_line(self.prefix + name),
                                 " # " + directive if directive else "")
        self.out.write(line + "\n")
        for d in diag.rstrip("\n").split("\n") if diag.strip() else []:
            self.out.write("# " + d + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(self, report):
        # A file skipped as a whole (pytest.skip(allow_module_level=True),
        # importorskip at its top) runs none of its tests: one line.
        if report.skipped:
            self._line(True, report.nodeid, "SKIP " + _skip_reason(report))
        if report.failed:
            self.n += 1
            self.out.write("not ok %d - collecting %s\n" % (
                self.n, _one_line(self.prefix + report.nodeid)))
            for d in report.longreprtext.rstrip("\n").split("\n"):
                self.out.write("# " + d + "\n")

    def pytest_runtest_logstart(self, nodeid, location):
        # The test that runs, for the driver to name if it never ends.
        with open(self.path + ".running", "w") as f:
            f.write(self.prefix + nodeid + "\n")

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report):
        self.reports.setdefault(report.nodeid, {})[report.when] = report
        if report.when == "teardown":
            self._test(report.nodeid, self.reports.pop(report.nodeid))
            os.unlink(self.path + ".running")

    def _test(self, name, phases):
        setup, call = phases.get("setup"), phases.get("call")
        teardown = phases["teardown"]
        failed = [r for r in (setup, call, teardown) if r and r.failed]
        if failed:
            diag = []
            for r in failed:
                what = "" if r.when == "call" else "error in %s: " % r.when
                diag.append(what + r.longreprtext)
                for title, text in r.sections:
                    diag.append("----- %s -----\n%s" % (title, text))
            # A strict xfail that passed says so ("[XPASS(strict)]").
            self._line(False, name, diag="\n".join(diag))
            return
        first = setup if setup is not None and setup.skipped else call
        if first is not None and first.skipped:
            if hasattr(first, "wasxfail"):
                self._line(False, name, "TODO xfail: " +
                           _one_line(first.wasxfail or "expected to fail"))
            else:
                self._line(True, name, "SKIP " + _skip_reason(first))
            return
        if call is not None and hasattr(call, "wasxfail"):
            self._line(True, name, diag="XPASS: expected to fail (%s), "
                       "but passed" % (call.wasxfail or "no reason given"))
            return
        self._line(True, name)

    def pytest_unconfigure(self, config):
        self.out.close()
