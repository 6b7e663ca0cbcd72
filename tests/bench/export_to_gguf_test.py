"""bench/llama_cpp/export_to_gguf.py on tiny fsdpd exports written here in the layout of
formats/model_metadata.cc: every GGUF tensor's name, shape, type and values (the export's fp32
rounded to fp16, or kept fp32), the gpt2 metadata llama.cpp loads, the byte-level vocabulary,
and the exports it must refuse. Read back with the gguf package's GGUFReader; llama.cpp is not
needed."""
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

SOURCE_DIR = os.environ.get("FSDPD_SOURCE_DIR",
                            os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE_DIR, "bench", "llama_cpp", "export_to_gguf.py")
spec = importlib.util.spec_from_file_location("export_to_gguf", SCRIPT)
export_to_gguf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_to_gguf)


def write_export(path, config, architecture="fsdpd.MiniLLM", drop=None, seed=0):
    """An export as the trainer writes it: fp32 tensors, the config in __metadata__. Returns
    the tensors."""
    rng = np.random.default_rng(seed)
    d, ffn = config["dim"], config["ffn_mult"] * config["dim"]
    tensors = {}
    for i in range(config["layers"]):
        p = f"layers.{i}."
        for name, shape in [("norm1.weight", (d,)), ("attn.in_proj_weight", (3 * d, d)),
                            ("attn.in_proj_bias", (3 * d,)), ("attn.out_proj.weight", (d, d)),
                            ("attn.out_proj.bias", (d,)), ("norm2.weight", (d,)),
                            ("ffn.0.weight", (ffn, d)), ("ffn.2.weight", (d, ffn))]:
            tensors[p + name] = rng.uniform(-1, 1, shape).astype(np.float32)
    tensors["embed.weight"] = rng.uniform(-1, 1, (config["vocab"], d)).astype(np.float32)
    tensors["head.weight"] = rng.uniform(-1, 1, (config["vocab"], d)).astype(np.float32)
    if config["final_norm"]:
        tensors["norm.weight"] = rng.uniform(0.5, 1.5, (d,)).astype(np.float32)
    # Values fp16 cannot hold exactly, and one beyond its range, to see the rounding.
    tensors["head.weight"][0, :3] = [1.0 / 3.0, 1e-8, 70000.0]
    if drop:
        del tensors[drop]
    metadata = {"format": "pt", "step": "0", "architecture": architecture}
    for key in ("vocab", "dim", "layers", "heads", "ffn_mult"):
        metadata[key] = str(config[key])
    metadata["causal"] = "true" if config["causal"] else "false"
    metadata["final_norm"] = "true" if config["final_norm"] else "false"
    metadata["norm_eps"] = "1.1920928955078125e-07"
    header, offset = {"__metadata__": metadata}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for array in tensors.values():
            f.write(array.tobytes())
    return tensors


def field(reader, key):
    return reader.fields[key].contents()


