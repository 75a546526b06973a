"""Protobuf messages to and from their JSON dict exactly as `json_format` converts them with the SDK's options
(`MessageToDict`, `ParseDict` ignoring unknown fields), in a fraction of the time: a converter per field type, cached
per field, for the plain cases, and `json_format` itself for every other (maps, floating-point and 64-bit fields,
well-known types other than Timestamp, JSON that is not plain)."""

import base64
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message

Convert = Callable[..., Any]

_PLAIN = {
    FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32,
}
_WIDE = {
    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64,
}
_CONVERTERS: dict[FieldDescriptor, tuple[str, bool, Convert | None]] = {}
"""Per field: its JSON name, whether it is repeated, and the converter of one value (None: the value as it is;
`_fields`: a message of the bridge's own types, converted field by field)."""


class Unsupported(Exception):
    """A field this module leaves to `MessageToDict`."""


def to_dict(message: Message) -> dict[str, Any]:
    """`MessageToDict(message)` with its default options."""
    return to_plain_dict(message)[0]


def to_plain_dict(message: Message) -> tuple[dict[str, Any], bool]:
    """`to_dict(message)`, and whether it is plain: written without `MessageToDict`, so it holds no float and no map
    (a Struct's keys in the order of the message's map: a copy of the message may order them otherwise)."""
    if message.DESCRIPTOR.full_name.startswith("google.protobuf."):
        return MessageToDict(message), False
    marks: list[str] = []
    try:
        return _fields(message, marks), not marks
    except Unsupported:
        return MessageToDict(message), False


def _fields(message: Message, marks: list[str]) -> dict[str, Any]:
    """A message's fields as JSON; the name of each field written by `MessageToDict` goes to `marks`. A repeated field
    is read as its slice (a list): protobuf's containers have no iterator, and iterating one ends on an IndexError whose
    message is formatted each time."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        name, repeated, convert = _CONVERTERS.get(field) or _converter(field)
        if convert is None:
            out[name] = value[:] if repeated else value
        elif convert is _fields:
            out[name] = [_fields(item, marks) for item in value[:]] if repeated else _fields(value, marks)
        else:
            if convert is MessageToDict:
                marks.append(name)
            out[name] = [convert(item) for item in value[:]] if repeated else convert(value)
    return out


def _converter(field: FieldDescriptor) -> tuple[str, bool, Convert | None]:
    """How one field's value (each item of a repeated field) becomes JSON; whole-field fallbacks for the rest."""
    kind = field.type
    repeated = field.is_repeated
    convert: Convert | None
    if kind in _PLAIN:
        convert = None
    elif kind in _WIDE:
        convert = str
    elif kind == FieldDescriptor.TYPE_ENUM:
        convert = _enum(field)
    elif kind == FieldDescriptor.TYPE_BYTES:
        convert = _bytes
    elif kind == FieldDescriptor.TYPE_MESSAGE and not _is_map(field.message_type):
        convert = _message(field.message_type)
    else:
        convert = _unsupported(field)
        repeated = False  # a map too: refused whole, never sliced
    _CONVERTERS[field] = (field.json_name, repeated, convert)
    return _CONVERTERS[field]


def _bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("utf-8")


def _enum(field: FieldDescriptor) -> Convert:
    names = {number: value.name for number, value in field.enum_type.values_by_number.items()}
    if field.enum_type.full_name == "google.protobuf.NullValue":
        return lambda _value: None
    return lambda value: names.get(value, value)


def _message(descriptor: Descriptor) -> Convert:
    name = descriptor.full_name
    if name == "google.protobuf.Timestamp":
        return timestamp_text
    if name.startswith("google.protobuf."):
        return MessageToDict
    return _fields


_FIRST_SECOND, _LAST_SECOND = -62_135_596_800, 253_402_300_799
"""The range `Timestamp` allows: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z."""
_EPOCH = datetime(1970, 1, 1)
_second_text: tuple[int, str] = (0, "1970-01-01T00:00:00")
"""The last whole second written, and its text (the timestamps of one task, of one moment, share their second)."""


def timestamp_text(value: Any) -> str:
    """`Timestamp.ToJsonString()`: the second as `datetime.isoformat` writes it, then 0, 3, 6 or 9 fractional digits,
    whichever is exact, and Z; the second's text kept for the next call."""
    global _second_text
    seconds, nanos = value.seconds, value.nanos
    if not (_FIRST_SECOND <= seconds <= _LAST_SECOND and 0 <= nanos < 1_000_000_000):
        return value.ToJsonString()
    last, text = _second_text
    if seconds != last:
        text = (_EPOCH + timedelta(seconds=seconds)).isoformat()
        _second_text = (seconds, text)
    if not nanos:
        return f"{text}Z"
    if not nanos % 1_000_000:
        return f"{text}.{nanos // 1_000_000:03d}Z"
    if not nanos % 1_000:
        return f"{text}.{nanos // 1_000:06d}Z"
    return f"{text}.{nanos:09d}Z"


