"""Job specs from Python: load_spec reads a dict, YAML text or a YAML file into fsdpd.v1.JobSpec.

Keys are the proto's field names (proto/fsdpd/v1/spec.proto). A key the spec does not have (a
misspelled ``modle``) or a value of the wrong type raises SpecError, an FsdpdError whose
violations name each such field by its path (``model.dimm``), all of them at once, before
anything is sent. The coordinator checks the values themselves and fills in the defaults.
"""
from __future__ import annotations

import difflib
import os
import pathlib
from typing import TYPE_CHECKING, Any, Mapping, Union

import yaml
from google.protobuf import descriptor, json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from fsdpd.errors import SpecError, Violation
from fsdpd.v1 import spec_pb2

if TYPE_CHECKING:
    from google._upb import _message as upb

    # Descriptors are of either implementation (the C one where upb is loaded).
    Descriptor = Union[descriptor.Descriptor, upb.Descriptor]
    AnyFieldDescriptor = Union[descriptor.FieldDescriptor, upb.FieldDescriptor]

#: What load_spec and Client.submit take: a JobSpec, a dict of its fields, YAML text (a string
#: with a line break) or the path of a YAML file.
SpecLike = Union[spec_pb2.JobSpec, Mapping[str, Any], str, "os.PathLike[str]"]


def path_fields(descriptor: Descriptor | None = None,
                prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The spec's path fields as tuples of field names, e.g. ("data", "path"): the string fields
    marked [(fsdpd.v1.file_path) = true] in proto/fsdpd/v1/spec.proto, the one list that fsdpctl,
    the validator and the workers read too (proto/spec/spec_path_fields.h)."""
    fields: list[tuple[str, ...]] = []
    for field in (descriptor or spec_pb2.JobSpec.DESCRIPTOR).fields:
        # Any: the stubs type extensions by a descriptor class that protoc's .pyi does not use.
        options: Any = field.GetOptions()
        if options.Extensions[spec_pb2.file_path]:
            fields.append(prefix + (field.name,))
        elif field.message_type is not None and not _is_repeated(field):
            fields += path_fields(field.message_type, prefix + (field.name,))
    return fields


def _is_repeated(field: AnyFieldDescriptor) -> bool:
    # FieldDescriptor.is_repeated is newer than the label it replaces.
    repeated = getattr(field, "is_repeated", None)
    if repeated is not None:
        return bool(repeated() if callable(repeated) else repeated)
    return bool(getattr(field, "label", None) == field.LABEL_REPEATED)


def load_spec(spec: SpecLike) -> spec_pb2.JobSpec:
    """Reads a job spec into a JobSpec.

    Args:
        spec: a JobSpec (returned as it is), a dict of its fields, YAML text (a string with a
            line break), or the path of a YAML file. The YAML's older ``train: {betas: [b1,
            b2]}`` is read as beta1 and beta2. Relative paths (every field of path_fields())
            in a file are resolved against the file's folder, as fsdpctl does.

    Returns:
        The JobSpec. Unset fields stay unset: the coordinator fills in their defaults.

    Raises:
        SpecError: a key that is not a field of the spec (named with its path and the closest
            field), a value of the wrong type, YAML that does not parse, or a document that is
            not a mapping.
        OSError: the file cannot be read.
    """
    if isinstance(spec, spec_pb2.JobSpec):
        return spec
    folder = None
    source = "the job spec"
    if isinstance(spec, str) and "\n" in spec:
        spec = _parse_yaml(spec, source)
    elif isinstance(spec, (str, os.PathLike)):
        path = pathlib.Path(spec)
        source = str(path)
        with open(path, encoding="utf-8") as f:
            spec = _parse_yaml(f.read(), source)
        folder = path.resolve().parent
    if not isinstance(spec, Mapping):
        raise SpecError(f"{source} is not a mapping of the spec's fields (name, model, ...) but "
                        f"a {type(spec).__name__}")
    fields = {key: (dict(value) if isinstance(value, Mapping) else value)
              for key, value in spec.items()}
    train = fields.get("train")
    if isinstance(train, dict) and "betas" in train:
        betas = train.pop("betas")
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise SpecError(f"{source}: train.betas is not a pair",
                            [("train.betas", "expected a list of two numbers")])
        train["beta1"], train["beta2"] = betas
    message = spec_pb2.JobSpec()
    violations: list[Violation] = []
    _check_fields(fields, message, "", violations)
    if violations:
        count = "1 invalid field" if len(violations) == 1 else f"{len(violations)} invalid fields"
        raise SpecError(f"{source}: {count}", violations)
    try:
        json_format.ParseDict(fields, message)
    except json_format.ParseError as error:  # what _check_fields did not foresee
        raise SpecError(f"{source}: {error}") from None
    if folder is not None:
        _resolve_paths(message, folder)
    return message


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise SpecError(f"{source}: not YAML: {error}") from None


def _check_fields(fields: Mapping[Any, Any], message: Message, prefix: str,
                  violations: list[Violation]) -> None:
    """Appends a violation for each key of `fields` (a level of the spec at `prefix`) that is not
    a field of `message`, and for each value that json_format cannot read into its field."""
    descriptor = message.DESCRIPTOR
    by_name = {field.name: field for field in descriptor.fields}
    by_name.update({field.json_name: field for field in descriptor.fields})
    for key, value in fields.items():
        path = f"{prefix}{key}"
        field = by_name.get(key) if isinstance(key, str) else None
        if field is None:
            known = [field.name for field in descriptor.fields]
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (known: {', '.join(known)})"
            violations.append(Violation(path, f"not a field of {descriptor.name}{hint}"))
            continue
        nested = field.message_type is not None and not _is_repeated(field)
        if nested and isinstance(value, Mapping):
            _check_fields(value, getattr(message, field.name), path + ".", violations)
            continue
        if nested and value is not None:
            kind = field.message_type.name if field.message_type else field.name
            violations.append(Violation(path, f"expected a mapping of {kind}'s fields, "
                                        f"not {type(value).__name__} {value!r}"))
            continue
        try:
            json_format.ParseDict({key: value}, type(message)())
        except json_format.ParseError as error:
            violations.append(Violation(path, _parse_problem(field, value, error)))


_KINDS = {
    FieldDescriptor.CPPTYPE_INT32: "an integer", FieldDescriptor.CPPTYPE_INT64: "an integer",
    FieldDescriptor.CPPTYPE_UINT32: "an integer >= 0", FieldDescriptor.CPPTYPE_UINT64:
    "an integer >= 0", FieldDescriptor.CPPTYPE_DOUBLE: "a number", FieldDescriptor.CPPTYPE_FLOAT:
    "a number", FieldDescriptor.CPPTYPE_BOOL: "true or false", FieldDescriptor.CPPTYPE_STRING:
    "a string",
}


def _parse_problem(field: AnyFieldDescriptor, value: Any, error: json_format.ParseError) -> str:
    """What the field takes and what it got, for a single scalar; json_format's reason else."""
    kind = _KINDS.get(field.cpp_type)
    if kind is not None and not _is_repeated(field):
        return f"expected {kind}, not {value!r}"
    return str(error)


