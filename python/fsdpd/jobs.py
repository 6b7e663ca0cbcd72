"""What Client's calls return about jobs and workers: Job (with its Origin and Attempts),
SubmitResult and Worker.

Each lifts the fields a program reads into typed attributes (states as JobState and
WorkerState, times as UTC datetimes), prints as one line, and keeps the message it was read from
in ``.proto`` (fsdpd.v1.Job, SubmitJobResponse or Worker) for the rest.
"""
from __future__ import annotations

import dataclasses
import datetime

from fsdpd._times import from_timestamp, from_unix_millis
from fsdpd.errors import Violation
from fsdpd.events import StateEvent, format_loss
from fsdpd.states import JobState, WorkerState
from fsdpd.v1 import jobs_pb2, spec_pb2


@dataclasses.dataclass(frozen=True)
class Origin:
    """How a job came to be, when not from a spec alone (Client.resubmit, fsdpctl resubmit).

    Attributes:
        resubmitted_from: the job whose spec was copied; empty if none.
        overrides: the ``path=value`` overrides applied to it, in order.
        weights_from_job: the job whose checkpoint the initial weights come from; empty if none.
        weights_from_step: that checkpoint's step (resolved by the coordinator).
    """

    resubmitted_from: str
    overrides: list[str]
    weights_from_job: str
    weights_from_step: int

    @classmethod
    def from_proto(cls, origin: jobs_pb2.JobOrigin) -> Origin:
        """The Origin for a fsdpd.v1.JobOrigin."""
        return cls(resubmitted_from=origin.resubmitted_from, overrides=list(origin.overrides),
                   weights_from_job=origin.weights_from.job_id,
                   weights_from_step=origin.weights_from.step)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One attempt at running a job.

    Attributes:
        number: 1, 2, ...
        ranks: (rank, worker id, hostname) for each rank.
        start_time: when it started (UTC).
        end_time: when it ended; None while it runs.
        outcome: why it ended, as the job's state change said.
        final_step: the job's step when it ended.
    """

    number: int
    ranks: list[tuple[int, str, str]]
    start_time: datetime.datetime | None
    end_time: datetime.datetime | None
    outcome: str
    final_step: int

    @classmethod
    def from_proto(cls, attempt: jobs_pb2.Attempt) -> Attempt:
        """The Attempt for a fsdpd.v1.Attempt."""
        return cls(number=attempt.number,
                   ranks=[(rank.rank, rank.worker_id, rank.hostname) for rank in attempt.ranks],
                   start_time=from_timestamp(attempt, "start_time"),
                   end_time=from_timestamp(attempt, "end_time"), outcome=attempt.outcome,
                   final_step=attempt.final_step)


@dataclasses.dataclass(frozen=True)
class Job:
    """A job as the coordinator stores it.

    Attributes:
        id: the job's id (job-000001); empty for the job a dry run describes.
        name: the spec's name.
        state: where it is.
        reason: why it is there, in words.
        spec: the spec it runs with, the coordinator's defaults filled in (fsdpd.v1.JobSpec).
        attempt: the current attempt (a job retries after a lost worker, up to max_restarts).
        step: the last step reported.
        total_steps: the spec's train.steps.
        loss: the last step's loss.
        tokens_per_second: the last step's throughput over all ranks.
        create_time: when it was submitted (UTC); None if unset.
        start_time: when its first attempt started; None before.
        finish_time: when it ended; None before.
        transitions: its state changes, oldest first.
        worker_ids: the current attempt's workers, by rank.
        uid: unique across clusters and coordinator restarts; its checkpoints live under it.
        owner: who submitted it ("token:alice"); empty without authentication.
        labels: its key=value labels.
        origin: where its spec and initial weights came from (an empty Origin if from a spec).
        attempts: every attempt, oldest first, with its workers and hosts.
        proto: the fsdpd.v1.Job it was read from.
    """

    id: str
    name: str
    state: JobState
    reason: str
    spec: spec_pb2.JobSpec = dataclasses.field(repr=False)
    attempt: int
    step: int
    total_steps: int
    loss: float
    tokens_per_second: float
    create_time: datetime.datetime | None
    start_time: datetime.datetime | None
    finish_time: datetime.datetime | None
    transitions: list[StateEvent] = dataclasses.field(repr=False)
    worker_ids: list[str]
    uid: str
    owner: str
    labels: dict[str, str]
    origin: Origin = dataclasses.field(repr=False)
    attempts: list[Attempt] = dataclasses.field(repr=False)
    proto: jobs_pb2.Job = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, job: jobs_pb2.Job) -> Job:
        """The Job for a fsdpd.v1.Job."""
        return cls(id=job.id, name=job.spec.name, state=JobState(job.state), reason=job.reason,
                   spec=job.spec, attempt=job.attempt, step=job.step,
                   total_steps=job.spec.train.steps, loss=job.loss,
                   tokens_per_second=job.tokens_per_second,
                   create_time=from_timestamp(job, "create_time")
                   or from_unix_millis(job.created_unix_millis),
                   start_time=from_timestamp(job, "start_time")
                   or from_unix_millis(job.started_unix_millis),
                   finish_time=from_timestamp(job, "finish_time")
                   or from_unix_millis(job.finished_unix_millis),
                   transitions=[StateEvent.from_proto(change) for change in job.transitions],
                   worker_ids=list(job.worker_ids), uid=job.uid, owner=job.owner,
                   labels=dict(job.labels), origin=Origin.from_proto(job.origin),
                   attempts=[Attempt.from_proto(attempt) for attempt in job.attempts], proto=job)

    def __str__(self) -> str:
        parts = [self.id or "(dry run)", self.name, str(self.state)]
        if self.step > 0:
            parts.append(f"step {self.step}/{self.total_steps} loss {format_loss(self.loss)}")
        line = " ".join(part for part in parts if part)
        return f"{line}: {self.reason}" if self.reason else line


@dataclasses.dataclass(frozen=True)
class SubmitResult:
    """What Client.submit returns, for a dry run and a real submission alike.

    Attributes:
        id: the new job's id; empty for a dry run, which stores nothing.
        job: the job as stored, its spec with the coordinator's defaults filled in; for a dry
            run, the job that would have been stored (no id, state JOB_STATE_UNSPECIFIED).
        violations: for a dry run, each invalid field (a submission raises FsdpdError
            instead); empty when the spec is valid.
        dry_run: whether this was a dry run.
        proto: the fsdpd.v1.SubmitJobResponse it was read from.
    """

    id: str
    job: Job
    violations: list[Violation]
    dry_run: bool
    proto: jobs_pb2.SubmitJobResponse = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, response: jobs_pb2.SubmitJobResponse, dry_run: bool) -> SubmitResult:
        """The result for a SubmitJobResponse."""
        return cls(id=response.id, job=Job.from_proto(response.job),
                   violations=[Violation(v.field, v.description) for v in response.violations],
                   dry_run=dry_run, proto=response)

    @property
    def ok(self) -> bool:
        """Whether the spec was accepted (a dry run: would be)."""
        return not self.violations

    # The shortcuts below keep code written for the Job that submit returned before working.
    @property
    def state(self) -> JobState:
        """The job's state: ``job.state``."""
        return self.job.state

    @property
    def spec(self) -> spec_pb2.JobSpec:
        """The job's spec with the defaults filled in: ``job.spec``."""
        return self.job.spec

    def __str__(self) -> str:
        if not self.dry_run:
            return f"submitted {self.job}"
        if self.ok:
            return f"dry run: {self.job.name or 'the spec'} is valid"
        return f"dry run: {'; '.join(str(violation) for violation in self.violations)}"


