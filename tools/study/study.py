"""make study: forkload and PyTorch's DataLoader run out of fds and memory.

Sweeps both loaders under identical limits, the consumer holding every
batch until a call fails (`forkload exhaust`; torch_side.py exhaust):

  fd      RLIMIT_NOFILE 64..1024, in a private 1 GiB /dev/shm
  fill    RLIMIT_NOFILE 1024, every fd but 0..256 taken once the workers
          run (exhaust --fill-fds; a program with many open files)
  shm     a private /dev/shm of 16..128 MB, RLIMIT_NOFILE 1024
  cow     a 1 GB dataset in the parent as many small objects, 1, 2 and 4
          workers, one epoch: USS and PSS from /proc/PID/smaps_rollup
  kill    the parent SIGKILLed mid-epoch, 20 times per configuration:
          processes and /dev/shm names left behind

and runs forkload's own examples of each limit (the transcripts of the
report), then writes study.csv, PNG plots (gnuplot) and report.md, the
study's guide with this run's figures, to --out.  forkload's memory guard
is --max-bytes 2 GiB, where memory alone would stop it: no run here can
hold more of the machine's memory than that, or 1 GiB of /dev/shm.  Every
child runs in its own session under RLIMIT_FSIZE (SIGXFSZ ignored: segments
are files) and a timeout; each /dev/shm it fills is a private tmpfs made
with `unshare -m` (root), so that no run can fill the machine's memory or
leave a name on it.  Without root those rows are skipped with the reason,
and without python3-torch (or gnuplot) the PyTorch rows (or the plots) are.

`forkload doctor --json`, run with each forkload row's options and limits,
gives the row's predicted batches held (max_held of the binding limit);
where there is no doctor the prediction is left empty.

This file is also its own helper: `study.py kill-trials ...` is the process
that kills one configuration's parents, run inside the private /dev/shm.
"""

import argparse
import csv
import ctypes
import json
import os
import platform
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_SIDE = os.path.join(HERE, "torch_side.py")

FD_LIMITS = (64, 128, 256, 512, 1024)
FD_SWEEP_SHM_MB = 1024  # above 1024 held segments: the fd limit binds
FILL_LEFT = (0, 1, 16, 64, 256)  # fds left free under RLIMIT_NOFILE 1024
# The memory guard of every forkload row: memfd segments are charged to
# neither fds nor /dev/shm, so only memory would stop them.
MAX_BYTES = 2 << 30
SHM_SIZES_MB = (16, 32, 64, 128)
SHM_SWEEP_FD_LIMIT = 1024  # the usual soft RLIMIT_NOFILE
COW_WORKERS = (1, 2, 4)
COW_SAMPLES = 81920  # x 12,288 bytes: 1.0 GB
COW_SHM_MB = 256
KILL_SHM_MB = 256
KILL_DELAY_S = (0.1, 0.4)  # after the first worker starts
KILL_GRACE_S = 1.0  # for the workers to notice that the parent is gone
TEARDOWN_S = 3.0  # for a name manager to sweep once its clients are gone
CHILD_TIMEOUT_S = 90
FSIZE_LIMIT = 64 << 20  # a segment is 790,528 bytes
PR_SET_CHILD_SUBREAPER = 36

# Each configuration: (label, forkload options or PyTorch strategy).
FORKLOAD_CONFIGS = (
    ("fd memfd", ["--sharing", "fd"]),
    ("fd /dev/shm", ["--sharing", "fd", "--fd-in-dev-shm"]),
    ("fs", ["--sharing", "fs"]),
)
TORCH_CONFIGS = (
    ("file_descriptor", "file_descriptor"),
    ("file_system", "file_system"),
)
# Configurations that a /dev/shm bounds, not the fd limit: without a
# private one they would fill the machine's.
UNBOUNDED_BY_FDS = ("fs", "file_system", "fd /dev/shm")

COLUMNS = ("experiment", "loader", "strategy", "limit", "held", "fds",
           "bytes", "error_name", "error", "recovered", "recovery",
           "left_names", "left_procs", "predicted", "binding", "workers",
           "uss_parent_mb", "pss_parent_mb", "uss_workers_mb",
           "pss_workers_mb", "uss_tree_mb", "pss_tree_mb", "trial",
           "delay_ms", "names_after", "procs_after", "names_after_cleanup",
           "seconds", "guard", "fds_free", "note")

# Runs "$@" in /dev/shm, a private tmpfs of $1 MB when $1 is set, then
# names what it left there: what its own cleanup removes within 3 s is not
# left behind.
SHM_WRAPPER = r"""
size=$1; shift
if [ -n "$size" ]; then
  mount -t tmpfs -o "size=${size}m" study /dev/shm || exit 97
fi
before=$(ls /dev/shm)
"$@"
rc=$?
i=0
while :; do
  left=$(ls /dev/shm | grep -vxF -e "$before")
  if [ -z "$left" ] || [ $i -ge 30 ]; then break; fi
  sleep 0.1
  i=$((i + 1))
done
echo "study-left:" $left >&2
exit $rc
"""


