"""The Protobuf compatibility rule table: every kind of change and whether it breaks readers.

The names and the table are Confluent's (``Difference.Type`` and ``SchemaDiff.COMPATIBLE_CHANGES``
in confluentinc/schema-registry, ``protobuf-provider/src/main/java/io/confluent/kafka/
schemaregistry/protobuf/diff/``), which implement the "Protobuf compatibility rules" of
https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/serdes-protobuf.html
and Protobuf's own "Updating A Message Type" (https://protobuf.dev/programming-guides/proto3/#updating).
A change is *compatible* when data written with the original can be read with the update.
:mod:`lockgate.schema_registry.protobuf_compatibility` finds the changes.

One difference is Lockgate's, not in Confluent's released table: ``RESERVED_NUMBER_REUSED``
(Protobuf's rule "never reuse a reserved field number").
"""

from __future__ import annotations

import enum


class Change(enum.Enum):
    """A kind of difference between an original schema and its update (Confluent's names)."""

    #: The file's ``package`` changed (compatible: messages match by their local names).
    PACKAGE_CHANGED = "PACKAGE_CHANGED"
    MESSAGE_ADDED = "MESSAGE_ADDED"
    #: A message type the original defines is gone.
    MESSAGE_REMOVED = "MESSAGE_REMOVED"
    #: A message moved to another place in the file (message indexes are per schema id).
    MESSAGE_MOVED = "MESSAGE_MOVED"
    ENUM_ADDED = "ENUM_ADDED"
    ENUM_REMOVED = "ENUM_REMOVED"
    ENUM_CONST_ADDED = "ENUM_CONST_ADDED"
    #: An enum number now has another name.
    ENUM_CONST_CHANGED = "ENUM_CONST_CHANGED"
    ENUM_CONST_REMOVED = "ENUM_CONST_REMOVED"
    FIELD_ADDED = "FIELD_ADDED"
    FIELD_REMOVED = "FIELD_REMOVED"
    #: The field with this number has another name (the wire only knows numbers).
    FIELD_NAME_CHANGED = "FIELD_NAME_CHANGED"
    #: Scalar, message and map are different kinds: no change between them is compatible.
    FIELD_KIND_CHANGED = "FIELD_KIND_CHANGED"
    #: A scalar moved out of its wire-compatible group (int32/uint32/int64/uint64/bool/enum;
    #: sint32/sint64; fixed32/sfixed32; fixed64/sfixed64; string/bytes; float; double).
    FIELD_SCALAR_KIND_CHANGED = "FIELD_SCALAR_KIND_CHANGED"
    #: A message field's type is another message (by local name), or an incompatible one.
    FIELD_NAMED_TYPE_CHANGED = "FIELD_NAMED_TYPE_CHANGED"
    #: A numeric field changed between optional, required and repeated.
    FIELD_NUMERIC_LABEL_CHANGED = "FIELD_NUMERIC_LABEL_CHANGED"
    #: A string/bytes field changed between optional and repeated (same wire encoding).
    FIELD_STRING_OR_BYTES_LABEL_CHANGED = "FIELD_STRING_OR_BYTES_LABEL_CHANGED"
    REQUIRED_FIELD_ADDED = "REQUIRED_FIELD_ADDED"
    REQUIRED_FIELD_REMOVED = "REQUIRED_FIELD_REMOVED"
    ONEOF_ADDED = "ONEOF_ADDED"
    ONEOF_REMOVED = "ONEOF_REMOVED"
    ONEOF_FIELD_ADDED = "ONEOF_FIELD_ADDED"
    ONEOF_FIELD_REMOVED = "ONEOF_FIELD_REMOVED"
    #: More than one plain field moved into one ``oneof`` (data may set several).
    MULTIPLE_FIELDS_MOVED_TO_ONEOF = "MULTIPLE_FIELDS_MOVED_TO_ONEOF"
    #: A plain field moved into a ``oneof`` that already existed.
    FIELD_MOVED_TO_EXISTING_ONEOF = "FIELD_MOVED_TO_EXISTING_ONEOF"
    #: Lockgate's: a field (or enum value) of the update takes a number the original reserved
    #: (and whose name the original did not reserve with it: that would be the retired field
    #: itself).
    RESERVED_NUMBER_REUSED = "RESERVED_NUMBER_REUSED"


#: The rule table: the changes that keep data written with the original readable with the
#: update (Confluent's ``SchemaDiff.COMPATIBLE_CHANGES``); every other change breaks.
COMPATIBLE_CHANGES = frozenset(
    {
        Change.PACKAGE_CHANGED,
        Change.MESSAGE_ADDED,
        Change.MESSAGE_MOVED,
        Change.ENUM_ADDED,
        Change.ENUM_REMOVED,
        Change.ENUM_CONST_ADDED,
        Change.ENUM_CONST_CHANGED,
        Change.ENUM_CONST_REMOVED,
        Change.FIELD_ADDED,
        Change.FIELD_REMOVED,
        Change.FIELD_NAME_CHANGED,
        Change.FIELD_STRING_OR_BYTES_LABEL_CHANGED,
        Change.ONEOF_ADDED,
        Change.ONEOF_REMOVED,
        Change.ONEOF_FIELD_ADDED,
    }
)
