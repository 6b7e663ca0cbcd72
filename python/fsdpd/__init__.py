"""Python client for fsdpd: submit, watch, status, logs, cancel, export, profile and trace.

    import fsdpd
    with fsdpd.Client("127.0.0.1:7070") as client:
        job = client.submit("examples/demo.yaml")
        for event in client.watch(job.id):
            print(event)              # step 120/300 loss 2.413 tok/s 51,200
        if client.status(job.id).state == fsdpd.JobState.SUCCEEDED:
            weights = client.export_state_dict(job.id)

The calls return the objects below (each prints as one line and keeps its message in
``.proto``); a failed call raises FsdpdError. The package is typed (PEP 561).
"""
from fsdpd.client import Client
from fsdpd.errors import FsdpdError, SpecError, Violation
from fsdpd.events import Event, LogLine, StateEvent, StepEvent
from fsdpd.jobs import Attempt, Job, Origin, SubmitResult, Worker
from fsdpd.safetensors import read_safetensors
from fsdpd.spec import SpecLike, load_spec
from fsdpd.states import JobState, WorkerState

__all__ = [
    "Attempt", "Client", "Event", "FsdpdError", "Job", "JobState", "LogLine", "Origin",
    "SpecError", "SpecLike", "StateEvent", "StepEvent", "SubmitResult", "Violation", "Worker",
    "WorkerState", "load_spec", "read_safetensors",
]