def log(msg):
    print("study: %s" % msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------ processes


def children(pid):
    """pids of pid's children (all threads')."""
    out = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return out


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def proc_state(pid):
    """(state letter, command name), or None once it is reaped."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    name = stat[stat.index("(") + 1:stat.rindex(")")]
    return stat[stat.rindex(")") + 2], name


def alive(pids):
    """The pids among these that run (not zombies), as 'name[pid]'."""
    out = []
    for pid in pids:
        st = proc_state(pid)
        if st is not None and st[0] != "Z":
            out.append("%s[%d]" % (st[1], pid))
    return out


def reap_all():
    """SIGKILLs and reaps every process under this one (a subreaper, so
    the orphans of the runs are its children); returns those that were
    still running."""
    left = alive(descendants(os.getpid()))
    while True:
        # An orphan reparented since the last look is killed next round.
        for pid in children(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return left


def settle(seconds):
    """Waits up to seconds for the processes under this one to end."""
    deadline = time.monotonic() + seconds
    while alive(descendants(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.05)


def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def limits(fd_limit):
    """A preexec function: the row's fd limit (soft, as `ulimit -Sn`), the
    file-size cap, and SIGXFSZ ignored so that a cap is EFBIG, not death."""
    def apply():
        if fd_limit is not None:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, hard))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return apply


class Run:
    """One child under a row's limits, in its own session and /dev/shm."""

    def __init__(self, argv, fd_limit, shm_mb, stdin=None):
        wrapper = ["sh", "-c", SHM_WRAPPER, "sh",
                   "" if shm_mb is None else str(shm_mb)]
        if shm_mb is not None:
            wrapper = ["unshare", "-m", "--propagation", "private"] + wrapper
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            wrapper + argv, stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, preexec_fn=limits(fd_limit),
            start_new_session=True)

    def finish(self, timeout=CHILD_TIMEOUT_S):
        """Waits; returns (rc or None on timeout, stdout, stderr, names
        left in /dev/shm, processes left behind, seconds)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
            rc = self.proc.returncode
        except subprocess.TimeoutExpired:
            # All of it: a process that left the session may hold the
            # pipes open.
            reap_all()
            out, err = self.proc.communicate()
            rc = None
        seconds = time.monotonic() - self.start
        # A process that ends on its own soon after is not left behind.
        settle(TEARDOWN_S)
        procs = reap_all()
        out, err = out.decode(errors="replace"), err.decode(errors="replace")
        names = []
        lines = []
        for line in err.splitlines():
            if line.startswith("study-left:"):
                names = line.split()[1:]
            else:
                lines.append(line)
        return rc, out, "\n".join(lines), names, procs, seconds


def run(argv, fd_limit, shm_mb, timeout=CHILD_TIMEOUT_S):
    return Run(argv, fd_limit, shm_mb).finish(timeout)


def last_json(out):
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# ------------------------------------------------------------ probes


class Machine:
    """What this machine lets the study do, with the reasons."""

    def __init__(self, args):
        self.forkload = os.path.abspath(args.forkload)
        self.cow = os.path.abspath(args.cow)
        self.python = args.python
        self.private_shm, self.shm_why = self.probe_shm()
        self.torch, self.torch_why = self.probe_torch()
        self.gnuplot = shutil.which("gnuplot")

    @staticmethod
    def probe_shm():
        if os.geteuid() != 0:
            return False, ("a private /dev/shm needs root, for unshare -m "
                           "and mount")
        rc, _, err, _, _, _ = run(["true"], None, 1, timeout=30)
        if rc != 0:
            return False, ("unshare -m and a tmpfs on /dev/shm failed: %s"
                           % (err.strip() or "exit %s" % rc))
        return True, ""

    def probe_torch(self):
        try:
            p = subprocess.run(
                [self.python, "-c", "import numpy, torch; "
                 "print(torch.__version__)"], capture_output=True,
                text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, "%s cannot import torch: %s" % (self.python, exc)
        if p.returncode != 0:
            return None, ("%s cannot import torch (python3-torch): %s"
                          % (self.python, p.stderr.strip().splitlines()[-1]))
        return p.stdout.strip(), ""


# ------------------------------------------------------------ rows


def row(**kw):
    r = dict.fromkeys(COLUMNS, "")
    r.update(kw)
    return r


def predict(m, options, fd_limit, shm_mb):
    """forkload doctor's max_held for the binding limit, and its name."""
    rc, out, _, _, _, _ = run([m.forkload, "doctor"] + options + ["--json"],
                              fd_limit, shm_mb, timeout=30)
    doc = last_json(out) if rc == 0 else None
    if not doc or "items" not in doc:
        return "", ""
    for item in doc["items"]:
        if item.get("resource") == doc.get("binding"):
            held = item.get("max_held")
            if held is None or held >= 2 ** 64 - 1:
                return "none", doc["binding"]
            return held, doc["binding"]
    return "", doc.get("binding", "")


