"""A real one-node Slurm on localhost, for the cluster tests and benchmarks/cluster.py.

Debian's ``slurm-wlm`` and ``munge`` (tests/run installs them where it may use apt-get),
started by hand in a directory of their own: no systemd, nothing written under /etc. The
clients (srun, squeue, scancel...) find the cluster through SLURM_CONF, which
:meth:`LocalSlurm.start` returns; the daemons are stopped by their pid files.

    python tests/local_slurm.py start DIR     # prints: export SLURM_CONF=DIR/slurm.conf
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


def missing() -> Optional[str]:
    """Why a local Slurm cannot run here (None: it can)."""
    absent = [b for b in BINARIES if shutil.which(b) is None and not os.path.exists(f"/usr/sbin/{b}")]
    if absent:
        return f"not installed: {', '.join(absent)} (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start tasks"
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
            f"StateSaveLocation={self.path('state')}", f"SlurmdSpoolDir={self.path('spool')}",
            f"SlurmctldPidFile={self.path('slurmctld.pid')}", f"SlurmdPidFile={self.path('slurmd.pid')}",
            f"SlurmctldLogFile={self.path('log', 'slurmctld.log')}", f"SlurmdLogFile={self.path('log', 'slurmd.log')}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none", "MpiDefault=none", "ReturnToService=2", "KillWait=5",
            "SchedulerType=sched/backfill", "SchedulerParameters=sched_interval=1",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={_node_cpus()} State=UNKNOWN",
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")

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
        subprocess.run([_which("slurmd"), "-f", self.conf, "-N", self.node], check=True, capture_output=True,
                       env=env, timeout=30)
        self._wait_idle(env)
        return self.env

    def _wait_idle(self, env: Dict[str, str]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        state = ""
        while time.monotonic() < deadline:
            done = subprocess.run([_which("sinfo"), "-h", "-o", "%t"], capture_output=True, text=True, env=env,
                                  timeout=30)
            state = done.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.1)
        raise RuntimeError(f"the local Slurm node did not come up (sinfo: {state!r}); see {self.path('log')}")

    def stop(self) -> None:
        """Stop the daemons by their pid files (whatever they are doing), then wait for them to go."""
        pids: List[int] = []
        for name, pidfile in (("slurmd", "slurmd.pid"), ("slurmctld", "slurmctld.pid"),
                              ("munged", os.path.join("munge", "munged.pid"))):
            try:
                with open(self.path(pidfile)) as fh:
                    pid = int(fh.read().strip())
                os.kill(pid, signal.SIGTERM)
                pids.append(pid)
            except (OSError, ValueError):
                continue
        deadline = time.monotonic() + 10
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p)]
            time.sleep(0.05)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

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


def main(argv: List[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(__doc__.strip().splitlines()[-2].strip(), file=sys.stderr)
        return 2
    cluster = LocalSlurm(argv[1])
    if argv[0] == "start":
        why = missing()
        if why:
            print(f"local Slurm: {why}", file=sys.stderr)
            return 1
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
