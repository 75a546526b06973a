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

Convert = Callable[[Any], Any]

_PLAIN = {
    FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32,
}
_WIDE = {
    FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64,
}
_CONVERTERS: dict[FieldDescriptor, tuple[str, bool, Convert]] = {}
"""Per field: its JSON name, whether it is repeated, and the converter of one value."""


class Unsupported(Exception):
    """A field this module leaves to `MessageToDict`."""


def to_dict(message: Message) -> dict[str, Any]:
    """`MessageToDict(message)` with its default options."""
    if message.DESCRIPTOR.full_name.startswith("google.protobuf."):
        return MessageToDict(message)
    try:
        return _fields(message)
    except Unsupported:
        return MessageToDict(message)


def _fields(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        name, repeated, convert = _CONVERTERS.get(field) or _converter(field)
        out[name] = [convert(item) for item in value] if repeated else convert(value)
    return out


def _converter(field: FieldDescriptor) -> tuple[str, bool, Convert]:
    """How one field's value (each item of a repeated field) becomes JSON; whole-field fallbacks for the rest."""
    kind = field.type
    convert: Convert
    if kind in _PLAIN:
        convert = _same
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
    _CONVERTERS[field] = (field.json_name, field.is_repeated, convert)
    return _CONVERTERS[field]


def _same(value: Any) -> Any:
    return value


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


def from_dict(value: dict[str, Any], message: Message) -> Message:
    """`ParseDict(value, message, ignore_unknown_fields=True)`, parsed here where the JSON is plain (fields by their
    JSON names, strings, booleans, 32-bit integers, enum names, objects and lists; no nulls, no member of a oneof
    set twice) and by `ParseDict` otherwise, so the result and every error are `ParseDict`'s."""
    try:
        _parse(value, message)
    except (Unparsed, ValueError, TypeError):
        message.Clear()
        return ParseDict(value, message, ignore_unknown_fields=True)
    return message


def _parse(value: Any, message: Message) -> None:
    descriptor = message.DESCRIPTOR
    if not isinstance(value, dict) or descriptor.full_name.startswith("google.protobuf."):
        ParseDict(value, message, ignore_unknown_fields=True)
        return
    fields = descriptor.fields_by_camelcase_name
    oneofs: set[str] = set()
    for name, item in value.items():
        field = fields.get(name)
        if field is None or field.json_name != name or item is None:
            raise Unparsed(name)
        if field.containing_oneof is not None:
            if field.containing_oneof.name in oneofs:
                raise Unparsed(name)
            oneofs.add(field.containing_oneof.name)
        if field.is_repeated:
            if not isinstance(item, list) or (field.message_type is not None and _is_map(field.message_type)):
                raise Unparsed(name)
            target = getattr(message, field.name)
            for element in item:
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    _parse(element, target.add())
                else:
                    target.append(_scalar(field, element))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            child = getattr(message, field.name)
            child.SetInParent()
            _parse(item, child)
        else:
            setattr(message, field.name, _scalar(field, item))


def _scalar(field: FieldDescriptor, value: Any) -> Any:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING and isinstance(value, str):
        return value
    if kind == FieldDescriptor.TYPE_BOOL and isinstance(value, bool):
        return value
    if kind in _INT32_RANGE and isinstance(value, int) and not isinstance(value, bool):
        low, high = _INT32_RANGE[kind]
        if low <= value <= high:
            return value
    if kind == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        known = field.enum_type.values_by_name.get(value)
        if known is not None:
            return known.number
    raise Unparsed(field.full_name)