def forkload_exhaust(m, experiment, label, options, limit, fd_limit, shm_mb,
                     extra=()):
    rc, out, err, names, procs, secs = run(
        [m.forkload, "exhaust"] + options + list(extra) +
        ["--max-bytes", str(MAX_BYTES), "--json"], fd_limit, shm_mb)
    res = last_json(out)
    # doctor cannot see the fds another library will take.
    predicted, binding = ("", "") if extra else predict(m, options,
                                                          fd_limit, shm_mb)
    r = row(experiment=experiment, loader="forkload", strategy=label,
            limit=limit, predicted=predicted, binding=binding,
            left_names=" ".join(names), left_procs=" ".join(procs),
            seconds="%.1f" % secs)
    if res is None:
        r["note"] = ("no result: %s" % ("timed out" if rc is None else
                                        "exit %s: %s" % (rc, err.strip())))
        return r
    r.update(held=res["batches_held"], fds=res["fds"],
             bytes=res["bytes_mapped"], error_name=res["error_name"] or "",
             error=res["error_message"] or "",
             fds_free="" if res.get("fds_free") is None else res["fds_free"],
             guard=res["guard_max_held"] if res["stopped_by_guard"] else "")
    if res.get("recovered") is not None:
        r["recovered"] = "yes" if res["recovered"] else "no"
    if err.strip():
        r["note"] = err.strip()
    return r


def torch_exhaust(m, experiment, label, strategy, limit, fd_limit, shm_mb,
                  extra=()):
    rc, out, err, names, procs, secs = run(
        [m.python, TORCH_SIDE, "exhaust", "--strategy", strategy] +
        list(extra), fd_limit, shm_mb)
    res = last_json(out)
    r = row(experiment=experiment, loader="pytorch", strategy=label,
            limit=limit, left_names=" ".join(names),
            left_procs=" ".join(procs), seconds="%.1f" % secs)
    if res is None:
        tail = err.strip().splitlines()[-1:] or [""]
        r["note"] = ("no result: %s" % ("timed out" if rc is None else
                                        "exit %s: %s" % (rc, tail[0])))
        return r
    r.update(held=res["batches_held"],
             fds="" if res["fds"] is None else res["fds"],
             bytes=res["bytes_held"], error_name=res["error_name"],
             error=res["error_message"],
             recovered="yes" if res["recovered"] else "no",
             recovery=res["recovery"],
             fds_free="" if res.get("fds_free") is None else res["fds_free"])
    return r


def sweep(m, experiment, limits_, fd_limit_of, shm_of, skip,
          extra=lambda _: ()):
    rows = []
    for limit in limits_:
        fd_limit, shm_mb = fd_limit_of(limit), shm_of(limit)
        for label, options in FORKLOAD_CONFIGS:
            why = skip(label)
            if why:
                rows.append(row(experiment=experiment, loader="forkload",
                                strategy=label, limit=limit, note=why))
                continue
            rows.append(forkload_exhaust(m, experiment, label, options,
                                         limit, fd_limit, shm_mb,
                                         extra(limit)))
            log("%s %s forkload %s: %s held" % (experiment, limit, label,
                                                rows[-1]["held"]))
        for label, strategy in TORCH_CONFIGS:
            why = m.torch_why or skip(label)
            if why:
                rows.append(row(experiment=experiment, loader="pytorch",
                                strategy=label, limit=limit, note=why))
                continue
            rows.append(torch_exhaust(m, experiment, label, strategy, limit,
                                      fd_limit, shm_mb, extra(limit)))
            log("%s %s pytorch %s: %s held" % (experiment, limit, label,
                                               rows[-1]["held"]))
    return rows


def skip_unbounded(m):
    def skip(label):
        if label in UNBOUNDED_BY_FDS and not m.private_shm:
            return ("skipped: the fd limit does not bound it, and %s"
                    % m.shm_why)
        return ""
    return skip


def fd_sweep(m):
    return sweep(m, "fd", FD_LIMITS, lambda n: n,
                 lambda n: FD_SWEEP_SHM_MB if m.private_shm else None,
                 skip_unbounded(m))


def fill_sweep(m):
    """The rest of the process holds every fd but N once the workers run."""
    return sweep(m, "fill", FILL_LEFT, lambda _: SHM_SWEEP_FD_LIMIT,
                 lambda _: FD_SWEEP_SHM_MB if m.private_shm else None,
                 skip_unbounded(m), lambda n: ["--fill-fds", str(n)])


def shm_sweep(m):
    def skip(_):
        return "" if m.private_shm else "skipped: " + m.shm_why
    return sweep(m, "shm", SHM_SIZES_MB, lambda _: SHM_SWEEP_FD_LIMIT,
                 lambda mb: mb, skip)


# ------------------------------------------------------------ memory


def smaps_mb(pid):
    """(USS, PSS) in MB from /proc/PID/smaps_rollup."""
    fields = {}
    with open("/proc/%d/smaps_rollup" % pid) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    return uss / 1024.0, fields["Pss"] / 1024.0


