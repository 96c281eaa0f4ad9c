"""pytest configuration for forkload's Python module.

`import forkload` comes from the build tree: the test driver puts
<builddir>/python first on PYTHONPATH and runs Debian's /usr/bin/python3 (the
interpreter with torch and numpy).  Every test ends with a clean teardown: no
child process of this process left (a worker not ended, or ended and never
reaped) and no new forkload name of this process in /dev/shm.  Nothing
here needs torch: without it (numpy alone, tools/numpy-check.sh) the
modules that import it are skipped, and the rest run.
"""

import faulthandler
import gc
import os
import signal
import sys
import time

import pytest

import forkload  # noqa: F401  (fails the whole run at once when the module is missing)

from proc_helpers import Gate, children, forkload_names

TEARDOWN_LIMIT_S = 10.0



def _stack_on_sigusr2():
    """tests/python_test.sh has timeout(1) send SIGUSR2 to pytest and every
    process under it before it kills a hung run: each writes its Python
    stack to a file of its own in $FL_PYTEST_STACKS (else to stderr)."""
    where = os.environ.get("FL_PYTEST_STACKS")
    out = sys.__stderr__
    if where:
        out = open(os.path.join(where, "stack.%d" % os.getpid()), "w")
    faulthandler.register(signal.SIGUSR2, file=out, all_threads=True)
    return out


_stacks = [_stack_on_sigusr2()]
os.register_at_fork(after_in_child=lambda: _stacks.append(_stack_on_sigusr2()))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.call_failed = report.failed


@pytest.fixture(autouse=True)
def clean_teardown(request):
    names_before = forkload_names()
    yield
    # A failed test's traceback holds its loaders (and their workers) until
    # the end of the run: end them without waiting and without a second
    # report.
    failed = getattr(request.node, "call_failed", False)
    deadline = time.monotonic() + (0 if failed else TEARDOWN_LIMIT_S)
    while True:
        kids = children()
        new_names = forkload_names() - names_before
        if not kids and not new_names:
            return
        if time.monotonic() > deadline:
            break
        # Iterators caught in reference cycles (a traceback that holds its
        # frame) are only finalised by the collector.
        gc.collect()
        time.sleep(0.02)
    # Report, then clean up after the test so that the next one starts clean.
    for pid in kids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        except Exception:  # a loader's own SIGCHLD handler may raise here
            pass
    if failed:
        return
    problems = []
    if kids:
        problems.append("child processes left after the test: %s" % sorted(kids.items()))
    if new_names:
        problems.append("forkload names left in /dev/shm: %s" % sorted(new_names))
    pytest.fail("; ".join(problems), pytrace=False)


@pytest.fixture
def index_dataset():
    """20 samples {'x': float32 [i, -i, i/2], 'i': i, 'w': worker id}."""
    from loader_helpers import IndexDataset  # needs torch, as the tests that ask
    return IndexDataset(20)


@pytest.fixture
def pid_dataset():
    """40 samples, each the pid of the process that read it."""
    from loader_helpers import PidDataset  # needs torch, as the tests that ask
    return PidDataset(40)


@pytest.fixture
def sharded_iterable():
    """An IterableDataset of 0..22 split unevenly over the workers."""
    from loader_helpers import ShardedIterable  # needs torch, as the tests that ask
    return ShardedIterable(23)


@pytest.fixture
def gate(tmp_path):
    """A file a slow sample waits on; the test opens it."""
    return Gate(tmp_path)
