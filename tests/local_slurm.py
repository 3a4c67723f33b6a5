"""A real Slurm on localhost, for the cluster tests and benchmarks/cluster.py: one node
(:class:`LocalSlurm`), or two nodes on the same machine (:class:`TwoNodeSlurm`).

Debian's ``slurm-wlm`` and ``munge`` (tests/run installs them where it may use apt-get),
started by hand in a directory of their own: no systemd, nothing written under /etc. The
clients (srun, squeue, scancel...) find the cluster through SLURM_CONF, which
:meth:`LocalSlurm.start` returns; the daemons are stopped by their pid files (the two
nodes' slurmd by the processes this module started: see TwoNodeSlurm).

    python tests/local_slurm.py start DIR     # prints: export SLURM_CONF=DIR/slurm.conf
    python tests/local_slurm.py start2 DIR    # two nodes, n1 and n2 (stays in the foreground
                                              # until Ctrl-C: it holds the nodes' processes)
    python tests/local_slurm.py stop DIR
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional

DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "squeue", "scancel", "sinfo", "scontrol", "sbatch")
START_TIMEOUT_S = 30.0


def missing(nodes: int = 1) -> Optional[str]:
    """Why a local Slurm of ``nodes`` nodes cannot run here (None: it can)."""
    absent = [b for b in BINARIES if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}")]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start tasks"
    if nodes > 1:
        return _namespaces_missing()
    return None


def _namespaces_missing() -> Optional[str]:
    """Why a node cannot have UTS, PID and mount namespaces of its own here (None: it can)."""
    if shutil.which("unshare") is None:
        return "not installed: unshare (apt-get install util-linux)"
    try:
        done = subprocess.run(["unshare", "--uts", "--pid", "--fork", "--mount", "--mount-proc", "sh", "-c",
                               "hostname feedprof-probe && hostname"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare failed: {exc}"
    if done.returncode != 0 or done.stdout.strip() != "feedprof-probe":
        return f"no namespaces of a node's own here (unshare: {done.stderr.strip()[-200:]})"
    return None


def _which(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_cpus() -> int:
    """The node's CPUs as slurmd sees them (a node that claims more than it has stays down)."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=30).stdout
    for word in out.split():
        if word.startswith("CPUs="):
            return int(word.split("=", 1)[1])
    return os.cpu_count() or 1


