"""A Slurm cluster of two nodes on this machine, for the tests: munged, slurmctld and two
slurmd, each started from a temporary folder with its own key, socket, spool, state and
configuration (``SLURM_CONF``), and stopped, every one, when the cluster is.

Tried with Debian's Slurm 22.05 and munge 0.5.15 (``apt-get install slurm-wlm munge``),
as root, with no cgroups: ``proctrack/linuxproc`` and ``task/none``, no accounting
storage (so no ``sacct``; a job's end state comes from ``scontrol`` while the controller
keeps it, ``MinJobAge``). Debian's slurmd runs twice on one host with ``-N NAME`` and a
port per node, so the cluster has two nodes, ``n1`` and ``n2``, on this one machine; each
claims more CPUs than the machine has (``config_overrides``), so that a few small jobs run
at once, while dlperf's machine lock keeps their measurements one at a time.

    with SlurmCluster() as cluster:        # or the ``slurm`` fixture of tests/conftest.py
        subprocess.run(["sbatch", ...], env=cluster.env)

``SlurmCluster.unavailable()`` says why no cluster can start here (None when it can).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")
NODES = ("n1", "n2")
PARTITIONS = {"debug": "n1,n2", "cpu": "n1", "big": "n2"}


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SlurmCluster:
    def __init__(self, cpus_per_node: int = 4, min_job_age_s: int = 300):
        self.cpus = cpus_per_node
        self.min_job_age_s = min_job_age_s
        self.dir = Path(tempfile.mkdtemp(prefix="dlperf-slurm-"))
        self.procs: list[subprocess.Popen] = []
        self.env = dict(os.environ)

    @staticmethod
    def unavailable() -> str | None:
        missing = [d for d in DAEMONS if not shutil.which(d, path=os.environ.get("PATH", "") +
                                                          ":/usr/sbin:/sbin")]
        if missing:
            return (f"no Slurm here ({', '.join(missing)} not found; 'make install' "
                    "apt-get installs slurm-wlm and munge)")
        if os.geteuid() != 0:
            return "the test cluster's slurmd must run as root (it starts jobs as their user)"
        return None

    # ------------------------------------------------------------------ start
    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        d = self.dir
        # munged refuses a socket folder the world cannot enter, and a key others can read
        d.chmod(0o755)
        for sub in ("munge", "run", "state", "log", *(f"spool/{n}" for n in NODES)):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "munge").chmod(0o700)
        sbin = "/usr/sbin:/sbin:"
        self.env["PATH"] = sbin + self.env.get("PATH", "")
        subprocess.run(["mungekey", "-c", "-k", str(d / "munge/munge.key")], check=True,
                       env=self.env, capture_output=True)
        self.socket = d / "run" / "munge.sock"
        self._spawn("munged", ["munged", "-F", f"--socket={self.socket}",
                               f"--key-file={d}/munge/munge.key", f"--pid-file={d}/run/munged.pid",
                               f"--log-file={d}/log/munged.log", f"--seed-file={d}/munge/seed"])
        self._wait(lambda: self.socket.exists(), 10, "munged")
        ctld, *node_ports = _free_ports(1 + len(NODES))
        self.conf = d / "slurm.conf"
        self.conf.write_text(self._config(ctld, node_ports))
        self.env["SLURM_CONF"] = str(self.conf)
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"])
        for n in NODES:
            self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n])
        self._wait(self._idle, timeout_s, "the nodes to be idle")

    def _config(self, ctld_port: int, node_ports: list[int]) -> str:
        d, host = self.dir, socket.gethostname()
        nodes = "\n".join(
            f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} "
            f"CPUs={self.cpus} RealMemory=4000 State=UNKNOWN"
            for n, p in zip(NODES, node_ports, strict=True))
        parts = "\n".join(f"PartitionName={p} Nodes={nodes_} MaxTime=INFINITE State=UP"
                          + (" Default=YES" if p == "debug" else "")
                          for p, nodes_ in PARTITIONS.items())
        return f"""ClusterName=dlperftest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge={self.min_job_age_s}
KillWait=5
InactiveLimit=0
MessageTimeout=5
{nodes}
{parts}
"""

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.dir / "log" / f"{name}.out").open("w")
        # a session of its own: a Ctrl-C of the test run reaches the daemons through
        # stop() only, which waits for them
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0]} exited while waiting for {what}: "
                                   f"{self.log_tail()}")
            if ready():
                return
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}: {self.log_tail()}")

    def _idle(self) -> bool:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                           capture_output=True, text=True, timeout=15)
        states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
        return r.returncode == 0 and all(states.get(n) == "idle" for n in NODES)

    def log_tail(self, lines: int = 5) -> str:
        out = []
        for f in sorted((self.dir / "log").glob("*")):
            tail = f.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"[{f.name}] " + " | ".join(tail))
        return " ".join(out)

    # ------------------------------------------------------------------ use
    def run(self, *argv: str, timeout_s: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout_s)

    def stop_controller(self) -> None:
        """Stop slurmctld alone (a controller that does not answer)."""
        self._stop([p for p in self.procs if p.args[0] == "slurmctld"])

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        # the jobs first, while slurmd is there to end them and reap their processes (a
        # process left to this machine's init may stay a zombie); then slurmd, which
        # ends its steps, then the controller and munged
        if any(p.args[0] == "slurmctld" and p.poll() is None for p in self.procs):
            try:
                self.run("scancel", "--full", "--user", "root", timeout_s=10)
                end = time.monotonic() + 20
                while time.monotonic() < end and self.run(
                        "squeue", "-h", "-o", "%i", timeout_s=10).stdout.strip():
                    time.sleep(0.5)
            except (OSError, subprocess.SubprocessError):
                pass
        order = sorted(self.procs, key=lambda p: {"slurmd": 0, "slurmctld": 1}.get(p.args[0], 2))
        self._stop(order)
        self._kill_leftovers()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _stop(self, procs: list[subprocess.Popen]) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _kill_leftovers(self) -> None:
        """A job's processes may outlive a slurmd that was stopped under them; end those
        of this cluster (their environment names its configuration), nothing else."""
        mark = f"SLURM_CONF={self.conf}".encode() if hasattr(self, "conf") else None
        if mark is None:
            return
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
                continue
            try:
                environ = (pid_dir / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mark in environ:
                try:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
                except OSError:
                    pass

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
