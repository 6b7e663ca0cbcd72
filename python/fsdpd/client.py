"""fsdpd's JobService from Python, with the same TLS and token options as fsdpctl."""
import os
import pathlib

import grpc
import yaml
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from fsdpd.safetensors import read_safetensors
from fsdpd.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc, profile_pb2, spec_pb2

DEFAULT_COORDINATOR = "127.0.0.1:7070"


class FsdpdError(Exception):
    """A failed call: the gRPC code, the coordinator's message and, for INVALID_ARGUMENT, the
    field violations as (field, description) pairs."""

    def __init__(self, code, message, violations=()):
        self.code = code
        self.message = message
        self.violations = list(violations)
        lines = [f"{code.name}: {message}"]
        lines += [f"  {field}: {description}" for field, description in self.violations]
        super().__init__("\n".join(lines))


def _error(error):
    violations = []
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            bad_request = error_details_pb2.BadRequest()
            if detail.Unpack(bad_request):
                violations += [(v.field, v.description) for v in bad_request.field_violations]
    return FsdpdError(error.code(), error.details(), violations)


def _path_fields(descriptor=spec_pb2.JobSpec.DESCRIPTOR, prefix=()):
    """The spec's path fields as tuples of field names, e.g. ("data", "path"): the string fields
    marked [(fsdpd.v1.file_path) = true] in proto/fsdpd/v1/spec.proto, the one list that fsdpctl,
    the validator and the workers read too (proto/spec/spec_path_fields.h)."""
    fields = []
    for field in descriptor.fields:
        if field.GetOptions().Extensions[spec_pb2.file_path]:
            fields.append(prefix + (field.name,))
        elif field.message_type is not None and not _is_repeated(field):
            fields += _path_fields(field.message_type, prefix + (field.name,))
    return fields


def _is_repeated(field):
    # FieldDescriptor.is_repeated is newer than the label it replaces.
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return repeated() if callable(repeated) else repeated
    return field.label == field.LABEL_REPEATED


def load_spec(spec):
    """A JobSpec from a dict, a YAML path or a JobSpec. Keys are the proto's field names; the
    YAML's older `train: {betas: [b1, b2]}` is read as beta1 and beta2. Unset fields stay unset:
    the coordinator fills in their defaults. Relative paths (every field of _path_fields()) are
    resolved against the YAML file's folder, as fsdpctl does."""
    if isinstance(spec, spec_pb2.JobSpec):
        return spec
    folder = None
    if isinstance(spec, (str, os.PathLike)):
        path = pathlib.Path(spec)
        with open(path, encoding="utf-8") as f:
            spec = yaml.safe_load(f)
        if not isinstance(spec, dict):
            raise ValueError(f"{path}: a job spec is a YAML mapping of fields (name, model, ...)")
        folder = path.resolve().parent
    spec = {key: (dict(value) if isinstance(value, dict) else value) for key, value in spec.items()}
    train = spec.get("train")
    if isinstance(train, dict) and "betas" in train:
        betas = train.pop("betas")
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise ValueError("train.betas: expected a list of two numbers")
        train["beta1"], train["beta2"] = betas
    message = json_format.ParseDict(spec, spec_pb2.JobSpec())
    if folder is not None:
        for *sections, field in _path_fields():
            part = message
            for section in sections:
                if not part.HasField(section):
                    break
                part = getattr(part, section)
            else:
                value = getattr(part, field)
                if part.HasField(field) and value and not os.path.isabs(value):
                    setattr(part, field, os.path.normpath(folder / value))
    return message


def _read_token(token_file, explicit):
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


def _default_token_file():
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "fsdpd", "token")


