"""Builds the fsdpd package: generates the fsdpd.v1 stubs from the repository's proto/ folder.

The stubs are not committed: grpc_tools.protoc writes them into the build tree, under the
package, so `from fsdpd.v1 import jobs_pb2` resolves the protos' own imports. The messages come
with .pyi type stubs; the py.typed marker (package data) tells type checkers that the package
carries its own types (PEP 561). FSDPD_PROTO_DIR
names another proto folder (e.g. when building from an sdist away from the repository).
"""
import glob
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.environ.get("FSDPD_PROTO_DIR", os.path.join(HERE, "..", "proto"))


def _protobuf_version():
    import google.protobuf

    return google.protobuf.__version__


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        from grpc_tools import protoc
        import grpc_tools

        protos = sorted(glob.glob(os.path.join(PROTO_DIR, "fsdpd", "v1", "*.proto")))
        if not protos:
            raise SystemExit(f"fsdpd: no .proto files under {PROTO_DIR}/fsdpd/v1 "
                             "(set FSDPD_PROTO_DIR to the repository's proto folder)")
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        out = self.build_lib
        args = ["protoc", f"-I{PROTO_DIR}", f"-I{well_known}", f"--python_out={out}",
                f"--pyi_out={out}", f"--grpc_python_out={out}"] + protos
        if protoc.main(args) != 0:
            raise SystemExit("fsdpd: protoc failed on " + " ".join(protos))
        init = os.path.join(out, "fsdpd", "v1", "__init__.py")
        with open(init, "w", encoding="utf-8") as f:
            f.write('"""fsdpd.v1 messages and stubs, generated from proto/fsdpd/v1 at build time."""\n')


# The generated code needs a protobuf runtime at least as new as the generator.
setup(
    cmdclass={"build_py": BuildWithStubs},
    packages=["fsdpd"],
    package_data={"fsdpd": ["py.typed"]},
    install_requires=[
        "grpcio>=1.51",
        f"protobuf>={_protobuf_version()}",
        "googleapis-common-protos>=1.56",
        "pyyaml>=5",
        "numpy>=1.21",
    ],
)
