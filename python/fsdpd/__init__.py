"""Python client for fsdpd: submit, watch, status, logs, cancel, export, profile and trace.

    import fsdpd
    client = fsdpd.Client("127.0.0.1:7070")
    job = client.submit("examples/demo.yaml")
    for event in client.watch(job.id): print(event)
    weights = client.export_state_dict(job.id)
"""
from fsdpd.client import Client, FsdpdError, load_spec
from fsdpd.safetensors import read_safetensors

__all__ = ["Client", "FsdpdError", "load_spec", "read_safetensors"]