def cow_one(m, loader, workers):
    if loader == "forkload":
        argv = [m.cow, str(workers), str(COW_SAMPLES)]
    else:
        argv = [m.python, TORCH_SIDE, "cow", "--workers", str(workers),
                "--samples", str(COW_SAMPLES)]
    shm_mb = COW_SHM_MB if m.private_shm else None
    child = Run(argv, SHM_SWEEP_FD_LIMIT, shm_mb, stdin=subprocess.PIPE)
    r = row(experiment="cow", loader=loader,
            strategy="fd memfd" if loader == "forkload" else
            "file_descriptor", workers=workers)
    ready, _, _ = select.select([child.proc.stdout], [], [], CHILD_TIMEOUT_S)
    line = child.proc.stdout.readline() if ready else b""
    try:
        pid = json.loads(line)["pid"]
        parent = smaps_mb(pid)
        each = [smaps_mb(w) for w in children(pid)]
    except (ValueError, KeyError, OSError) as exc:
        r["note"] = "no measurement: %s" % exc
        each, parent = None, None
    rc, _, err, _, _, secs = child.finish()
    r["seconds"] = "%.1f" % secs
    if each is None or rc != 0:
        r["note"] = r["note"] or "exit %s: %s" % (rc, err.strip())
        return r
    r.update(uss_parent_mb="%.1f" % parent[0],
             pss_parent_mb="%.1f" % parent[1],
             uss_workers_mb=" ".join("%.1f" % u for u, _ in each),
             pss_workers_mb=" ".join("%.1f" % p for _, p in each),
             uss_tree_mb="%.1f" % (parent[0] + sum(u for u, _ in each)),
             pss_tree_mb="%.1f" % (parent[1] + sum(p for _, p in each)))
    return r


def cow(m):
    rows = []
    for workers in COW_WORKERS:
        for loader in ("forkload", "pytorch"):
            if loader == "pytorch" and m.torch_why:
                rows.append(row(experiment="cow", loader=loader,
                                workers=workers, note=m.torch_why))
                continue
            rows.append(cow_one(m, loader, workers))
            log("cow %d workers %s: worker USS %s MB" % (
                workers, loader, rows[-1]["uss_workers_mb"]))
    return rows


# ------------------------------------------------------------ kills

KILL_CONFIGS = (
    ("forkload", "fd memfd", ["--sharing", "fd"]),
    ("forkload", "fs", ["--sharing", "fs"]),
    ("forkload", "fs no_reuse", ["--sharing", "fs", "--no-reuse"]),
    ("pytorch", "file_descriptor", "file_descriptor"),
    ("pytorch", "file_system", "file_system"),
)
PREFIX = {"forkload": "forkload.", "pytorch": "torch_"}


def shm_names(prefix):
    return {n for n in os.listdir("/dev/shm") if n.startswith(prefix)}


def wait_for_worker(pid, timeout):
    deadline = time.monotonic() + timeout
    while not children(pid):
        if time.monotonic() > deadline:
            raise RuntimeError("the loader forked no worker in %d s"
                               % timeout)
        time.sleep(0.005)


def start_parent(a):
    """Starts a training loop in a session of its own; returns its pid
    once it has forked its first worker."""
    if a.loader == "forkload":
        pid = subprocess.Popen(
            [a.forkload, "run", "--epochs", "1000000", "--quiet"] +
            a.options, stdout=subprocess.DEVNULL, start_new_session=True).pid
    else:
        sys.path.insert(0, HERE)
        import torch_side  # noqa: E402 - only this helper needs torch
        pid = os.fork()
        if pid == 0:
            os.setsid()
            try:
                torch_side.kill_child(a.options[0])
            finally:
                os._exit(1)
    wait_for_worker(pid, 60)
    return pid


def kill_trial(a, rng):
    before = shm_names(PREFIX[a.loader])
    pid = start_parent(a)
    delay = rng.uniform(*KILL_DELAY_S)
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    settle(KILL_GRACE_S)  # for the orphans, ours now, to notice
    procs = alive(descendants(os.getpid()))
    names = shm_names(PREFIX[a.loader]) - before
    # Then what `kill -9` of the job's process group does; a process that
    # left the group (torch_shm_manager: setsid) gets the time to sweep.
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    settle(TEARDOWN_S)
    after = shm_names(PREFIX[a.loader]) - before
    survivors = reap_all()
    cleaned = None
    if a.loader == "forkload":
        subprocess.run([a.forkload, "cleanup"], stdout=subprocess.DEVNULL,
                       timeout=30, check=True)
        cleaned = sorted(shm_names(PREFIX[a.loader]) - before)
    if a.private_shm:
        for n in after | names:
            try:
                os.unlink(os.path.join("/dev/shm", n))
            except FileNotFoundError:
                pass
    return {"delay_ms": round(delay * 1000), "procs": procs,
            "names": sorted(names), "after": sorted(after),
            "survivors": survivors, "cleaned": cleaned}


