"""Job and worker states as Python enums.

Each member has the value of its fsdpd.v1 enum (proto/fsdpd/v1/common.proto), so a state
compares equal to the proto's constants (``fsdpd.JobState.SUCCEEDED == common_pb2.SUCCEEDED``)
and converts from the proto's int (``fsdpd.JobState(job.state)``). ``str()`` and f-strings give
the name. A value that a newer coordinator sends and this package does not know yet becomes a
member named ``UNKNOWN_<value>`` instead of an error: fsdpd.v1 grows additively.
"""
from __future__ import annotations

import enum
from typing import TypeVar

_State = TypeVar("_State", bound="_ProtoEnum")


class _ProtoEnum(enum.IntEnum):
    """An IntEnum that mirrors a proto enum: prints its name and accepts unknown values."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        # An integer presentation type formats the number; anything else the name.
        if spec and spec[-1] in "bcdoxXn":
            return int.__format__(self, spec)
        return format(self.name, spec)

    @classmethod
    def _missing_(cls: type[_State], value: object) -> _State | None:
        if not isinstance(value, int) or isinstance(value, bool):
            return None
        member = int.__new__(cls, value)
        member._name_ = f"UNKNOWN_{value}"
        member._value_ = value
        return member


class JobState(_ProtoEnum):
    """A job's state (fsdpd.v1.JobState)."""

    JOB_STATE_UNSPECIFIED = 0
    PENDING = 1
    SCHEDULED = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    RETRYING = 7

    @property
    def finished(self) -> bool:
        """Whether the job has ended: SUCCEEDED, FAILED or CANCELLED."""
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


class WorkerState(_ProtoEnum):
    """A worker's state (fsdpd.v1.WorkerState)."""

    WORKER_STATE_UNSPECIFIED = 0
    IDLE = 1
    BUSY = 2
    LOST = 3
    DRAINING = 4
