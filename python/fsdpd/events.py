"""What Client.watch and Client.logs yield: one small object per event that prints as one line.

    step 120/300 loss 2.413 tok/s 51,200
    state RUNNING: scheduled on 2 workers
    log rank0: loaded 1.2 MB of text

Each keeps the message it was read from in ``.proto`` (fsdpd.v1.StepReport, StateChange or
LogLine) for the fields it does not lift out.
"""
from __future__ import annotations

import dataclasses
import datetime
from typing import Union

from fsdpd._times import from_timestamp, from_unix_millis
from fsdpd.states import JobState
from fsdpd.v1 import common_pb2


@dataclasses.dataclass(frozen=True)
class StepEvent:
    """A finished training step, aggregated over the ranks: rank 0's loss (the global mean)
    and the summed throughput.

    Attributes:
        job_id: the job's id.
        step: the step that just finished, 1-based.
        total_steps: the job's train.steps; 0 where unknown.
        loss: the step's loss.
        tokens_per_second: tokens per second over all ranks.
        step_seconds: the step's wall time.
        lr: the learning rate the step used.
        grad_norm: the global gradient norm before clipping.
        time: when the step finished (UTC), None if unknown.
        proto: the fsdpd.v1.StepReport it was read from.
        eval_loss: the validation loss after the step (data.eval_every), None on steps
            without validation.
    """

    job_id: str
    step: int
    total_steps: int
    loss: float
    tokens_per_second: float
    step_seconds: float
    lr: float
    grad_norm: float
    time: datetime.datetime | None
    proto: common_pb2.StepReport = dataclasses.field(repr=False, compare=False)
    eval_loss: float | None = None

    @classmethod
    def from_proto(cls, report: common_pb2.StepReport, total_steps: int = 0) -> StepEvent:
        """The event for a StepReport of a job of `total_steps` steps (0: unknown)."""
        return cls(job_id=report.job_id, step=report.step, total_steps=total_steps,
                   loss=report.loss, tokens_per_second=report.tokens_per_second,
                   step_seconds=report.step_seconds, lr=report.lr, grad_norm=report.grad_norm,
                   time=from_unix_millis(report.unix_millis), proto=report,
                   eval_loss=report.eval_loss if report.HasField("eval_loss") else None)

    def __str__(self) -> str:
        step = f"{self.step}/{self.total_steps}" if self.total_steps > 0 else f"{self.step}"
        validation = f" eval loss {format_loss(self.eval_loss)}" if self.eval_loss is not None else ""
        return (f"step {step} loss {format_loss(self.loss)}{validation}"
                f" tok/s {self.tokens_per_second:,.0f}")


@dataclasses.dataclass(frozen=True)
class StateEvent:
    """A change of the job's state.

    Attributes:
        job_id: the job's id.
        state: the state it entered.
        reason: why, in words.
        attempt: the attempt it belongs to.
        actor: who caused it: a user's principal, or "fsdpd" for the coordinator's decisions.
        time: when (UTC), None if unknown.
        proto: the fsdpd.v1.StateChange it was read from.
    """

    job_id: str
    state: JobState
    reason: str
    attempt: int
    actor: str
    time: datetime.datetime | None
    proto: common_pb2.StateChange = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, change: common_pb2.StateChange) -> StateEvent:
        """The event for a StateChange."""
        time = from_timestamp(change, "time") or from_unix_millis(change.unix_millis)
        return cls(job_id=change.job_id, state=JobState(change.state), reason=change.reason,
                   attempt=change.attempt, actor=change.actor, time=time, proto=change)

    def __str__(self) -> str:
        reason = _one_line(self.reason)
        return f"state {self.state}: {reason}" if reason else f"state {self.state}"


@dataclasses.dataclass(frozen=True)
class LogLine:
    """A line that a rank of the job logged.

    Attributes:
        job_id: the job's id.
        rank: the rank that logged it.
        attempt: the attempt it belongs to.
        level: "info", "warning", ...
        text: the line.
        time: when (UTC), None if unknown.
        proto: the fsdpd.v1.LogLine it was read from.
    """

    job_id: str
    rank: int
    attempt: int
    level: str
    text: str
    time: datetime.datetime | None
    proto: common_pb2.LogLine = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, line: common_pb2.LogLine) -> LogLine:
        """The object for a fsdpd.v1.LogLine."""
        return cls(job_id=line.job_id, rank=line.rank, attempt=line.attempt, level=line.level,
                   text=line.text, time=from_unix_millis(line.unix_millis), proto=line)

    def __str__(self) -> str:
        level = "" if self.level in ("", "info") else f" {self.level}"
        return f"log rank{self.rank}{level}: {_one_line(self.text)}"


#: What Client.watch yields.
Event = Union[StepEvent, StateEvent]


def format_loss(loss: float) -> str:
    """A loss as the one-line forms print it: three decimals, or three digits where those
    would hide it (very small or large)."""
    return f"{loss:.3f}" if 1e-3 <= abs(loss) < 1e6 else f"{loss:.3g}"


def _one_line(text: str) -> str:
    """Text for a one-line rendering: inner line breaks shown as ⏎."""
    return text.strip().replace("\r\n", "\n").replace("\n", " ⏎ ")