def kill_trials_main(argv):
    """The helper: kills a configuration's parents, one JSON line each."""
    p = argparse.ArgumentParser(prog="study.py kill-trials")
    p.add_argument("--loader", choices=("forkload", "pytorch"), required=True)
    p.add_argument("--forkload")
    p.add_argument("--trials", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--private-shm", action="store_true")
    p.add_argument("options", nargs="*")
    a = p.parse_args(argv)
    become_subreaper()
    rng = random.Random(a.seed)
    for _ in range(a.trials):
        print(json.dumps(kill_trial(a, rng)), flush=True)
    return 0


def kills(m, trials):
    rows = []
    for seed, (loader, label, options) in enumerate(KILL_CONFIGS):
        base = row(experiment="kill", loader=loader, strategy=label)
        why = m.torch_why if loader == "pytorch" else ""
        if not why and label not in ("fd memfd", "file_descriptor") \
                and not m.private_shm:
            why = ("skipped: it would leave names on the machine's "
                   "/dev/shm, and %s" % m.shm_why)
        if why:
            rows.append(dict(base, note=why))
            continue
        if loader == "pytorch":
            options = [options]
        argv = [m.python, os.path.abspath(__file__), "kill-trials",
                "--loader", loader, "--forkload", m.forkload, "--trials",
                str(trials), "--seed", str(seed)]
        if m.private_shm:
            argv.append("--private-shm")
        rc, out, err, _, _, secs = run(
            argv + ["--"] + options, SHM_SWEEP_FD_LIMIT,
            KILL_SHM_MB if m.private_shm else None,
            timeout=CHILD_TIMEOUT_S + trials * 10)
        results = [json.loads(x) for x in out.splitlines()
                   if x.startswith("{")]
        if rc != 0 or len(results) != trials:
            rows.append(dict(base, note="exit %s after %d trials: %s" % (
                rc, len(results), err.strip()[-300:])))
        for i, res in enumerate(results):
            rows.append(dict(base, trial=i + 1, delay_ms=res["delay_ms"],
                             left_procs=" ".join(res["procs"]),
                             left_names=" ".join(res["names"]),
                             names_after=" ".join(res["after"]),
                             procs_after=" ".join(res["survivors"]),
                             names_after_cleanup="" if res["cleaned"] is None
                             else len(res["cleaned"])))
        log("kill %s %s: %d trials in %.0f s" % (loader, label, len(results),
                                                 secs))
    return rows


# ------------------------------------------------------------ transcripts

# forkload's own words at each limit, as a user runs it: (key, the command
# as shown, argv after the binary, RLIMIT_NOFILE, private /dev/shm MB).
TRANSCRIPTS = (
    ("fd", "ulimit -n 128; forkload exhaust --sharing fd --max-bytes %d"
     % MAX_BYTES, ["exhaust", "--sharing", "fd", "--max-bytes",
                   str(MAX_BYTES)], 128, None),
    ("fill", "ulimit -n 1024; forkload exhaust --sharing fd --fill-fds 0",
     ["exhaust", "--sharing", "fd", "--fill-fds", "0", "--max-bytes",
      str(MAX_BYTES)], 1024, None),
    ("maps", "forkload exhaust --sharing fd --samples 200000 "
     "--sample-bytes 8 --batch-size 1 --max-bytes 1073741824",
     ["exhaust", "--sharing", "fd", "--samples", "200000", "--sample-bytes",
      "8", "--batch-size", "1", "--max-bytes", "1073741824"], 1024, None),
    ("shm-fs", "unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs "
     "/dev/shm && forkload exhaust --sharing fs'",
     ["exhaust", "--sharing", "fs"], 1024, 64),
    ("shm-fd", "unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs "
     "/dev/shm && forkload exhaust --sharing fd --fd-in-dev-shm'",
     ["exhaust", "--sharing", "fd", "--fd-in-dev-shm"], 1024, 64),
    ("doctor", "forkload doctor --fd-limit 128", ["doctor", "--fd-limit",
                                                  "128"], None, None),
)


def transcripts(m):
    """{key: the command and what it printed, as an indented block}."""
    out = {}
    for key, shown, argv, fd_limit, shm_mb in TRANSCRIPTS:
        if shm_mb is not None and not m.private_shm:
            out[key] = "    (not run: %s)" % m.shm_why
            continue
        rc, text, err, _, _, _ = run([m.forkload] + argv, fd_limit, shm_mb)
        lines = ["$ " + shown] + (text + err).rstrip().splitlines()
        out[key] = "\n".join("    " + x for x in lines)
        log("transcript %s: exit %s" % (key, rc))
    return out


# ------------------------------------------------------------ output


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)


def series(rows, experiment):
    """{line title: [(limit, held, predicted)]} in plot order."""
    out = {}
    for r in rows:
        if r["experiment"] != experiment or r["held"] == "":
            continue
        title = "%s %s" % (r["loader"], r["strategy"])
        out.setdefault(title, []).append((r["limit"], r["held"],
                                          r["predicted"]))
    return out


def gnuplot(path, settings, plots):
    script = """set terminal pngcairo size 900,560 font ',10'
set termoption noenhanced
set output '%s'
set grid
%s
plot %s
""" % (path, settings, ", \\\n  ".join(plots))
    subprocess.run(["gnuplot"], input=script, text=True, check=True,
                   timeout=60)