class Client:
    """A connection to a coordinator.

    coordinator: host:port (default $FSDPD_COORDINATOR or 127.0.0.1:7070).
    tls_ca: PEM CA file that signed the coordinator's certificate: use TLS (default $FSDPD_TLS_CA).
    token / token_file: the bearer token, or a file whose first line holds it (default
    $FSDPD_TOKEN_FILE, else ~/.config/fsdpd/token where present).
    timeout: seconds for each unary call.
    """

    def __init__(self, coordinator=None, *, tls_ca=None, token=None, token_file=None, timeout=10.0):
        coordinator = coordinator or os.environ.get("FSDPD_COORDINATOR") or DEFAULT_COORDINATOR
        tls_ca = tls_ca or os.environ.get("FSDPD_TLS_CA")
        if token is None:
            explicit = token_file is not None or "FSDPD_TOKEN_FILE" in os.environ
            token_file = token_file or os.environ.get("FSDPD_TOKEN_FILE") or _default_token_file()
            token = _read_token(token_file, explicit)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        options = [("grpc.max_receive_message_length", -1)]
        if tls_ca:
            with open(tls_ca, "rb") as f:
                credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
            self._channel = grpc.secure_channel(coordinator, credentials, options)
        else:
            self._channel = grpc.insecure_channel(coordinator, options)
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._timeout = timeout

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _unary(self, method, request):
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise _error(error) from None

    def _stream(self, method, request):
        try:
            yield from method(request, metadata=self._metadata)
        except grpc.RpcError as error:
            raise _error(error) from None

    def submit(self, spec, dry_run=False):
        """Submits a spec (dict, YAML path or JobSpec); returns the stored Job, whose spec has the
        coordinator's defaults filled in. A dry run returns the SubmitJobResponse (violations)."""
        request = jobs_pb2.SubmitJobRequest(spec=load_spec(spec), dry_run=dry_run)
        response = self._unary(self._stub.SubmitJob, request)
        return response if dry_run else response.job

    def status(self, job_id):
        return self._unary(self._stub.GetJob, jobs_pb2.GetJobRequest(id=job_id))

    def list(self, states=(), page_size=0):
        """Every job (newest first), fetched page by page."""
        token = ""
        while True:
            page = self._unary(self._stub.ListJobs, jobs_pb2.ListJobsRequest(
                states=states, page_size=page_size, page_token=token))
            yield from page.jobs
            token = page.next_page_token
            if not token:
                return

    def watch(self, job_id):
        """The job's events (JobEvent: .state or .step), history first, until it ends."""
        return self._stream(self._stub.WatchJob, jobs_pb2.WatchJobRequest(id=job_id))

    def wait(self, job_id):
        """Watches until the job ends; returns the final Job."""
        for _ in self.watch(job_id):
            pass
        return self.status(job_id)

    def logs(self, job_id, follow=False, tail=0):
        return self._stream(self._stub.GetJobLogs,
                            jobs_pb2.GetJobLogsRequest(id=job_id, follow=follow, tail=tail))

    def cancel(self, job_id, reason=""):
        return self._unary(self._stub.CancelJob, jobs_pb2.CancelJobRequest(id=job_id, reason=reason))

    def workers(self):
        return list(self._unary(self._stub.ListWorkers, jobs_pb2.ListWorkersRequest()).workers)

    def _download(self, method, request, path=None):
        chunks, total = [], None
        for chunk in self._stream(method, request):
            chunks.append(chunk.data)
            total = chunk.total_bytes
        data = b"".join(chunks)
        if total is not None and len(data) != total:
            raise FsdpdError(grpc.StatusCode.DATA_LOSS,
                             f"received {len(data)} of {total} bytes")
        if path is None:
            return data
        with open(path, "wb") as f:
            f.write(data)
        return path

    def export(self, job_id, path=None):
        """The finished job's weights as a safetensors file (PyTorch's names): written to path, or
        returned as bytes."""
        return self._download(self._stub.ExportJob, jobs_pb2.ExportJobRequest(id=job_id), path)

    def export_state_dict(self, job_id):
        """The finished job's weights as a state dict: torch tensors where torch is installed
        (model.load_state_dict takes it), numpy arrays otherwise."""
        arrays = read_safetensors(self.export(job_id))
        try:
            import torch
        except ImportError:
            return arrays
        return {name: torch.from_numpy(array) for name, array in arrays.items()}

    def profile(self, job_id, steps=None, start_step=0, counters=False, rank=0):
        """With steps: asks the running job to profile a window (start_step 0: the next step;
        counters=True adds hardware counters, whose kernel replay costs time and device memory).
        Without: the latest window's kernel table (ProfileReport) from rank."""
        if steps is not None:
            self._unary(self._stub.StartProfile, profile_pb2.ProfileRequest(
                id=job_id, start_step=start_step, steps=steps, counters=counters))
            return None
        return self._unary(self._stub.GetProfile, jobs_pb2.GetProfileRequest(id=job_id, rank=rank))

    def trace(self, job_id, path=None, rank=0):
        """The latest window's Chrome trace (JSON): written to path, or returned as bytes."""
        return self._download(self._stub.GetTrace, jobs_pb2.GetTraceRequest(id=job_id, rank=rank), path)


def state_name(state):
    return common_pb2.JobState.Name(state)
