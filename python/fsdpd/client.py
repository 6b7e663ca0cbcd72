"""fsdpd's JobService from Python, with the same TLS and token options as fsdpctl."""
from __future__ import annotations

import builtins
import json
import os
import time
from types import TracebackType
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, TypeVar, cast,
                    overload)

import grpc

from fsdpd.errors import FsdpdError, rpc_error
from fsdpd.events import Event, LogLine, StateEvent, StepEvent
from fsdpd.hf_config import llama_hf_config
from fsdpd.jobs import Job, SubmitResult, Worker
from fsdpd.safetensors import read_safetensors
from fsdpd.spec import SpecLike, apply_overrides, load_spec, path_fields
from fsdpd.states import JobState
from fsdpd.v1 import jobs_pb2, jobs_pb2_grpc, profile_pb2

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from fsdpd.v1 import common_pb2

    _Unary = grpc.UnaryUnaryMultiCallable
    _Stream = grpc.UnaryStreamMultiCallable

    class _JobService:
        """The generated JobServiceStub's calls with their message types (grpc_tools writes the
        stub without annotations)."""

        SubmitJob: _Unary[jobs_pb2.SubmitJobRequest, jobs_pb2.SubmitJobResponse]
        GetJob: _Unary[jobs_pb2.GetJobRequest, jobs_pb2.Job]
        ListJobs: _Unary[jobs_pb2.ListJobsRequest, jobs_pb2.ListJobsResponse]
        CancelJob: _Unary[jobs_pb2.CancelJobRequest, jobs_pb2.Job]
        WatchJob: _Stream[jobs_pb2.WatchJobRequest, jobs_pb2.JobEvent]
        GetJobLogs: _Stream[jobs_pb2.GetJobLogsRequest, common_pb2.LogLine]
        ListWorkers: _Unary[jobs_pb2.ListWorkersRequest, jobs_pb2.ListWorkersResponse]
        ExportJob: _Stream[jobs_pb2.ExportJobRequest, jobs_pb2.FileChunk]
        StartProfile: _Unary[profile_pb2.ProfileRequest, jobs_pb2.StartProfileResponse]
        GetProfile: _Unary[jobs_pb2.GetProfileRequest, profile_pb2.ProfileReport]
        GetTrace: _Stream[jobs_pb2.GetTraceRequest, jobs_pb2.FileChunk]
        ListCheckpoints: _Unary[jobs_pb2.ListCheckpointsRequest, jobs_pb2.ListCheckpointsResponse]
        PrepareExport: _Unary[jobs_pb2.PrepareExportRequest, jobs_pb2.ExportStatus]

# Kept importable from here, where they lived before.
__all__ = ["Client", "FsdpdError", "load_spec", "state_name", "DEFAULT_COORDINATOR"]

DEFAULT_COORDINATOR = "127.0.0.1:7070"

_Request = TypeVar("_Request")
_Response = TypeVar("_Response")
_Path = TypeVar("_Path", bound="str | os.PathLike[str]")


def _read_token(token_file: str, explicit: bool) -> str | None:
    try:
        with open(token_file, encoding="utf-8") as f:
            token = f.readline().rstrip("\r\n ")
    except OSError:
        if explicit:
            raise
        return None
    if not token or any(c <= " " or c == "\x7f" for c in token):
        raise ValueError(f"token_file: the first line of {token_file} must hold the token")
    return token


def _default_token_file() -> str:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "fsdpd", "token")


