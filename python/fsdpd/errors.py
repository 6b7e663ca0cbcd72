"""FsdpdError, what every failed call raises, and its reading from a gRPC error.

A coordinator answers a rejected request with INVALID_ARGUMENT and a google.rpc.BadRequest in
the status details (grpc-status-details-bin), one field violation per invalid field; the status
message joins the same violations with "; " (proto/spec/validate_sections.cc). ``str()`` of the
error shows each violation once: the code, what the message says beyond the violations, then
one violation a line.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, cast

import grpc
from google.rpc import error_details_pb2, status_pb2


class Violation(NamedTuple):
    """One invalid field: its path in the spec or request (``model.dim``) and what is wrong."""

    field: str
    description: str

    def __str__(self) -> str:
        return f"{self.field}: {self.description}"


class FsdpdError(Exception):
    """A failed call, or a spec that cannot be sent.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode``).
        message: the coordinator's message as it sent it.
        violations: for INVALID_ARGUMENT, the invalid fields as ``Violation`` (field,
            description) pairs; empty otherwise.
    """

    def __init__(self, code: grpc.StatusCode, message: str,
                 violations: Iterable[tuple[str, str]] = ()) -> None:
        self.code = code
        self.message = message
        self.violations = [Violation(field, description) for field, description in violations]
        super().__init__(_describe(code, message, self.violations))


class SpecError(FsdpdError, ValueError):
    """A job spec that load_spec cannot read: an unknown field (a misspelled key), a value of
    the wrong type, or a file that is not a YAML mapping. Its code is INVALID_ARGUMENT and its
    violations name the fields. A ValueError too, as load_spec raised before."""

    def __init__(self, message: str, violations: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message, violations)


def _describe(code: grpc.StatusCode, message: str, violations: list[Violation]) -> str:
    """The code and message, each violation once: the parts of the message that only repeat a
    violation are left out of the first line."""
    repeated = {str(violation) for violation in violations}
    rest = "; ".join(part for part in message.split("; ") if part not in repeated)
    if not violations:
        return f"{code.name}: {message}"
    if not rest and len(violations) == 1:
        return f"{code.name}: {violations[0]}"
    if not rest:
        rest = f"{len(violations)} invalid fields"
    return "\n".join([f"{code.name}: {rest}"] + [f"  {violation}" for violation in violations])


def rpc_error(error: grpc.RpcError) -> FsdpdError:
    """The FsdpdError for a failed call, with the BadRequest's field violations where the
    status details hold one."""
    # A failed call's RpcError is also its grpc.Call, which carries the code and trailers (the
    # type stubs know RpcError alone).
    if not callable(getattr(error, "code", None)):
        return FsdpdError(grpc.StatusCode.UNKNOWN, str(error))
    call = cast(grpc.Call, error)
    violations: list[tuple[str, str]] = []
    for key, value in call.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            bad_request = error_details_pb2.BadRequest()
            if detail.Unpack(bad_request):
                violations += [(v.field, v.description) for v in bad_request.field_violations]
    return FsdpdError(call.code(), call.details() or "", violations)