@dataclasses.dataclass(frozen=True)
class Worker:
    """A worker the coordinator knows.

    Attributes:
        id: the worker's id.
        hostname: its host.
        device_kind: "cpu" or "cuda".
        gpu_index: its GPU's index on the host (cuda).
        gpu_name: its GPU's name (cuda).
        memory_bytes: the device's memory.
        state: IDLE, BUSY, LOST or DRAINING.
        job_id: the job it runs; empty when idle.
        rank: its rank in that job.
        last_heartbeat: when it last reported (UTC); None if never.
        address: the host address it reaches peers on.
        proto: the fsdpd.v1.Worker it was read from.
    """

    id: str
    hostname: str
    device_kind: str
    gpu_index: int
    gpu_name: str
    memory_bytes: int
    state: WorkerState
    job_id: str
    rank: int
    last_heartbeat: datetime.datetime | None
    address: str
    proto: jobs_pb2.Worker = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, worker: jobs_pb2.Worker) -> Worker:
        """The Worker for a fsdpd.v1.Worker."""
        return cls(id=worker.id, hostname=worker.hostname, device_kind=worker.device_kind,
                   gpu_index=worker.gpu_index, gpu_name=worker.gpu_name,
                   memory_bytes=worker.memory_bytes, state=WorkerState(worker.state),
                   job_id=worker.job_id, rank=worker.rank,
                   last_heartbeat=from_unix_millis(worker.last_heartbeat_unix_millis),
                   address=worker.address, proto=worker)

    def __str__(self) -> str:
        device = self.device_kind if self.device_kind != "cuda" else f"cuda:{self.gpu_index}"
        line = f"{self.id} {self.hostname} {device} {self.state}"
        return f"{line} {self.job_id} rank {self.rank}" if self.job_id else line