def write_dat(path, points):
    with open(path, "w") as f:
        for point in points:
            f.write(" ".join(str(v) for v in point) + "\n")
    return path


def plot_held(rows, experiment, path, xlabel, limits_, tmp, log_x=True):
    """Batches held at failure against the limit on log-log axes, where
    the fd lines are straight (or, log_x false, against the limits in
    order): forkload solid, PyTorch dashed, forkload's prediction dotted in
    its strategy's colour."""
    def x_of(x):
        return x if log_x else limits_.index(x)
    plots = []
    for i, (title, points) in enumerate(series(rows, experiment).items()):
        dat = write_dat(os.path.join(tmp, "%s-%d.dat" % (experiment, i)),
                        [(x_of(x), held) for x, held, _ in points])
        plots.append("'%s' using 1:2 with linespoints lw 2 dt %d pt %d "
                     "lc %d title '%s'" % (dat, 2 if "pytorch" in title
                                           else 1, i + 4, i + 1, title))
        predicted = [(x_of(x), p) for x, _, p in points
                     if p not in ("", "none")]
        if predicted:
            pdat = write_dat(dat + ".pred", predicted)
            plots.append("'%s' using 1:2 with linespoints lw 1 dt 3 pt 1 "
                         "lc %d title '%s, predicted'" % (pdat, i + 1,
                                                          title))
    if plots and log_x:
        gnuplot(path, """set key bottom right
set logscale xy 2
set xlabel '%s'
set xtics (%s)
set xrange [%g:%g]
set ylabel 'batches held at failure'""" % (
            xlabel, ",".join(map(str, limits_)), limits_[0] * 0.9,
            limits_[-1] * 1.1), plots)
    elif plots:
        gnuplot(path, """set key center right
set xlabel '%s'
set xtics (%s)
set xrange [-0.2:%g]
set yrange [0:*]
set ylabel 'batches held at failure'""" % (
            xlabel, ",".join('"%s" %d' % (x, i)
                             for i, x in enumerate(limits_)),
            len(limits_) - 0.8), plots)


def mean(values):
    values = [float(v) for v in values.split()]
    return sum(values) / len(values)


def plot_cow(rows, path, tmp):
    plots = []
    for i, loader in enumerate(("forkload", "pytorch")):
        points = [(r["workers"], "%.1f" % mean(r["uss_workers_mb"]),
                   "%.1f" % mean(r["pss_workers_mb"])) for r in rows
                  if r["experiment"] == "cow" and r["loader"] == loader
                  and r["uss_workers_mb"]]
        if not points:
            continue
        dat = write_dat(os.path.join(tmp, "cow-%s.dat" % loader), points)
        plots.append("'%s' using 1:2 with linespoints lw 2 pt 7 lc %d "
                     "title '%s USS per worker'" % (dat, i + 1, loader))
        plots.append("'%s' using 1:3 with linespoints lw 2 dt 2 pt 6 lc %d "
                     "title '%s PSS per worker'" % (dat, i + 1, loader))
    if plots:
        gnuplot(path, """set key top right
set xlabel 'workers'
set xtics (1,2,4)
set xrange [0.5:4.5]
set logscale y
set yrange [0.05:*]
set ylabel 'MB per worker, from /proc/PID/smaps_rollup'""", plots)


def plots(m, rows, out):
    if not m.gnuplot:
        return ("No plots: gnuplot is not installed "
                "(sh tools/setup.sh --study).")
    with tempfile.TemporaryDirectory() as tmp:
        plot_held(rows, "fd", os.path.join(out, "fd-limit.png"),
                  "RLIMIT_NOFILE (private /dev/shm of %d MB)"
                  % FD_SWEEP_SHM_MB, FD_LIMITS, tmp)
        plot_held(rows, "fill", os.path.join(out, "fill-fds.png"),
                  "fds left free once the workers run (RLIMIT_NOFILE %d, "
                  "private /dev/shm of %d MB)" % (SHM_SWEEP_FD_LIMIT,
                                                  FD_SWEEP_SHM_MB),
                  FILL_LEFT, tmp, log_x=False)
        plot_held(rows, "shm", os.path.join(out, "dev-shm.png"),
                  "size of the private /dev/shm, MB (RLIMIT_NOFILE %d)"
                  % SHM_SWEEP_FD_LIMIT, SHM_SIZES_MB, tmp)
        plot_cow(rows, os.path.join(out, "cow.png"), tmp)
    return ""


def held_table(rows, experiment, unit):
    configs = []
    for r in rows:
        key = (r["loader"], r["strategy"])
        if r["experiment"] == experiment and key not in configs:
            configs.append(key)
    limits_ = sorted({r["limit"] for r in rows
                      if r["experiment"] == experiment})
    cell = {}
    for r in rows:
        if r["experiment"] == experiment:
            v = str(r["held"]) if r["held"] != "" else \
                "skipped" if r["note"].startswith("skipped") else "failed"
            if r["guard"] != "":
                v += " (guard)"
            elif r["predicted"] != "":
                v += " (%s)" % r["predicted"]
            cell[(r["loader"], r["strategy"], r["limit"])] = v
    out = ["| %s | %s |" % (unit, " | ".join("%s %s" % c for c in configs)),
           "|---:|" + "---:|" * len(configs)]
    for limit in limits_:
        out.append("| %s | %s |" % (limit, " | ".join(
            cell.get(c + (limit,), "") for c in configs)))
    return "\n".join(out)


