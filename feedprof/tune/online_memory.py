"""The job's memory against its budget, inside the real run (tune --online): a config whose job
takes more than the budget is left before its memory breaks the run (tune/online.py's Decider
leaves it). Each poll reads what the machine has free (cheap); once it has lost more than the
budget since the start, the job's own processes are read (record/tree_memory.py, at most every
JOB_MEMORY_EVERY_S): memory another program took is no failure of the config in force. The job is
also read once per config in force and then every JOB_MEMORY_IDLE_EVERY_S, as the machine's free
memory cannot show a job that grew while another program freed some."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional

import psutil

from feedprof.record import tree_memory
from feedprof.tune.budget import MemoryBudget

JOB_MEMORY_EVERY_S = 2.0  # the job's own memory (PSS of every process: ~5 ms each) is read at most this often
JOB_MEMORY_IDLE_EVERY_S = 30.0  # ... and this often while the machine has lost less than the budget


@dataclass
class JobMemory:
    budget_bytes: Optional[int] = None  # what the job's processes may hold (None: not watched)
    available0_bytes: int = 0  # what the machine had free at the start
    taken_bytes: int = 0  # what the job's processes held at the last reading
    read_s: Optional[float] = None
    read_config: tuple = ()  # the config in force at that reading (a reading is that config's alone)

    @classmethod
    def of_this_machine(cls, max_bytes: Optional[int]) -> "JobMemory":
        """Watched from now on: ``max_bytes``, or the offline tune's budget (80 % of what is free
        now, or of the container's limit)."""
        return cls(budget_bytes=MemoryBudget.of_this_machine(max_bytes).ram_bytes,
                   available0_bytes=psutil.virtual_memory().available)

    def over_budget(self, config_key: tuple, now_s: float, local_pids: Iterable[int]) -> bool:
        """Has the job, running the config keyed ``config_key``, taken more than the budget?
        ``local_pids``: the job's ranks on this node (none known: this process's children)."""
        if self.budget_bytes is None:
            return False
        dropped = self.available0_bytes - psutil.virtual_memory().available > self.budget_bytes
        every_s = JOB_MEMORY_EVERY_S if dropped else JOB_MEMORY_IDLE_EVERY_S
        if self.read_config != config_key or self.read_s is None or now_s - self.read_s >= every_s:
            roots: List[int] = list(local_pids) or [p.pid for p in psutil.Process().children()]
            self.read_config, self.read_s, self.taken_bytes = config_key, now_s, tree_memory.tree_bytes(roots)
        return self.taken_bytes > self.budget_bytes
