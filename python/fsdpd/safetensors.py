"""Reads a safetensors file (what ExportJob streams) with numpy alone.

The format: an 8-byte little-endian header length, a JSON header mapping each tensor's name to
its dtype, shape and [begin, end) byte offsets in the data that follows.
"""
from __future__ import annotations

import json
import struct

import numpy as np
import numpy.typing as npt

_DTYPES: dict[str, type[np.generic]] = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


def read_safetensors(data: bytes) -> dict[str, npt.NDArray[np.generic]]:
    """Reads a safetensors file's tensors.

    Args:
        data: the file's bytes.

    Returns:
        {name: numpy array}; bf16 comes back as float32.

    Raises:
        ValueError: the header or an offset does not fit the data, or a dtype is unknown.
    """
    if len(data) < 8:
        raise ValueError("safetensors: shorter than its 8-byte header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        raise ValueError(f"safetensors: header of {header_len} bytes runs past the file")
    header = json.loads(data[8:8 + header_len])
    body = memoryview(data)[8 + header_len:]
    tensors: dict[str, npt.NDArray[np.generic]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if not 0 <= begin <= end <= len(body):
            raise ValueError(f"safetensors: {name}'s offsets [{begin}, {end}) lie outside the data")
        dtype = info["dtype"]
        raw = body[begin:end]
        if dtype == "BF16":
            # bf16 is the top half of an fp32: widen it losslessly.
            halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            array = halves.view(np.float32)
        elif dtype in _DTYPES:
            array = np.frombuffer(raw, dtype=np.dtype(_DTYPES[dtype]).newbyteorder("<"))
        else:
            raise ValueError(f"safetensors: {name} has dtype {dtype}, which this reader lacks")
        tensors[name] = array.reshape(info["shape"]).copy()
    return tensors
