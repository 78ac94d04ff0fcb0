"""Claims: how the Spark tasks of a `TaskGroup` share out its Kafka tasks on one executor, a unit at a time (the
tasks that share a transaction, `tasks_per_transaction`; usually one task).

Spark hands a task any idle Python worker, so with one Spark task per Kafka task a task moved between the
workers of an executor at random, and each move cost the worker it came to a new producer
(`init_transactions()`) and a runtime, and the worker it left a retried batch with its stale cached producer.
A group's members instead run through all of its tasks, each claiming a task before running it: first the
tasks whose producer or runtime this worker process holds (in plan order), then the others from the far end
of the list, where a sibling that holds them reaches last. A producer that another worker has fenced since
(the plan names the producer of the task's last commit, `TaskPlan.last_producer`) is dropped, not held: else
a task taken over once would have two workers that both take it for their own, and move every other batch.

A claim is an exclusive `flock` on one file per unit and Spark job of a batch (a batch planned again after a
failed job gets new claims), in the executor's temporary directory: not the state directory, which a
stateless job needs none of, and which a task's stores report as a configuration error when it is unusable.
The kernel releases a claim when its process dies, so the task of a member that died is claimed again (by
the member's retry, or a sibling). Before letting go, the member that ran a task writes its result into the
file: siblings then skip the task (that member reports it), and the member's own retry reports the stored
result instead of running the batch again.

Claims decide only who runs a task. The exactly-once argument is the same whoever runs it: a fresh
producer's `init_transactions()` fences every older attempt, and the committed offsets say what is done. Two
members that run one task at once (their executors do not share a disk) are safe: one of them is fenced.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from eos.worker.plans import GroupMember, TaskPlan, TaskResult

__all__ = ["Claim", "TaskClaims", "claim_order", "claims_root"]


class Claim:
    """A unit this member may report: run it and record its tasks' results (`done`), or report `earlier`, the
    results an earlier attempt of this member stored."""

    def __init__(self, fd: int, member: int, earlier: list[TaskResult] | None) -> None:
        self._fd, self._member, self.earlier = fd, member, earlier

    def done(self, results: list[TaskResult]) -> None:
        data = pickle.dumps((self._member, results))
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


#: The directories of claims whose other applications this process has looked through (`claims_root`)
_LOOKED_THROUGH: set[Path] = set()


def claims_root(application_id: str) -> Path:
    """This user's directory of an application's claims, in the temporary directory ($TMPDIR, /tmp) that the
    processes of an executor share; the group's key (its executor and Spark job) tells executors on one host
    apart. A process's first call removes the claims of other applications that no batch has touched for
    OTHER_RUNS_STALE_S: nothing else would (an application's runs remove only each other's), and every
    application id that ever ran on the host (a test suite's, a benchmark's) left a directory behind."""
    base = Path(tempfile.gettempdir()) / f"eos-claims-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    if base.stat().st_uid != os.getuid():
        raise PermissionError(f"{base} belongs to another user: claims cannot be kept there (set TMPDIR)")
    if base not in _LOOKED_THROUGH:
        _LOOKED_THROUGH.add(base)
        for entry in _entries(base):
            if entry.name != application_id and entry.is_dir() and _quiet(entry, OTHER_RUNS_STALE_S):
                shutil.rmtree(entry, ignore_errors=True)
    return base / application_id


class TaskClaims:
    """The claims of one group's batch, for one member. `root`: the application's claims (`claims_root`);
    `token`: the run."""

    def __init__(self, root: Path, token: str, member: GroupMember) -> None:
        self.member = member.member
        self.directory = root / token / f"{member.group.batch}-{member.group.key}"
        if not self.directory.is_dir():
            self.directory.mkdir(parents=True, exist_ok=True)
            _prune(root, token, member.group.batch)

    @contextmanager
    def claim(self, unit: str) -> Iterator[Claim | None]:
        """The claim of `unit` (its transactional id), held for the block; None when a live sibling runs it now or
        another member has reported it."""
        fd = os.open(self.directory / f"{unit}.claim", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            stored = _stored(fd)
            if stored is not None and stored[0] != self.member:
                yield None
                return
            yield Claim(fd, self.member, stored[1] if stored is not None else None)
        finally:
            os.close(fd)  # (releases the lock)


def _stored(fd: int) -> tuple[int, list[TaskResult]] | None:
    size = os.fstat(fd).st_size
    if not size:
        return None
    member, result = pickle.loads(os.pread(fd, size, 0))
    return int(member), result


#: Another run's claims are removed once nothing in them changed for this long. A run that is still going
#: adds a directory for every batch; two runs of one application id on one machine (against two clusters,
#: or a test suite's processes) each removed the other's claims while its tasks took them.
OTHER_RUNS_STALE_S = 3600.0


def _prune(directory: Path, token: str, batch: int) -> None:
    """Remove other runs' claims that no batch has touched for OTHER_RUNS_STALE_S, and this run's claims of
    batches before the previous one (the driver starts a batch only after every task of the one before
    reported)."""
    stale = [e for e in _entries(directory) if e.name != token and _untouched_for(e, OTHER_RUNS_STALE_S)]
    for entry in _entries(directory / token):
        head = entry.name.split("-", 1)[0]
        if head.isdigit() and int(head) < batch - 1:
            stale.append(entry)
    for entry in stale:
        shutil.rmtree(entry, ignore_errors=True)  # (a sibling may be removing it too)


def _untouched_for(entry: Path, seconds: float) -> bool:
    try:
        return time.time() - entry.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


def _quiet(application: Path, seconds: float) -> bool:
    """Whether no run of an application has started or added a batch for `seconds` (a run's directory gets one
    for each of its batches)."""
    return _untouched_for(application, seconds) and all(_untouched_for(run, seconds)
                                                         for run in _entries(application))


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except FileNotFoundError:
        return []


def claim_order(units: Sequence[tuple[TaskPlan, ...]],
                held: Callable[[tuple[TaskPlan, ...]], bool]) -> list[tuple[TaskPlan, ...]]:
    """The order a member tries its group's units in: the ones this worker holds in plan order, then the rest
    from the end, so that two members meet only once each has run its own."""
    own = [u for u in units if held(u)]
    rest = [u for u in reversed(units) if not held(u)]
    return own + rest
