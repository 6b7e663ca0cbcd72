"""The proto's times as timezone-aware datetimes (UTC); None where the proto leaves them unset."""
from __future__ import annotations

import datetime

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp


def from_timestamp(message: Message, field: str) -> datetime.datetime | None:
    """The google.protobuf.Timestamp `field` of `message`, or None where it is unset."""
    if not message.HasField(field):
        return None
    timestamp: Timestamp = getattr(message, field)
    return timestamp.ToDatetime(tzinfo=datetime.timezone.utc)


def from_unix_millis(millis: int) -> datetime.datetime | None:
    """Milliseconds since the epoch, or None for 0 (the proto's unset)."""
    if millis == 0:
        return None
    return datetime.datetime.fromtimestamp(millis / 1000, tz=datetime.timezone.utc)