def _resolve_paths(message: spec_pb2.JobSpec, folder: pathlib.Path) -> None:
    """Makes each set, relative path field of the spec absolute against `folder`."""
    for *sections, name in path_fields():
        part: Message = message
        for section in sections:
            if not part.HasField(section):
                break
            part = getattr(part, section)
        else:
            value = getattr(part, name)
            if part.HasField(name) and value and not os.path.isabs(value):
                setattr(part, name, os.path.normpath(folder / value))


def apply_overrides(spec: spec_pb2.JobSpec, overrides: Mapping[str, Any]) -> list[str]:
    """Sets each dotted path of `overrides` (``{"train.lr": 1e-4}``) in `spec`, as
    ``fsdpctl resubmit --set`` does (client/spec_overrides.h): every segment but the last names a
    section, the last a single value. A string value for a field that is not a string is read as
    YAML (``"1e-4"``, ``"true"``). Returns the overrides as ``path=value`` strings, in order.

    Raises:
        SpecError: a path the spec does not have, or a value of the wrong type, naming it.
    """
    applied: list[str] = []
    for path, value in overrides.items():
        *sections, name = path.split(".")
        part: Message = spec
        walked: list[str] = []
        for section in sections:
            field = part.DESCRIPTOR.fields_by_name.get(section)
            walked.append(section)
            if field is None or field.message_type is None or _is_repeated(field):
                known = ", ".join(f.name for f in part.DESCRIPTOR.fields)
                raise SpecError(f"{path}: {'.'.join(walked)} is not a section of the spec "
                                f"(fields here: {known})")
            part = getattr(part, section)
        field = part.DESCRIPTOR.fields_by_name.get(name)
        if field is None or field.message_type is not None or _is_repeated(field):
            known = ", ".join(f.name for f in part.DESCRIPTOR.fields)
            raise SpecError(f"{path}: not a single value of the spec (fields here: {known})")
        typed = value
        if isinstance(value, str) and field.cpp_type != FieldDescriptor.CPPTYPE_STRING:
            typed = _parse_yaml(value, path)
        try:
            part.MergeFrom(json_format.ParseDict({name: typed}, type(part)()))
        except json_format.ParseError as error:
            raise SpecError(f"{path}: {_parse_problem(field, typed, error)}") from None
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        applied.append(f"{path}={shown}")
    return applied