class Client:
    """A connection to a coordinator; also a context manager that closes it.

    Args:
        coordinator: host:port (default $FSDPD_COORDINATOR, else 127.0.0.1:7070).
        tls_ca: a PEM CA file that signed the coordinator's certificate: use TLS (default
            $FSDPD_TLS_CA).
        token: the bearer token.
        token_file: a file whose first line holds the token (default $FSDPD_TOKEN_FILE, else
            ~/.config/fsdpd/token where present).
        timeout: seconds for each unary call.

    Every call raises FsdpdError when the coordinator refuses it or cannot be reached.
    """

    def __init__(self, coordinator: str | None = None, *, tls_ca: str | None = None,
                 token: str | None = None, token_file: str | None = None,
                 timeout: float = 10.0) -> None:
        coordinator = coordinator or os.environ.get("FSDPD_COORDINATOR") or DEFAULT_COORDINATOR
        tls_ca = tls_ca or os.environ.get("FSDPD_TLS_CA")
        if token is None:
            explicit = token_file is not None or "FSDPD_TOKEN_FILE" in os.environ
            token_file = token_file or os.environ.get("FSDPD_TOKEN_FILE") or _default_token_file()
            token = _read_token(token_file, explicit)
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ())
        options = [("grpc.max_receive_message_length", -1)]
        if tls_ca:
            with open(tls_ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(coordinator, credentials, options)
        else:
            self._channel = grpc.insecure_channel(coordinator, options)
        self._stub = cast("_JobService", jobs_pb2_grpc.JobServiceStub(self._channel))
        self._timeout = timeout

    def close(self) -> None:
        """Closes the connection; streams still open end with an FsdpdError (CANCELLED)."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _unary(self, method: grpc.UnaryUnaryMultiCallable[_Request, _Response],
               request: _Request) -> _Response:
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise rpc_error(error) from None

    def _stream(self, method: grpc.UnaryStreamMultiCallable[_Request, _Response],
                request: _Request) -> Iterator[_Response]:
        try:
            yield from method(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise rpc_error(error) from None

    def submit(self, spec: SpecLike, dry_run: bool = False,
               labels: Mapping[str, str] | None = None) -> SubmitResult:
        """Submits a job, or checks its spec without storing anything.

        Args:
            spec: a dict of the spec's fields, YAML text, a YAML file's path or a JobSpec
                (load_spec reads it).
            dry_run: check the spec only: the result lists every violation instead of raising.
            labels: key=value pairs for grouping runs (``list(labels=...)`` selects by them); at
                most 32, keys and values of at most 63 letters, digits and ``._-`` (``/`` too in
                keys).

        Returns:
            A SubmitResult: ``.id`` (empty for a dry run), ``.job`` (the stored Job, its spec
            with the coordinator's defaults filled in) and ``.violations``.

        Raises:
            SpecError: the spec has an unknown field or a value of the wrong type.
            FsdpdError: the coordinator refused it (INVALID_ARGUMENT names each invalid field in
                ``.violations``).
        """
        request = jobs_pb2.SubmitJobRequest(spec=load_spec(spec), dry_run=dry_run,
                                            labels=dict(labels or {}))
        return SubmitResult.from_proto(self._unary(self._stub.SubmitJob, request), dry_run)

    def resubmit(self, job_id: str, set: Mapping[str, Any] | None = None,  # noqa: A002
                 from_job: str = "", from_step: int = 0,
                 labels: Mapping[str, str] | None = None) -> SubmitResult:
        """Runs a job again as a new job (its own id and uid), as ``fsdpctl resubmit`` does.

        Args:
            job_id: the job whose stored spec to run again.
            set: overrides by dotted path, ``{"train.lr": 1e-4, "parallel.world_size": 2}``.
            from_job: start from this job's checkpoint weights (the model must be the same; the
                world size may differ). Without it, from the weights `job_id` started from, if any.
            from_step: with from_job, that checkpoint's step (0: the newest).
            labels: added to the job's labels.

        Returns:
            The SubmitResult; its ``job.origin`` records where the job came from.

        Raises:
            SpecError: an override names no field of the spec, or has the wrong type.
            FsdpdError: the coordinator refused it (INVALID_ARGUMENT names the field).
        """
        original = self.status(job_id).proto
        spec = jobs_pb2.Job().spec
        spec.CopyFrom(original.spec)
        spec.checkpoint.ClearField("init_from_job_uid")
        spec.checkpoint.ClearField("init_from_step")
        overrides = apply_overrides(spec, set or {})
        origin = jobs_pb2.JobOrigin(resubmitted_from=original.id, overrides=overrides)
        if from_job:
            origin.weights_from.CopyFrom(jobs_pb2.CheckpointRef(job_id=from_job, step=from_step))
        elif original.origin.HasField("weights_from") and not spec.checkpoint.init_from:
            origin.weights_from.CopyFrom(original.origin.weights_from)
        merged = dict(original.labels)
        merged.update(labels or {})
        request = jobs_pb2.SubmitJobRequest(spec=spec, labels=merged, origin=origin)
        return SubmitResult.from_proto(self._unary(self._stub.SubmitJob, request), False)

    def status(self, job_id: str) -> Job:
        """The job as it stands now.

        Args:
            job_id: the job's id.

        Returns:
            The Job: state, step, loss, its spec, its state changes, ...

        Raises:
            FsdpdError: NOT_FOUND for an unknown id.
        """
        return Job.from_proto(self._unary(self._stub.GetJob, jobs_pb2.GetJobRequest(id=job_id)))

    def list(self, states: Iterable[JobState | int] = (), page_size: int = 0,
             labels: Mapping[str, str] | None = None) -> Iterator[Job]:
        """Every job, newest first, fetched page by page as the iteration goes.

        Args:
            states: only jobs in these states; empty: all.
            page_size: jobs per call (0: all in one; the coordinator serves at most 1000).
            labels: only jobs that carry every one of these labels with the same value.

        Yields:
            Each Job.
        """
        token = ""
        # The message takes the proto's enum type; a JobState is one of its ints.
        wanted = cast("list[common_pb2.JobState]", [int(state) for state in states])
        while True:
            page = self._unary(self._stub.ListJobs, jobs_pb2.ListJobsRequest(
                states=wanted, page_size=page_size, page_token=token,
                labels=dict(labels or {})))
            for job in page.jobs:
                yield Job.from_proto(job)
            token = page.next_page_token
            if not token:
                return

    def watch(self, job_id: str) -> Iterator[Event]:
        """The job's events, its history first, until it ends.

        Args:
            job_id: the job's id.

        Yields:
            A StateEvent for each change of state and a StepEvent for each step; each prints
            as one line (``step 120/300 loss 2.413 tok/s 51,200``).
        """
        total_steps = self.status(job_id).total_steps
        for event in self._stream(self._stub.WatchJob, jobs_pb2.WatchJobRequest(id=job_id)):
            if event.HasField("step"):
                yield StepEvent.from_proto(event.step, total_steps)
            elif event.HasField("state"):
                yield StateEvent.from_proto(event.state)

    def wait(self, job_id: str) -> Job:
        """Watches until the job ends; returns the final Job."""
        for _ in self.watch(job_id):
            pass
        return self.status(job_id)

    def logs(self, job_id: str, follow: bool = False, tail: int = 0) -> Iterator[LogLine]:
        """The lines the job's ranks logged, oldest first.

        Args:
            job_id: the job's id.
            follow: keep the stream open and yield new lines until the job ends.
            tail: only the last `tail` lines stored (0: all).

        Yields:
            Each LogLine; it prints as one line (``log rank0: ...``).
        """
        request = jobs_pb2.GetJobLogsRequest(id=job_id, follow=follow, tail=tail)
        for line in self._stream(self._stub.GetJobLogs, request):
            yield LogLine.from_proto(line)

    def cancel(self, job_id: str, reason: str = "") -> Job:
        """Cancels the job; its workers stop and are released.

        Args:
            job_id: the job's id.
            reason: why, recorded in its state change (at most 1024 bytes).

        Returns:
            The Job after the cancellation, CANCELLED.

        Raises:
            FsdpdError: FAILED_PRECONDITION for a job that has already ended; PERMISSION_DENIED
                for another user's job.
        """
        request = jobs_pb2.CancelJobRequest(id=job_id, reason=reason)
        return Job.from_proto(self._unary(self._stub.CancelJob, request))

    def workers(self) -> builtins.list[Worker]:
        """Every worker the coordinator knows, with its state and the job it runs."""
        answer = self._unary(self._stub.ListWorkers, jobs_pb2.ListWorkersRequest())
        return [Worker.from_proto(worker) for worker in answer.workers]

    @overload
    def _download(self, method: grpc.UnaryStreamMultiCallable[_Request, jobs_pb2.FileChunk],
                  request: _Request, path: None = None) -> bytes: ...

    @overload
    def _download(self, method: grpc.UnaryStreamMultiCallable[_Request, jobs_pb2.FileChunk],
                  request: _Request, path: _Path) -> _Path: ...

    def _download(self, method: grpc.UnaryStreamMultiCallable[_Request, jobs_pb2.FileChunk],
                  request: _Request,
                  path: _Path | None = None) -> bytes | _Path:
        chunks, total = [], None
        for chunk in self._stream(method, request):
            chunks.append(chunk.data)
            total = chunk.total_bytes
        data = b"".join(chunks)
        if total is not None and len(data) != total:
            raise FsdpdError(grpc.StatusCode.DATA_LOSS, f"received {len(data)} of {total} bytes")
        if path is None:
            return data
        with open(path, "wb") as f:
            f.write(data)
        return path

    def list_checkpoints(self, job_id: str) -> builtins.list[jobs_pb2.Checkpoint]:
        """The job's complete checkpoints, newest first.

        Returns:
            fsdpd.v1.Checkpoint messages: step, commit_time, size_bytes, hosts, attempt and
            world_size.

        Raises:
            FsdpdError: NOT_FOUND for an unknown job.
        """
        answer = self._unary(self._stub.ListCheckpoints,
                             jobs_pb2.ListCheckpointsRequest(id=job_id))
        return list(answer.checkpoints)

    @overload
    def export(self, job_id: str, path: None = None, step: int | None = None) -> bytes: ...

    @overload
    def export(self, job_id: str, path: _Path, step: int | None = None) -> _Path: ...

    def export(self, job_id: str, path: _Path | None = None,
               step: int | None = None) -> bytes | _Path:
        """The job's weights as a safetensors file, with PyTorch's parameter names.

        As `fsdpctl export`: the coordinator prepares the export (an idle worker consolidates a
        checkpoint's rank files), polled every half second until it is ready, then it streams.

        Args:
            job_id: the job's id.
            path: where to write the file; None: return its bytes.
            step: a complete checkpoint's step, whatever the job's state; None: the final model
                of a SUCCEEDED job, else the job's newest complete checkpoint.

        Returns:
            path, or the file's bytes.

        Raises:
            FsdpdError: NOT_FOUND for a step the job has no checkpoint of (the message names
                those it has) or a job with nothing to export; FAILED_PRECONDITION when the
                export failed (a missing or corrupt rank file, named in the message).
        """
        if step is not None and step <= 0:
            raise ValueError(f"step must be positive (got {step})")
        request = jobs_pb2.PrepareExportRequest(id=job_id, step=step or 0)
        while True:
            status = self._unary(self._stub.PrepareExport, request)
            if status.state == jobs_pb2.ExportStatus.READY:
                break
            if status.state == jobs_pb2.ExportStatus.FAILED:
                raise FsdpdError(grpc.StatusCode.FAILED_PRECONDITION,
                                 f"cannot export job {job_id}: {status.message}")
            time.sleep(0.5)
        return self._download(self._stub.ExportJob,
                              jobs_pb2.ExportJobRequest(id=job_id, step=status.step), path)

    def export_pretrained(self, job_id: str, folder: _Path, step: int | None = None) -> _Path:
        """A llama job's weights as a folder that transformers loads as it is.

        As `fsdpctl export JOB -o FOLDER` for a llama job: FOLDER/model.safetensors (export's
        file, whose tensors carry Hugging Face's names) and FOLDER/config.json (LlamaConfig from
        the job's spec), so ``LlamaForCausalLM.from_pretrained(folder)`` reads it.

        Args:
            job_id: the id of a job with model.arch llama.
            folder: where to write; created if missing.
            step: as export's.

        Returns:
            folder.

        Raises:
            ValueError: the job is not a llama job.
            FsdpdError: as export.
        """
        spec = self.status(job_id).spec
        config = llama_hf_config(spec)
        os.makedirs(folder, exist_ok=True)
        self.export(job_id, os.path.join(folder, "model.safetensors"), step)
        with open(os.path.join(folder, "config.json"), "w") as out:
            json.dump(config, out, indent=2)
        return folder

    def export_state_dict(self, job_id: str) -> dict[str, Any]:
        """The finished job's weights as a state dict.

        Returns:
            {name: tensor}: torch tensors where torch is installed (model.load_state_dict takes
            it), numpy arrays otherwise.
        """
        arrays: dict[str, npt.NDArray[np.generic]] = read_safetensors(self.export(job_id))
        try:
            import torch
        except ImportError:
            return dict(arrays)
        from_numpy: Callable[[Any], Any] = torch.from_numpy
        return {name: from_numpy(array) for name, array in arrays.items()}

    def profile(self, job_id: str, steps: int | None = None, start_step: int = 0,
                counters: bool = False, rank: int = 0) -> profile_pb2.ProfileReport | None:
        """Asks for a profiling window, or reads the latest one's kernel table.

        Args:
            job_id: the job's id.
            steps: ask the running job to profile this many steps; None: read the latest
                window instead.
            start_step: the window's first step (0: the next step).
            counters: add hardware counters (their kernel replay costs time and device memory).
            rank: whose window to read.

        Returns:
            None when asking; the fsdpd.v1.ProfileReport of `rank` when reading.

        Raises:
            FsdpdError: NOT_FOUND when no window was recorded.
        """
        if steps is not None:
            self._unary(self._stub.StartProfile, profile_pb2.ProfileRequest(
                id=job_id, start_step=start_step, steps=steps, counters=counters))
            return None
        return self._unary(self._stub.GetProfile, jobs_pb2.GetProfileRequest(id=job_id, rank=rank))

    @overload
    def trace(self, job_id: str, path: None = None, rank: int = 0) -> bytes: ...

    @overload
    def trace(self, job_id: str, path: _Path, rank: int = 0) -> _Path: ...

    def trace(self, job_id: str, path: _Path | None = None, rank: int = 0) -> bytes | _Path:
        """The latest profiling window's Chrome trace (JSON, for chrome://tracing or Perfetto).

        Args:
            job_id: the job's id.
            path: where to write it; None: return its bytes.
            rank: whose window.

        Returns:
            path, or the trace's bytes.
        """
        request = jobs_pb2.GetTraceRequest(id=job_id, rank=rank)
        return self._download(self._stub.GetTrace, request, path)


def state_name(state: int) -> str:
    """The name of a JobState value, e.g. "RUNNING" for 3 (str(JobState(3)) says the same)."""
    return str(JobState(state))


# path_fields was _path_fields here before.
_path_fields = path_fields
