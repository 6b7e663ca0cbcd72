"""Sharded token datasets for fsdpd's ``tokens`` source.

``write_shards`` turns a text, or an iterable of token arrays, into the shards a job reads with
``data: {source: tokens, path: <folder>/train.manifest, token_bytes: 2}`` (or the folder
itself): flat little-endian uint16 or uint32 ids, at most ``shard_tokens`` a shard, and a
manifest listing each shard with its token count, so that a shard truncated later is refused
when a job opens it (worker/data/token_shards.h holds the format)::

    from fsdpd.data import write_shards
    manifest = write_shards(open("corpus.txt", encoding="utf-8").read(), "data/corpus")
    # data: {source: tokens, path: data/corpus/train.manifest, token_bytes: 2}, model.vocab >= 256

A text becomes its UTF-8 bytes, one token each, as the ``text`` source reads a file (so the
model needs ``vocab >= 256``). Token arrays (lists of ints, ``array.array``, numpy arrays) are
concatenated in order, each followed by ``separator`` when one is given. A job cuts each shard
into windows of ``seq_len + 1`` tokens that never cross its end, so a shard should hold many
windows.
"""
from __future__ import annotations

import array
import os
import sys
from pathlib import Path
from typing import Any, Iterable, List, Optional, Union

TokenSource = Union[str, bytes, Iterable[Any]]

_TYPECODES = {2: "H", 4: "I"}


def write_shards(
    source: TokenSource,
    folder: Union[str, "os.PathLike[str]"],
    *,
    token_bytes: int = 2,
    shard_tokens: int = 1 << 24,
    prefix: str = "shard",
    manifest: str = "train.manifest",
    separator: Optional[int] = None,
) -> Path:
    """Writes ``source`` as shards ``<prefix>-00000.bin``, ... and a manifest into ``folder``
    (created if needed) and returns the manifest's path.

    Raises ValueError for a token id that does not fit ``token_bytes`` (naming the array and the
    position), an empty source, or bad arguments; FileExistsError when the folder already holds
    the manifest or a ``.bin`` file (a folder-based spec would read stale shards beside new ones).
    The manifest is written last, so a crash leaves no manifest that lists a missing shard.
    """
    if token_bytes not in _TYPECODES:
        raise ValueError(f"token_bytes must be 2 (uint16) or 4 (uint32), got {token_bytes!r}")
    if isinstance(shard_tokens, bool) or not isinstance(shard_tokens, int) or shard_tokens < 2:
        raise ValueError(f"shard_tokens must be an integer of at least 2, got {shard_tokens!r}")
    if not prefix or "/" in prefix or os.sep in prefix:
        raise ValueError(f"prefix must be a plain file name part, got {prefix!r}")
    if not manifest.endswith(".manifest") or "/" in manifest or os.sep in manifest:
        raise ValueError(f"manifest must be a file name ending in .manifest, got {manifest!r}")
    limit = 1 << (8 * token_bytes)
    if separator is not None and not 0 <= separator < limit:
        raise ValueError(f"separator {separator} does not fit in {token_bytes} bytes")

    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    manifest_path = target / manifest
    stale = sorted(p.name for p in target.iterdir() if p.suffix == ".bin")
    if manifest_path.exists() or stale:
        raise FileExistsError(
            f"{target} already holds {manifest_path.name if manifest_path.exists() else stale[0]}:"
            " write the shards into an empty folder")

    writer = _ShardWriter(target, prefix, token_bytes, shard_tokens)
    for tokens in _token_arrays(source, token_bytes, limit):
        writer.add(tokens)
        if separator is not None:
            writer.add(array.array(_TYPECODES[token_bytes], [separator]))
    shards = writer.finish()
    if not shards:
        raise ValueError("the source holds no token")
    lines = [f"# fsdpd token shards: uint{8 * token_bytes}, little-endian; path<TAB>tokens\n"]
    lines += [f"{name}\t{count}\n" for name, count in shards]
    temporary = target / (manifest + ".tmp")
    temporary.write_text("".join(lines), encoding="utf-8")
    os.replace(temporary, manifest_path)
    return manifest_path


def _token_arrays(source: TokenSource, token_bytes: int, limit: int) -> Iterable["array.array[int]"]:
    typecode = _TYPECODES[token_bytes]
    if isinstance(source, str):
        source = source.encode("utf-8")
    if isinstance(source, (bytes, bytearray, memoryview)):
        # One token a byte (an array built from a bytes object would read it as raw items).
        yield array.array(typecode, list(bytes(source)))
        return
    for index, tokens in enumerate(source):
        if isinstance(tokens, (str, bytes)):
            raise ValueError(f"array {index} is a {type(tokens).__name__}; pass token ids, or the"
                             " whole text as the source")
        values: List[int] = [int(value) for value in tokens]
        for position, value in enumerate(values):
            if not 0 <= value < limit:
                raise ValueError(f"array {index}, position {position}: token id {value} does not"
                                 f" fit in {token_bytes} bytes (0 to {limit - 1})")
        yield array.array(typecode, values)


class _ShardWriter:
    """Cuts the concatenated tokens into files of at most shard_tokens tokens."""

    def __init__(self, folder: Path, prefix: str, token_bytes: int, shard_tokens: int) -> None:
        self._folder = folder
        self._prefix = prefix
        self._typecode = _TYPECODES[token_bytes]
        if array.array(self._typecode).itemsize != token_bytes:
            raise RuntimeError(f"array typecode {self._typecode} is not {token_bytes} bytes here")
        self._shard_tokens = shard_tokens
        self._pending = array.array(self._typecode)
        self._written: List[tuple[str, int]] = []

    def add(self, tokens: "array.array[int]") -> None:
        self._pending.extend(tokens)
        while len(self._pending) >= self._shard_tokens:
            self._flush(self._pending[: self._shard_tokens])
            self._pending = self._pending[self._shard_tokens:]

    def finish(self) -> List[tuple[str, int]]:
        if self._pending:
            self._flush(self._pending)
            self._pending = array.array(self._typecode)
        return self._written

    def _flush(self, tokens: "array.array[int]") -> None:
        name = f"{self._prefix}-{len(self._written):05d}.bin"
        data = tokens
        if sys.byteorder != "little":
            data = array.array(self._typecode, tokens)
            data.byteswap()
        with open(self._folder / name, "wb") as out:
            out.write(data.tobytes())
        self._written.append((name, len(tokens)))