class LocalSlurm:
    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.node = socket.gethostname().split(".")[0]
        self.conf = os.path.join(self.root, "slurm.conf")

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    @property
    def env(self) -> Dict[str, str]:
        return {"SLURM_CONF": self.conf}

    def _write_conf(self) -> None:
        munge_socket = self.path("munge", "munge.socket")
        lines = [
            "ClusterName=feedprof-test", f"SlurmctldHost={self.node}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={munge_socket}", "CredType=cred/munge",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            f"StateSaveLocation={self.path('state')}", f"SlurmctldPidFile={self.path('slurmctld.pid')}",
            f"SlurmctldLogFile={self.path('log', 'slurmctld.log')}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none", "MpiDefault=none", "ReturnToService=2", "KillWait=5",
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1",
            *self._node_lines(),
        ]
        with open(self.conf, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")

    def _node_lines(self) -> List[str]:
        return [f"SlurmdSpoolDir={self.path('spool')}", f"SlurmdPidFile={self.path('slurmd.pid')}",
                f"SlurmdLogFile={self.path('log', 'slurmd.log')}",
                f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={_node_cpus()} State=UNKNOWN",
                f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP"]

    def start(self) -> Dict[str, str]:
        """Start munged, slurmctld and slurmd; wait until the node is idle. Returns the clients' env."""
        for sub in ("munge", "state", "spool", "log"):
            os.makedirs(self.path(sub), exist_ok=True)
        os.chmod(self.path("munge"), 0o700)
        key = self.path("munge", "munge.key")
        if not os.path.exists(key):
            subprocess.run([_which("mungekey"), "-c", "-k", key], check=True, capture_output=True, timeout=30)
        self._write_conf()
        env = {**os.environ, **self.env}
        munge = self.path("munge")
        subprocess.run([_which("munged"), "-f", f"--key-file={key}", f"--socket={munge}/munge.socket",
                        f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
                        f"--seed-file={munge}/munged.seed"], check=True, capture_output=True, timeout=30)
        subprocess.run([_which("slurmctld"), "-i", "-f", self.conf], check=True, capture_output=True, env=env,
                       timeout=30)
        self._start_nodes(env)
        self._wait_idle(env)
        return self.env

    def _start_nodes(self, env: Dict[str, str]) -> None:
        subprocess.run([_which("slurmd"), "-f", self.conf, "-N", self.node], check=True, capture_output=True,
                       env=env, timeout=30)

    def _wait_idle(self, env: Dict[str, str]) -> None:
        """Until every node is idle (sinfo -N: a line per node)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        states: List[str] = []
        while time.monotonic() < deadline:
            done = subprocess.run([_which("sinfo"), "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                                  env=env, timeout=30)
            states = done.stdout.split()[1::2]
            if states and all(s == "idle" for s in states):
                return
            time.sleep(0.1)
        raise RuntimeError(f"the local Slurm's nodes did not come up (sinfo: {states!r}); see {self.path('log')}")

    def stop(self) -> None:
        """Stop the daemons (whatever they are doing), then wait for them to go."""
        pids = self._stop_nodes()
        for pidfile in ("slurmctld.pid", os.path.join("munge", "munged.pid")):
            pid = _signal_pidfile(self.path(pidfile), signal.SIGTERM)
            if pid is not None:
                pids.append(pid)
        _wait_gone(pids, 10.0)

    def _stop_nodes(self) -> List[int]:
        pid = _signal_pidfile(self.path("slurmd.pid"), signal.SIGTERM)
        return [] if pid is None else [pid]

    def queue(self) -> List[str]:
        """What squeue lists now (jobs and steps), one line each."""
        env = {**os.environ, **self.env}
        jobs = subprocess.run(["squeue", "-h", "-o", "%i %T %j"], capture_output=True, text=True, env=env, timeout=30)
        return [line for line in jobs.stdout.splitlines() if line.strip()]

    def wait_empty(self, timeout_s: float = 15.0) -> List[str]:
        """The queue once it is empty, or what it still lists after ``timeout_s`` (a job that is
        only completing a moment after its last task ended is given that moment)."""
        deadline = time.monotonic() + timeout_s
        left = self.queue()
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self.queue()
        return left


class TwoNodeSlurm(LocalSlurm):
    """Two nodes, ``n1`` and ``n2``, on this machine: each node's slurmd in UTS, PID and mount
    namespaces of its own (``unshare``), so that a task sees its node's hostname and only its
    node's processes, as on separate machines; the filesystem and 127.0.0.1 stay shared. Each
    node's /etc/hosts, in its own mount namespace, names both nodes (the machine's is left
    alone). A node ends with its slurmd, the first process of its PID namespace: the kernel
    then kills everything else of that node."""

    NODES = ("n1", "n2")

    def __init__(self, root: str):
        super().__init__(root)
        self.unshares: Dict[str, subprocess.Popen] = {}  # node -> the unshare that holds its namespaces

    def _node_lines(self) -> List[str]:
        cpus = _node_cpus()
        ports = [_free_port() for _ in self.NODES]
        return [f"SlurmdSpoolDir={self.path('spool', '%n')}", f"SlurmdPidFile={self.path('slurmd-%n.pid')}",
                f"SlurmdLogFile={self.path('log', 'slurmd-%n.log')}",
                *(f"NodeName={n} NodeHostname={n} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} State=UNKNOWN"
                  for n, port in zip(self.NODES, ports)),
                f"PartitionName=debug Nodes={','.join(self.NODES)} Default=YES MaxTime=INFINITE State=UP"]

    def _hosts_file(self) -> str:
        path = self.path("hosts")
        try:
            with open("/etc/hosts", encoding="utf-8") as fh:
                mine = fh.read()
        except OSError:
            mine = "127.0.0.1 localhost\n"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(mine.rstrip("\n") + f"\n127.0.0.1 {' '.join(self.NODES)}\n")
        return path

    def _start_nodes(self, env: Dict[str, str]) -> None:
        hosts = self._hosts_file()
        for node in self.NODES:
            os.makedirs(self.path("spool", node), exist_ok=True)
            with open(self.path("log", f"unshare-{node}.log"), "ab") as log:
                self.unshares[node] = subprocess.Popen(
                    ["unshare", "--uts", "--pid", "--fork", "--mount", "--mount-proc", sys.executable,
                     os.path.abspath(__file__), "node-init", node, hosts, self.conf],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def _stop_nodes(self) -> List[int]:
        """SIGTERM to each node's slurmd (its namespace's first process: the node goes with it)."""
        pids = []
        for node, unshare in self.unshares.items():
            first = [p.pid for p in _children(unshare.pid)]
            for pid in first:
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    continue
            pids += first + [unshare.pid]
        _wait_gone(list(pids), 10.0)
        for unshare in self.unshares.values():
            unshare.wait(timeout=10)
        self.unshares.clear()
        return []

    def node_pids(self, node: str) -> List[int]:
        """Every process of ``node`` now (its slurmd, its steps, their tasks), as this machine numbers them."""
        unshare = self.unshares.get(node)
        if unshare is None:
            return []
        return [p.pid for p in _children(unshare.pid, recursive=True)]


def node_init(node: str, hosts: str, conf: str) -> int:
    """The first process of a node's namespaces (its PID 1): names the node, gives it the
    hosts file, runs its slurmd, reaps every orphan of the node (as a machine's init does:
    slurmstepd's forks are left to it) and ends when slurmd ends; SIGTERM goes to slurmd."""
    import socket as _socket

    _socket.sethostname(node)
    subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)
    slurmd = subprocess.Popen([_which("slurmd"), "-D", "-f", conf, "-N", node])
    for signum in (signal.SIGTERM, signal.SIGINT):  # PID 1 ignores what it has no handler for
        signal.signal(signum, lambda n, _f: slurmd.send_signal(n))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == slurmd.pid:
            return os.waitstatus_to_exitcode(status)