def _is_map(descriptor: Descriptor) -> bool:
    return descriptor.GetOptions().map_entry


def _unsupported(field: FieldDescriptor) -> Convert:
    def convert(_value: Any) -> Any:
        raise Unsupported(field.full_name)

    return convert


class Unparsed(Exception):
    """A value this module leaves to `ParseDict`."""


_INT32_RANGE = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
}
_MESSAGE, _MAP, _STRING, _BOOL, _INT32, _ENUM, _OTHER = range(7)
"""How `_parse` reads a field's JSON value: a message, a map (left to `ParseDict`), a scalar of one of the plain
kinds, or any other scalar (left to `ParseDict`)."""
Plan = dict[str, tuple[str, str | None, bool, int, Any]]
"""Per JSON name that `_parse` reads: the field's name, its oneof's name, whether it is repeated, its kind (above), and
the kind's detail (an integer range, an enum's numbers by name)."""
_PLANS: dict[Descriptor, Plan | None] = {}
"""Each message type's plan, made on first use; None for the well-known types, which `ParseDict` reads."""


def from_dict(value: Any, message: Message) -> Message:
    """`ParseDict(value, message, ignore_unknown_fields=True)`, parsed here where the JSON is plain (fields by their
    JSON names, strings, booleans, 32-bit integers, enum names, objects and lists; no nulls, no member of a oneof
    set twice) and by `ParseDict` otherwise, so the result and every error are `ParseDict`'s."""
    try:
        _parse(value, message)
    except (Unparsed, ValueError, TypeError):
        message.Clear()
        return ParseDict(value, message, ignore_unknown_fields=True)
    return message


def _plan(descriptor: Descriptor) -> Plan | None:
    """The fields `_parse` reads by a JSON name: those whose camel-case name is their JSON name."""
    if descriptor.full_name.startswith("google.protobuf."):
        plan = None
    else:
        plan = {}
        for name, field in descriptor.fields_by_camelcase_name.items():
            if field.json_name != name:
                continue
            oneof = field.containing_oneof.name if field.containing_oneof is not None else None
            kind, detail = _kind(field)
            plan[name] = (field.name, oneof, field.is_repeated, kind, detail)
    _PLANS[descriptor] = plan
    return plan


def _kind(field: FieldDescriptor) -> tuple[int, Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return (_MAP, None) if _is_map(field.message_type) else (_MESSAGE, None)
    if field.type == FieldDescriptor.TYPE_STRING:
        return _STRING, None
    if field.type == FieldDescriptor.TYPE_BOOL:
        return _BOOL, None
    if field.type in _INT32_RANGE:
        return _INT32, _INT32_RANGE[field.type]
    if field.type == FieldDescriptor.TYPE_ENUM:
        return _ENUM, {name: value.number for name, value in field.enum_type.values_by_name.items()}
    return _OTHER, None


def _parse(value: Any, message: Message) -> None:
    descriptor = message.DESCRIPTOR
    plan = _PLANS[descriptor] if descriptor in _PLANS else _plan(descriptor)
    if plan is None or not isinstance(value, dict):
        ParseDict(value, message, ignore_unknown_fields=True)
        return
    oneofs: set[str] = set()
    for name, item in value.items():
        entry = plan.get(name)
        if entry is None or item is None:
            raise Unparsed(name)
        attribute, oneof, repeated, kind, detail = entry
        if oneof is not None:
            if oneof in oneofs:
                raise Unparsed(name)
            oneofs.add(oneof)
        if repeated:
            if not isinstance(item, list) or kind == _MAP:
                raise Unparsed(name)
            target = getattr(message, attribute)
            if kind == _MESSAGE:
                for element in item:
                    _parse(element, target.add())
            else:
                for element in item:
                    target.append(_scalar(kind, detail, element, name))
        elif kind == _MESSAGE:
            child = getattr(message, attribute)
            child.SetInParent()
            _parse(item, child)
        else:
            setattr(message, attribute, _scalar(kind, detail, item, name))


def _scalar(kind: int, detail: Any, value: Any, name: str) -> Any:
    if kind == _STRING and isinstance(value, str):
        return value
    if kind == _BOOL and isinstance(value, bool):
        return value
    if kind == _INT32 and isinstance(value, int) and not isinstance(value, bool):
        low, high = detail
        if low <= value <= high:
            return value
    if kind == _ENUM and isinstance(value, str):
        number = detail.get(value)
        if number is not None:
            return number
    raise Unparsed(name)