def shape(text):
    """A message without its counts and pids, to group alike ones."""
    return " ".join(w for w in text.split()
                    if not any(ch.isdigit() for ch in w))


def grouped(rs, text):
    """'text (limits); ...' for each distinct shape of text(row)."""
    groups = {}
    for r in rs:
        groups.setdefault(shape(text(r)), []).append(r)
    return "; ".join("%s (%s)" % (text(g[0]) or "nothing",
                                  ", ".join(str(r["limit"]) for r in g))
                     for g in groups.values())


def error_table(rows, experiment):
    """Each configuration's errors, alike ones grouped with the limits
    they came at, and what releasing the batches gave."""
    seen = {}
    for r in rows:
        if r["experiment"] == experiment and r["held"] != "":
            key = (r["loader"], r["strategy"],
                   shape(r["error_name"] + " " + r["error"]))
            seen.setdefault(key, []).append(r)
    out = ["| loader | strategy | error (limits) | after releasing the "
           "batches | left behind |", "|---|---|---|---|---|"]
    for (loader, strategy, _), rs in seen.items():
        out.append("| %s | %s | %s | %s | %s |" % (
            loader, strategy,
            md(grouped(rs, lambda r: "%s: %s" % (r["error_name"],
                                                 r["error"])
                       if r["error_name"] else
                       "none: the memory guard stopped it at %s batches, "
                       "the loader holding %s fds" % (r["held"], r["fds"]))),
            md(grouped(rs, lambda r: r["recovered"] + (
                ": " + r["recovery"] if r["recovery"] else ""))),
            md(grouped(rs, lambda r: " ".join(
                x for x in (r["left_names"], r["left_procs"]) if x)))))
    return "\n".join(out)


