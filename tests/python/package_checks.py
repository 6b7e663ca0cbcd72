"""Checks of the fsdpd package that need no coordinator: the state enums against the proto, the
spec's field errors, how an FsdpdError prints, and the PEP 561 marker. python_client_test.py
runs them before it starts the cluster; each raises AssertionError on a failure."""
import enum
import inspect
import os
import tempfile

import grpc

import fsdpd
from fsdpd.v1 import common_pb2


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def check_state_enums():
    """fsdpd.JobState and fsdpd.WorkerState are IntEnums with exactly the proto's names and
    values, so they compare with the proto's constants, and print their names."""
    for ours, theirs in ((getattr(fsdpd, "JobState", None), common_pb2.JobState),
                         (getattr(fsdpd, "WorkerState", None), common_pb2.WorkerState)):
        check(isinstance(ours, type) and issubclass(ours, enum.IntEnum),
              f"fsdpd exports no IntEnum for {theirs.DESCRIPTOR.name}")
        check({m.name: m.value for m in ours} == dict(theirs.items()),
              f"{ours.__name__} {[(m.name, m.value) for m in ours]} differs from the proto's "
              f"{theirs.items()}")
    check(fsdpd.JobState.SUCCEEDED == common_pb2.SUCCEEDED, "JobState.SUCCEEDED != proto's")
    check(str(fsdpd.JobState.RUNNING) == "RUNNING" and f"{fsdpd.JobState(3)}" == "RUNNING",
          f"JobState prints as {str(fsdpd.JobState.RUNNING)!r}, f-string {fsdpd.JobState(3)}")
    future = fsdpd.JobState(99)  # a state a newer coordinator may send
    check(future == 99 and str(future) == "UNKNOWN_99", f"JobState(99) is {future!r}")
    check(fsdpd.JobState.CANCELLED.finished and not fsdpd.JobState.RUNNING.finished,
          "JobState.finished")


def expect_spec_error(spec, field, what):
    """load_spec(spec) raises FsdpdError (INVALID_ARGUMENT) with a violation of `field`."""
    try:
        fsdpd.load_spec(spec)
    except fsdpd.FsdpdError as error:
        fields = [violation.field for violation in error.violations]
        check(error.code == grpc.StatusCode.INVALID_ARGUMENT and field in fields,
              f"{what}: expected a violation of {field}, got {error.code}: {fields}")
        check(field in str(error), f"{what}: {field} is not in the message {error}")
        check(isinstance(error, ValueError), f"{what}: SpecError is a ValueError too")
        return error
    except Exception as error:  # e.g. protobuf's ParseError
        raise AssertionError(f"{what}: expected FsdpdError naming {field}, got "
                             f"{type(error).__module__}.{type(error).__name__}: {error}")
    raise AssertionError(f"{what}: {field} was accepted")


def check_spec_errors(folder):
    """A misspelled key or a mistyped value raises FsdpdError naming the field, from a dict,
    YAML text and a YAML file alike, all fields at once."""
    error = expect_spec_error({"name": "typo", "modle": {"dim": 64}}, "modle", "dict")
    check("model" in error.violations[0].description, f"no hint at model: {error}")
    expect_spec_error("name: typo\nmodle: {dim: 64}\n", "modle", "YAML text")
    path = os.path.join(folder, "typo.yaml")
    with open(path, "w") as f:
        f.write("name: typo\nmodel: {dimm: 64}\ntrain: {lr: fast}\n")
    error = expect_spec_error(path, "model.dimm", "YAML file")
    check(path in str(error), f"the file is not named: {error}")
    check([v.field for v in error.violations] == ["model.dimm", "train.lr"],
          f"every invalid field at once: {error.violations}")
    expect_spec_error({"name": "typo", "model": 5}, "model", "a section that is not a mapping")


def check_error_printing():
    """str(FsdpdError) names each violation once, though the coordinator's message repeats
    them ("model.dim: ...; train.lr: ...", proto/spec/validate_sections.cc)."""
    violations = [("model.dim", "must be a multiple of heads"), ("train.lr", "must be > 0")]
    message = "; ".join(f"{field}: {description}" for field, description in violations)
    text = str(fsdpd.FsdpdError(grpc.StatusCode.INVALID_ARGUMENT, message, violations))
    for field, description in violations:
        count = text.count(description)
        check(count == 1, f"{field} printed {count} times:\n{text}")
    single = str(fsdpd.FsdpdError(grpc.StatusCode.NOT_FOUND, "job job-9 not found"))
    check(single == "NOT_FOUND: job job-9 not found", f"a plain error prints {single!r}")


def check_typed_package():
    """The installed package carries py.typed (PEP 561), so type checkers read its hints."""
    marker = os.path.join(os.path.dirname(fsdpd.__file__), "py.typed")
    check(os.path.isfile(marker), f"{marker} is missing")


def check_docstrings():
    """Every class and function the package exports, and each public method and property of
    its classes, has a docstring."""
    missing = []
    for name in fsdpd.__all__:
        exported = getattr(fsdpd, name)
        if not (inspect.isclass(exported) or inspect.isfunction(exported)):
            continue  # aliases such as SpecLike
        if not inspect.getdoc(exported):
            missing.append(name)
        if inspect.isclass(exported) and not issubclass(exported, enum.Enum):
            for member, value in vars(exported).items():
                function = value.fget if isinstance(value, property) else value
                function = getattr(function, "__func__", function)
                if not member.startswith("_") and callable(function) and not function.__doc__:
                    missing.append(f"{name}.{member}")
    check(not missing, f"no docstring: {missing}")


def run_all():
    check_docstrings()
    check_state_enums()
    with tempfile.TemporaryDirectory(prefix="fsdpd-python-spec-") as folder:
        check_spec_errors(folder)
    check_error_printing()
    check_typed_package()