def run_batch(args: List[str], cwd: str, timeout: float, env: Optional[Dict[str, str]] = None,
              poll_s: float = 0.25) -> subprocess.CompletedProcess:
    """``sbatch --wait ARGS``, as a CompletedProcess with the job's exit code, but polled every
    ``poll_s``: sbatch's own wait sleeps longer and longer between its looks (seconds to half a
    minute here), which a test of a 12-second job pays in full. The job's end and exit code are read
    with scontrol while its record is kept (MinJobAge: 300 s by default)."""
    submit = subprocess.run(["sbatch", "--parsable", *args], capture_output=True, text=True, timeout=60, cwd=cwd,
                            env=env)
    if submit.returncode != 0:
        return submit
    job = submit.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, timeout=30,
                               env=env)
        fields = dict(f.split("=", 1) for f in shown.stdout.split() if "=" in f)
        state = fields.get("JobState", "")
        if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED"):
            code = int(fields.get("ExitCode", "1:0").split(":")[0])
            return subprocess.CompletedProcess(args, code, submit.stdout, f"job {job} {state}\n")
        time.sleep(poll_s)
    subprocess.run(["scancel", job], capture_output=True, timeout=30, env=env)
    raise subprocess.TimeoutExpired(["sbatch", *args], timeout)


def _children(pid: int, recursive: bool = False) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=recursive)
    except psutil.Error:
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _signal_pidfile(path: str, signum: int) -> Optional[int]:
    """Signal the process a pid file names; its pid (None: no file, or gone)."""
    try:
        with open(path) as fh:
            pid = int(fh.read().strip())
        os.kill(pid, signum)
    except (OSError, ValueError):
        return None
    return pid


def _wait_gone(pids: List[int], timeout_s: float) -> None:
    """Wait for ``pids`` to end; SIGKILL what is left after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def main(argv: List[str]) -> int:
    if argv[:1] == ["node-init"] and len(argv) == 4:
        return node_init(*argv[1:])
    if len(argv) != 2 or argv[0] not in ("start", "start2", "stop"):
        print("usage: python tests/local_slurm.py start|start2|stop DIR", file=sys.stderr)
        return 2
    if argv[0] == "stop":
        LocalSlurm(argv[1]).stop()
        return 0
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # (taken by sigwait below)
    why = missing(nodes=2 if argv[0] == "start2" else 1)
    if why:
        print(f"local Slurm: {why}", file=sys.stderr)
        return 1
    cluster = TwoNodeSlurm(argv[1]) if argv[0] == "start2" else LocalSlurm(argv[1])
    cluster.start()
    print(f"export SLURM_CONF={cluster.conf}", flush=True)
    if argv[0] == "start2":  # the nodes are this process's children: it holds them until Ctrl-C
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
