"""What forkload's Python tests share that needs no torch: a gate a worker
waits on, the processes and /dev/shm names a loader leaves behind, and a
dataset whose sample i is fn(i).
conftest.py's teardown checks use them under numpy alone (CPython 3.10,
3.12 and 3.13 in CI, where PyPI has no CPU torch), where every test module
that needs torch is skipped; loader_helpers gives them to those modules.
"""

import os
import sys
import time

SHM_DIR = "/dev/shm"


class Fn:
    """Sample i is fn(i): a map-style dataset without torch's classes."""

    def __init__(self, n, fn):
        self.n = n
        self.fn = fn

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.fn(i)


# --------------------------------------------------------------------------
# A gate a worker waits on, opened by the test (a file: no timing assumption)
# --------------------------------------------------------------------------

class Gate:
    def __init__(self, directory, name="gate"):
        self.path = os.path.join(str(directory), name)

    def open(self):
        with open(self.path, "w"):
            pass

    def is_open(self):
        return os.path.exists(self.path)

    def wait(self, limit):
        """In a worker: waits until the gate is open or `limit` seconds have
        passed; True when it was opened."""
        deadline = time.monotonic() + limit
        while not os.path.exists(self.path):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True


# --------------------------------------------------------------------------
# Processes and names
# --------------------------------------------------------------------------

def proc_stat(pid):
    """(state, ppid) of pid from /proc, or None when there is no such
    process."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    rest = s[s.rindex(")") + 2:].split()
    return rest[0], int(rest[1])


def children(pid=None):
    """{child pid: state} of every process whose parent is pid (this process
    by default), zombies included; torch's reference interpreter, which
    serves every test (torch_side), left out."""
    if pid is None:
        pid = os.getpid()
    # Where a test module has loaded loader_helpers (torch's side).
    helpers = sys.modules.get("loader_helpers")
    reference = helpers.reference_pid() if helpers is not None else None
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is not None and st[1] == pid and int(name) != reference:
            kids[int(name)] = st[0]
    return kids


def is_gone(pid, parent=None):
    """pid has exited and been reaped, or (its parent gone) it is a zombie
    that whoever adopted it has not reaped yet, or the pid is now another
    process's."""
    st = proc_stat(pid)
    if st is None:
        return True
    if st[0] == "Z" and (parent is None or st[1] != parent):
        return True
    return parent is not None and st[1] != parent


def wait_until(cond, limit, step=0.01):
    deadline = time.monotonic() + limit
    while True:
        if cond():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(step)


def forkload_names(owner=None):
    """forkload's names in /dev/shm owned by the process `owner` (this one by
    default): forkload.<owner pid>.<...>.  Other processes on the machine
    (another test run) have names of their own; a name of forkload's form
    that cannot be read back is counted as ours."""
    if owner is None:
        owner = os.getpid()
    found = set()
    try:
        names = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return found
    for name in names:
        if "forkload" not in name:
            continue
        parts = name.split(".")
        if len(parts) >= 2 and parts[0] == "forkload" and parts[1].isdigit():
            if int(parts[1]) != owner:
                continue
        found.add(name)
    return found