def md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def cow_table(rows):
    out = ["| workers | loader | worker USS, MB | worker PSS, MB | parent "
           "USS / PSS, MB | tree USS / PSS, MB |",
           "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        if r["experiment"] != "cow":
            continue
        if not r["uss_workers_mb"]:
            out.append("| %s | %s | %s | | | |" % (r["workers"], r["loader"],
                                                  md(r["note"])))
            continue
        out.append("| %s | %s | %s | %s | %s / %s | %s / %s |" % (
            r["workers"], r["loader"], r["uss_workers_mb"],
            r["pss_workers_mb"], r["uss_parent_mb"], r["pss_parent_mb"],
            r["uss_tree_mb"], r["pss_tree_mb"]))
    return "\n".join(out)


def kill_table(rows):
    out = ["| loader | strategy | trials | runs with processes left 1 s "
           "after: processes | runs with names left then: names | names "
           "after teardown | processes after teardown | names after "
           "`forkload cleanup` |", "|---|---|---:|---|---:|---:|---:|---:|"]
    configs = []
    for r in rows:
        if r["experiment"] == "kill" and (r["loader"], r["strategy"]) \
                not in configs:
            configs.append((r["loader"], r["strategy"]))
    for loader, strategy in configs:
        rs = [r for r in rows if r["experiment"] == "kill"
              and (r["loader"], r["strategy"]) == (loader, strategy)]
        trials = [r for r in rs if r["trial"] != ""]
        if not trials:
            out.append("| %s | %s | 0 | %s | | | | |" % (
                loader, strategy, md(rs[0]["note"])))
            continue

        def count(col):
            return sum(len(r[col].split()) for r in trials)

        def runs(col):
            return sum(1 for r in trials if r[col])
        kinds = {}
        for r in trials:
            for p in r["left_procs"].split():
                kinds[p.split("[")[0]] = kinds.get(p.split("[")[0], 0) + 1
        cleaned = [r["names_after_cleanup"] for r in trials
                   if r["names_after_cleanup"] != ""]
        out.append("| %s | %s | %d | %d: %s | %d: %d | %d | %d | %s |" % (
            loader, strategy, len(trials), runs("left_procs"),
            ", ".join("%d %s" % (n, k) for k, n in kinds.items()) or "0",
            runs("left_names"), count("left_names"), count("names_after"),
            count("procs_after"),
            sum(int(c) for c in cleaned) if cleaned else "n/a"))
    return "\n".join(out)


def predictions(rows):
    """How far forkload's stops lay past doctor's predictions, where a
    limit (not the guard) stopped it: a sentence."""
    gaps, off = [], []
    for r in rows:
        if r["loader"] != "forkload" or r["guard"] != "" or \
                not isinstance(r["predicted"], int) or r["held"] == "":
            continue
        gap = int(r["held"]) - r["predicted"]
        gaps.append(gap)
        if not 0 <= gap <= 2:
            off.append("%s %s %s: predicted %d, held %s" % (
                r["experiment"], r["limit"], r["strategy"], r["predicted"],
                r["held"]))
    if not gaps:
        return "No row had a prediction to check."
    text = ("In this run every one of the %d predictions was at or below "
            "where forkload stopped, by %d to %d batches" % (
                len(gaps), min(gaps), max(gaps)) if not off else
            "%d of the %d predictions missed by more than two batches: %s"
            % (len(off), len(gaps), "; ".join(off)))
    return text + "."


def guard_held(rows):
    held = sorted({r["guard"] for r in rows if r["guard"] != ""})
    return " and ".join(str(h) for h in held) or "(no row)"


def recovered(rows, loader):
    """'M of N': rows of loader with an error whose call after releasing
    delivered a batch."""
    rs = [r for r in rows if r["loader"] == loader and r["error_name"]
          and r["experiment"] in ("fd", "fill", "shm")]
    return "%d of %d" % (sum(r["recovered"] == "yes" for r in rs), len(rs))


def report(m, rows, out, seconds, plot_note, said):
    skipped = sorted({r["note"] for r in rows
                      if r["note"].startswith("skipped")})
    failed = ["%s %s %s %s: %s" % (r["experiment"], r["limit"], r["loader"],
                                   r["strategy"], r["note"]) for r in rows
              if r["held"] == "" and r["experiment"] in ("fd", "fill", "shm")
              and r["note"].startswith("no result")]
    with open(os.path.join(HERE, "report.md.in")) as f:
        template = f.read()
    values = {
        "date": time.strftime("%Y-%m-%d"), "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "memory_gb": "%.1f" % (os.sysconf("SC_PAGE_SIZE") *
                               os.sysconf("SC_PHYS_PAGES") / 1e9),
        "torch": m.torch or "(not installed)",
        "forkload": forkload_version(m), "seconds": "%.0f" % seconds,
        "no_private_shm": "" if m.private_shm else (
            "\n\nThis run had no private `/dev/shm` (%s): the rows it needs "
            "were skipped, and the others used the machine's `/dev/shm`."
            % m.shm_why),
        "max_bytes_gib": MAX_BYTES >> 30, "guard_held": guard_held(rows),
        "fd_shm_mb": FD_SWEEP_SHM_MB, "fd_limit": SHM_SWEEP_FD_LIMIT,
        "fd_table": held_table(rows, "fd", "fd limit"),
        "fd_errors": error_table(rows, "fd"),
        "fill_table": held_table(rows, "fill", "fds left free"),
        "fill_errors": error_table(rows, "fill"),
        "shm_table": held_table(rows, "shm", "/dev/shm MB"),
        "shm_errors": error_table(rows, "shm"),
        "predictions": predictions(rows),
        "forkload_recovered": recovered(rows, "forkload"),
        "torch_recovered": recovered(rows, "pytorch"),
        "cow_samples": COW_SAMPLES, "cow_table": cow_table(rows),
        "kill_from_ms": "%.0f" % (KILL_DELAY_S[0] * 1000),
        "kill_to_ms": "%.0f" % (KILL_DELAY_S[1] * 1000),
        "kill_grace_s": "%.0f" % KILL_GRACE_S,
        "teardown_s": "%.0f" % TEARDOWN_S, "kill_table": kill_table(rows),
        "plot_note": ("\n" + plot_note + "\n") if plot_note else "",
    }
    values.update(("said_" + k.replace("-", "_"), v)
                  for k, v in said.items())
    text = template.format(**values)
    if skipped:
        text += "\nRows skipped: %s.\n" % "; ".join(
            n[len("skipped: "):] for n in skipped)
    if failed:
        text += "\nRows that failed:\n\n%s\n" % "\n".join(
            "- " + md(f) for f in failed)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)


def forkload_version(m):
    p = subprocess.run([m.forkload, "--version"], capture_output=True,
                       text=True, timeout=30)
    return p.stdout.strip() or "forkload"


def main(argv):
    if argv[:1] == ["kill-trials"]:
        return kill_trials_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--forkload", required=True, help="examples/forkload")
    p.add_argument("--cow", required=True, help="tools/study/cow")
    p.add_argument("--out", required=True, help="the output directory")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="the Python that has torch (Debian's)")
    p.add_argument("--trials", type=int, default=20,
                   help="kills per configuration")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    become_subreaper()
    start = time.monotonic()
    m = Machine(args)
    for why in (m.shm_why, m.torch_why):
        if why:
            log("note: " + why)
    rows = []
    for part in (fd_sweep, fill_sweep, shm_sweep, cow):
        t0 = time.monotonic()
        rows += part(m)
        log("%s: %.0f s" % (part.__name__, time.monotonic() - t0))
    t0 = time.monotonic()
    rows += kills(m, args.trials)
    log("kills: %.0f s" % (time.monotonic() - t0))
    said = transcripts(m)
    seconds = time.monotonic() - start
    write_csv(os.path.join(args.out, "study.csv"), rows)
    note = plots(m, rows, args.out)
    report(m, rows, args.out, seconds, note, said)
    log("wrote %s/study.csv, report.md and plots in %.0f s" % (args.out,
                                                               seconds))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
