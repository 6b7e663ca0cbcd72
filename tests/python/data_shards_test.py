"""fsdpd.data.write_shards without a coordinator: the shards hold the source's tokens in order,
cut at shard_tokens, in uint16 or uint32 little-endian, and the manifest lists each with its
count; bad ids, a folder with shards already and an empty source are refused by name.

usage: data_shards_test.py   (the package on PYTHONPATH)
"""
import array
import os
import sys
import tempfile

from fsdpd.data import write_shards


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def read_shards(manifest, typecode):
    folder = os.path.dirname(manifest)
    tokens = array.array(typecode)
    counts = []
    with open(manifest) as f:
        for line in f:
            if line.startswith("#"):
                continue
            name, count = line.rstrip("\n").split("\t")
            shard = array.array(typecode)
            with open(os.path.join(folder, name), "rb") as data:
                shard.frombytes(data.read())
            if sys.byteorder != "little":
                shard.byteswap()
            check(len(shard) == int(count), f"{name} holds {len(shard)} tokens, listed {count}")
            counts.append(len(shard))
            tokens.extend(shard)
    return list(tokens), counts


def main():
    folder = tempfile.mkdtemp(prefix="fsdpd-shards-")
    text = "héllo, wörld\n" * 41  # 615 bytes: six full shards and one of 15
    manifest = write_shards(text, os.path.join(folder, "text"), shard_tokens=100)
    tokens, counts = read_shards(manifest, "H")
    check(tokens == list(text.encode("utf-8")), "the text's bytes are its tokens, in order")
    check(counts == [100] * (len(tokens) // 100) + [len(tokens) % 100], f"shard sizes {counts}")
    check(str(manifest).endswith("train.manifest"), f"manifest {manifest}")

    arrays = [[1, 2, 3], array.array("I", [70000, 5]), range(4)]
    manifest = write_shards(arrays, os.path.join(folder, "ids"), token_bytes=4, separator=9,
                            shard_tokens=4)
    tokens, counts = read_shards(manifest, "I")
    check(tokens == [1, 2, 3, 9, 70000, 5, 9, 0, 1, 2, 3, 9], f"tokens {tokens}")
    check(counts == [4, 4, 4], f"shard sizes {counts}")

    for source, kwargs, expected in [
        ([[1, 70000]], {}, "array 0, position 1: token id 70000 does not fit in 2 bytes"),
        ([[-1]], {"token_bytes": 4}, "array 0, position 0: token id -1"),
        ("", {}, "the source holds no token"),
        ("x", {"token_bytes": 3}, "token_bytes must be 2 (uint16) or 4 (uint32)"),
        ("x", {"manifest": "list.txt"}, "manifest must be a file name ending in .manifest"),
    ]:
        try:
            write_shards(source, tempfile.mkdtemp(dir=folder), **kwargs)
            raise AssertionError(f"{source!r} {kwargs}: no error")
        except ValueError as error:
            check(expected in str(error), f"{source!r} {kwargs}: {error}")
    try:
        write_shards("again", os.path.join(folder, "text"))
        raise AssertionError("a folder with shards was written into again")
    except FileExistsError as error:
        check("already holds train.manifest" in str(error), str(error))
    print("fsdpd.data.write_shards: ok")


if __name__ == "__main__":
    main()