class ExportToGgufTest(unittest.TestCase):
    CONFIG = {"vocab": 300, "dim": 32, "layers": 2, "heads": 4, "ffn_mult": 4, "causal": True,
              "final_norm": True}

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.export = os.path.join(self.dir.name, "model.safetensors")

    def tearDown(self):
        self.dir.cleanup()

    def convert(self, config, outtype, context=64):
        tensors = write_export(self.export, config)
        out = os.path.join(self.dir.name, f"model-{outtype}.gguf")
        result = subprocess.run([sys.executable, SCRIPT, self.export, out, "--outtype", outtype,
                                 "--context", str(context)], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        return tensors, GGUFReader(out)

    def expected(self, config, tensors, context):
        """gguf name -> (fp32 values as the export holds them, matrix?)"""
        d, ffn = config["dim"], config["ffn_mult"] * config["dim"]
        final = tensors["norm.weight"] if config["final_norm"] else np.ones(d, np.float32)
        out = {"token_embd.weight": (tensors["embed.weight"], True),
               "position_embd.weight": (np.zeros((context, d), np.float32), True),
               "output_norm.weight": (final, False),
               "output_norm.bias": (np.zeros(d, np.float32), False),
               "output.weight": (tensors["head.weight"], True)}
        for i in range(config["layers"]):
            p, b = f"layers.{i}.", f"blk.{i}."
            out.update({
                b + "attn_norm.weight": (tensors[p + "norm1.weight"], False),
                b + "attn_norm.bias": (np.zeros(d, np.float32), False),
                b + "attn_qkv.weight": (tensors[p + "attn.in_proj_weight"], True),
                b + "attn_qkv.bias": (tensors[p + "attn.in_proj_bias"], False),
                b + "attn_output.weight": (tensors[p + "attn.out_proj.weight"], True),
                b + "attn_output.bias": (tensors[p + "attn.out_proj.bias"], False),
                b + "ffn_norm.weight": (tensors[p + "norm2.weight"], False),
                b + "ffn_norm.bias": (np.zeros(d, np.float32), False),
                b + "ffn_up.weight": (tensors[p + "ffn.0.weight"], True),
                b + "ffn_up.bias": (np.zeros(ffn, np.float32), False),
                b + "ffn_down.weight": (tensors[p + "ffn.2.weight"], True),
                b + "ffn_down.bias": (np.zeros(d, np.float32), False)})
        return out

    def check_tensors(self, config, outtype, context=64):
        tensors, reader = self.convert(config, outtype, context)
        expected = self.expected(config, tensors, context)
        self.assertEqual(sorted(t.name for t in reader.tensors), sorted(expected))
        for t in reader.tensors:
            values, is_matrix = expected[t.name]
            with self.subTest(tensor=t.name):
                # GGUF lists dimensions innermost first: ggml's ne, numpy's shape reversed.
                self.assertEqual([int(n) for n in t.shape], list(reversed(values.shape)))
                want_type = (GGMLQuantizationType.F16 if is_matrix and outtype == "f16"
                             else GGMLQuantizationType.F32)
                self.assertEqual(t.tensor_type, want_type)
                with np.errstate(over="ignore"):  # 70000 -> inf, as the converter rounds it
                    want = values.astype(np.float16) if want_type == GGMLQuantizationType.F16 \
                        else values
                got = np.asarray(t.data).reshape(values.shape)
                self.assertEqual(got.dtype, want.dtype)
                np.testing.assert_array_equal(got, want)
        return tensors, reader

    def test_fp16_tensors_and_metadata(self):
        c = self.CONFIG
        tensors, reader = self.check_tensors(c, "f16")
        # The rounding seen: 1/3 to fp16's nearest, 1e-8 to zero, 70000 past fp16's range to inf.
        head = next(t for t in reader.tensors if t.name == "output.weight")
        self.assertEqual(head.data[0, 0], np.float16(1.0 / 3.0))
        self.assertEqual(head.data[0, 1], 0)
        self.assertTrue(np.isinf(head.data[0, 2]))
        self.assertEqual(field(reader, "general.architecture"), "gpt2")
        self.assertEqual(field(reader, "gpt2.embedding_length"), c["dim"])
        self.assertEqual(field(reader, "gpt2.block_count"), c["layers"])
        self.assertEqual(field(reader, "gpt2.attention.head_count"), c["heads"])
        self.assertEqual(field(reader, "gpt2.attention.head_count_kv"), c["heads"])
        self.assertEqual(field(reader, "gpt2.feed_forward_length"), c["ffn_mult"] * c["dim"])
        self.assertEqual(field(reader, "gpt2.context_length"), 64)
        self.assertAlmostEqual(field(reader, "gpt2.attention.layer_norm_epsilon"),
                               1.1920928955078125e-07, delta=1e-14)
        self.assertEqual(field(reader, "general.file_type"), 1)  # MOSTLY_F16
        self.assertEqual(field(reader, "tokenizer.ggml.model"), "gpt2")
        self.assertFalse(field(reader, "tokenizer.ggml.add_bos_token"))
        tokens = field(reader, "tokenizer.ggml.tokens")
        self.assertEqual(len(tokens), c["vocab"])
        self.assertEqual(len(set(tokens)), c["vocab"])
        self.assertEqual(len(field(reader, "tokenizer.ggml.token_type")), c["vocab"])
        # Byte b is token b, spelled in GPT-2's byte alphabet.
        self.assertEqual(tokens[ord("A")], "A")
        self.assertEqual(tokens[ord(" ")], "\u0120")
        self.assertEqual(tokens[ord("\n")], "\u010a")
        self.assertEqual(tokens[0], "\u0100")
        self.assertEqual(tokens[255], "\u00ff")
        self.assertEqual(tokens[256], "<fsdpd_token_256>")

    def test_fp32_without_final_norm(self):
        config = dict(self.CONFIG, final_norm=False, vocab=256)
        _, reader = self.check_tensors(config, "f32", context=16)
        self.assertEqual(field(reader, "general.file_type"), 0)  # ALL_F32

    def test_refuses(self):
        out = os.path.join(self.dir.name, "out.gguf")
        cases = [({"architecture": "fsdpd.Llama"}, "fsdpd.Llama"),
                 ({"drop": "layers.1.ffn.2.weight"}, "layers.1.ffn.2.weight")]
        for kwargs, message in cases:
            with self.subTest(**kwargs):
                write_export(self.export, self.CONFIG, **kwargs)
                result = subprocess.run([sys.executable, SCRIPT, self.export, out],
                                        capture_output=True, text=True)
                self.assertEqual(result.returncode, 1)
                self.assertIn(message, result.stderr)

    def test_byte_vocabulary_is_gpt2s_alphabet(self):
        # GPT-2's bytes_to_unicode, written out as its reference implementation does.
        bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
              list(range(ord("®"), ord("ÿ") + 1)))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        reference = {b: chr(c) for b, c in zip(bs, cs)}
        self.assertEqual(export_to_gguf.byte_vocabulary(256), [reference[b] for b in range(256)])


if __name__ == "__main__":
    unittest.main()
