"""JSON Schema compatibility: which changes between two schemas break readers, with reasons.

No maintained Python library decides this, so the rules are written here, after Confluent's
(``SchemaDiff`` and its ``*SchemaDiff`` companions in confluentinc/schema-registry,
``json-schema-provider/src/main/java/io/confluent/kafka/schemaregistry/json/diff/``, and the
"JSON Schema compatibility rules" of
https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/serdes-json.html):

- :func:`differences` walks an *original* and an *update* schema and names every change
  (:class:`Change`), each with the JSON path where it happens;
- ``json_rules.COMPATIBLE_CHANGES`` is the rule table: a change in it keeps every document
  the original accepted acceptable to the update; any other change is a reason to refuse;
- BACKWARD compares (original = the old version, update = the new schema), FORWARD the
  reverse, FULL both, as Confluent's ``JsonSchema.isBackwardCompatible`` does.

Content models, as Confluent names them: an object is *open* when it has no
``patternProperties`` and ``additionalProperties`` is absent or ``true``; *closed* when
``additionalProperties`` is ``false``; *partially open* when ``additionalProperties`` is a
schema or ``patternProperties`` is set. Adding a property to an open model narrows what it
accepts (incompatible unless the property's schema is empty); removing one from a closed
model does too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import referencing.exceptions

from lockgate.schema_registry.compatibility import Difference
from lockgate.schema_registry.errors import InvalidSchemaError
from lockgate.schema_registry.json_rules import COMPATIBLE_CHANGES, Change
from lockgate.schema_registry.json_schema import JsonSchemaModel

if TYPE_CHECKING:
    from referencing._core import Resolver


def reader_writer_incompatibilities(
    reader: JsonSchemaModel, writer: JsonSchemaModel
) -> list[Difference]:
    """Every breaking change between the ``writer``'s schema and the ``reader``'s (empty: none).

    The reader accepts every document the writer accepted exactly when no change from the
    writer (original) to the reader (update) is outside :data:`COMPATIBLE_CHANGES`.
    """
    return [d for d in differences(writer, reader) if not d.compatible]


def differences(original: JsonSchemaModel, update: JsonSchemaModel) -> list[Difference]:
    """Every change from ``original`` to ``update``, compatible or not."""
    walker = _Walker()
    try:
        walker.compare(
            _Node(original.document, original.resolver),
            _Node(update.document, update.resolver),
            "#",
        )
    except RecursionError:
        raise InvalidSchemaError(
            "Invalid schema: nested too deeply to compare with the subject's versions",
            field="schema",
        ) from None
    return walker.found


@dataclass(frozen=True)
class _Node:
    """A (sub)schema and the resolver its ``$ref`` resolve with."""

    schema: Any
    resolver: Resolver[Any]

    def resolved(self) -> _Node:
        node = self
        for _ in range(64):  # a chain of $ref ends long before this
            if not (isinstance(node.schema, dict) and isinstance(node.schema.get("$ref"), str)):
                break
            try:
                found = node.resolver.lookup(node.schema["$ref"])
            except referencing.exceptions.Unresolvable:
                break
            node = _Node(found.contents, found.resolver)
        return node

    def child(self, schema: Any) -> _Node:
        return _Node(schema, self.resolver)


#: Keys that annotate without constraining: a schema of only these accepts everything.
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "id", "title", "description", "default", "examples", "$comment",
     "definitions", "$defs", "readOnly", "writeOnly", "deprecated"}
)  # fmt: skip
_COMBINERS = ("allOf", "anyOf", "oneOf")
_OBJECT_KEYS = frozenset(
    {"properties", "required", "additionalProperties", "patternProperties",
     "minProperties", "maxProperties", "dependencies"}
)  # fmt: skip
_ARRAY_KEYS = frozenset({"items", "additionalItems", "minItems", "maxItems", "uniqueItems"})
_STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format"})
_NUMBER_KEYS = frozenset(
    {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)


def _is_empty(schema: Any) -> bool:
    return schema is True or (isinstance(schema, dict) and set(schema) <= _ANNOTATIONS)


def _kind(schema: Any) -> str:
    """What everit (Confluent's parser) would make of the schema: its schema class."""
    if schema is False:
        return "false"
    if _is_empty(schema):
        return "empty"
    if any(key in schema for key in _COMBINERS):
        return "combined"
    declared = schema.get("type")
    if isinstance(declared, list):
        return "combined" if len(declared) > 1 else _type_kind(declared[0] if declared else None)
    if declared is not None:
        return _type_kind(declared)
    keys = set(schema)
    if "enum" in keys or "const" in keys:
        return "enum"
    for kind, kind_keys in (
        ("object", _OBJECT_KEYS),
        ("array", _ARRAY_KEYS),
        ("string", _STRING_KEYS),
        ("number", _NUMBER_KEYS),
    ):
        if keys & kind_keys:
            return kind
    return "not" if "not" in keys else "empty"


def _type_kind(declared: Any) -> str:
    return "number" if declared in ("integer", "number") else str(declared)


def _combined(schema: dict[str, Any]) -> tuple[str, list[Any]]:
    """A combined schema's criterion and subschemas (a type list is an anyOf of its types)."""
    for key in _COMBINERS:
        if key in schema:
            return key, list(schema[key])
    rest = {k: v for k, v in schema.items() if k != "type"}
    return "anyOf", [{**rest, "type": declared} for declared in schema["type"]]


def _enum_values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return list(values) if isinstance(values, list) else None


class _Walker:
    """One comparison; memoises pairs so recursive schemas terminate."""

    def __init__(self) -> None:
        self.found: list[Difference] = []
        self._active: set[tuple[int, int]] = set()

    def add(self, change: Change, path: str) -> None:
        self.found.append(Difference(change, path, compatible=change in COMPATIBLE_CHANGES))

    def compatible(
        self, original: _Node, update: _Node, path: str
    ) -> tuple[bool, list[Difference]]:
        """Compare in a sub-walk: (no breaking change, the changes found)."""
        sub = _Walker()
        sub._active = self._active
        sub.compare(original, update, path)
        return all(d.compatible for d in sub.found), sub.found

    def compare(self, original_in: _Node | None, update_in: _Node | None, path: str) -> None:
        if original_in is None or update_in is None:
            if original_in is not None:
                self.add(Change.SCHEMA_REMOVED, path)
            elif update_in is not None:
                self.add(Change.SCHEMA_ADDED, path)
            return
        original, update = original_in.resolved(), update_in.resolved()
        key = (id(original.schema), id(update.schema))
        if key in self._active:
            return  # a recursive schema met again on its own path: assume compatible
        self._active.add(key)
        try:
            self._compare_resolved(original, update, path)
        finally:
            self._active.discard(key)

    def _compare_resolved(self, original: _Node, update: _Node, path: str) -> None:
        original_kind, update_kind = _kind(original.schema), _kind(update.schema)
        if original_kind != "combined" and update_kind == "combined":
            criterion, subschemas = _combined(update.schema)
            if len(subschemas) == 1 or criterion in ("anyOf", "oneOf"):
                for subschema in subschemas:
                    ok, found = self.compatible(original, update.child(subschema), path)
                    if ok:
                        self.found += found
                        if len(subschemas) > 1:
                            self.add(Change.SUM_TYPE_EXTENDED, path)
                        return
        elif original_kind == "combined" and update_kind != "combined":
            _, subschemas = _combined(original.schema)
            if len(subschemas) == 1:
                ok, found = self.compatible(original.child(subschemas[0]), update, path)
                if ok:
                    self.found += found
                    return
        if original_kind != update_kind:
            if original_kind != "false" and update_kind != "empty":
                self.add(Change.TYPE_CHANGED, path)
            return
        compare_kind = {
            "string": self._string,
            "number": self._number,
            "enum": self._enum,
            "combined": self._combined_schemas,
            "not": self._not,
            "object": self._object,
            "array": self._array,
        }.get(original_kind)
        if compare_kind is not None:
            compare_kind(original, update, path)
        if original_kind not in ("enum", "combined", "empty", "false"):
            self._enum(original, update, path)

    def bound(
        self,
        original: dict[str, Any],
        update: dict[str, Any],
        key: str,
        path: str,
        name: str,
    ) -> None:
        """A numeric bound: the change ``<name>_ADDED``, ``_INCREASED``, ``_DECREASED`` or
        ``_REMOVED``."""
        added, increased, decreased, removed = (
            Change[f"{name}_{suffix}"] for suffix in ("ADDED", "INCREASED", "DECREASED", "REMOVED")
        )
        before, after = original.get(key), update.get(key)
        if before == after or isinstance(before, bool) or isinstance(after, bool):
            return
        if before is None:
            self.add(added, f"{path}/{key}")
        elif after is None:
            self.add(removed, f"{path}/{key}")
        elif after > before:
            self.add(increased, f"{path}/{key}")
        else:
            self.add(decreased, f"{path}/{key}")

    def _string(self, original: _Node, update: _Node, path: str) -> None:
        o, u = original.schema, update.schema
        c = Change
        self.bound(o, u, "maxLength", path, "MAX_LENGTH")
        self.bound(o, u, "minLength", path, "MIN_LENGTH")
        before, after = o.get("pattern"), u.get("pattern")
        if before != after:
            change = (
                c.PATTERN_ADDED if before is None
                else c.PATTERN_REMOVED if after is None
                else c.PATTERN_CHANGED
            )  # fmt: skip
            self.add(change, f"{path}/pattern")

    def _number(self, original: _Node, update: _Node, path: str) -> None:
        o, u = original.schema, update.schema
        c = Change
        if o.get("type") == "integer" and u.get("type") == "number":
            self.add(c.TYPE_EXTENDED, f"{path}/type")
        elif o.get("type") == "number" and u.get("type") == "integer":
            self.add(c.TYPE_NARROWED, f"{path}/type")
        self.bound(o, u, "maximum", path, "MAXIMUM")
        self.bound(o, u, "minimum", path, "MINIMUM")
        self.bound(o, u, "exclusiveMaximum", path, "EXCLUSIVE_MAXIMUM")
        self.bound(o, u, "exclusiveMinimum", path, "EXCLUSIVE_MINIMUM")
        before, after = o.get("multipleOf"), u.get("multipleOf")
        if before != after:
            where = f"{path}/multipleOf"
            if before is None:
                self.add(c.MULTIPLE_OF_ADDED, where)
            elif after is None:
                self.add(c.MULTIPLE_OF_REMOVED, where)
            elif before % after == 0:
                self.add(c.MULTIPLE_OF_REDUCED, where)  # every old multiple is a new one
            elif after % before == 0:
                self.add(c.MULTIPLE_OF_EXPANDED, where)
            else:
                self.add(c.MULTIPLE_OF_CHANGED, where)

    def _enum(self, original: _Node, update: _Node, path: str) -> None:
        before, after = _enum_values(original.schema), _enum_values(update.schema)
        if before == after:
            return
        where = f"{path}/enum"
        if after is None:
            self.add(Change.ENUM_ARRAY_EXTENDED, where)
        elif before is None:
            self.add(Change.ENUM_ARRAY_NARROWED, where)
        elif all(value in after for value in before):
            self.add(Change.ENUM_ARRAY_EXTENDED, where)
        elif all(value in before for value in after):
            self.add(Change.ENUM_ARRAY_NARROWED, where)
        else:
            self.add(Change.ENUM_ARRAY_CHANGED, where)

    def _combined_schemas(self, original: _Node, update: _Node, path: str) -> None:
        criterion, before = _combined(original.schema)
        update_criterion, after = _combined(update.schema)
        if criterion != update_criterion:
            self.add(Change.COMBINED_TYPE_CHANGED, path)
            return
        product = criterion == "allOf"
        if len(before) < len(after):
            self.add(Change.PRODUCT_TYPE_EXTENDED if product else Change.SUM_TYPE_EXTENDED, path)
        elif len(before) > len(after):
            self.add(Change.PRODUCT_TYPE_NARROWED if product else Change.SUM_TYPE_NARROWED, path)
        # A sum must keep a match for each original branch; a product for each update branch.
        required, offered = (after, before) if product else (before, after)
        for index, branch in enumerate(required):
            matched = False
            for candidate in offered:
                pair = (candidate, branch) if product else (branch, candidate)
                ok, found = self.compatible(original.child(pair[0]), update.child(pair[1]), path)
                if ok:
                    self.found += found
                    matched = True
                    break
            if not matched:
                self.add(Change.COMBINED_TYPE_SUBSCHEMAS_CHANGED, f"{path}/{criterion}/{index}")

    def _not(self, original: _Node, update: _Node, path: str) -> None:
        # The update forbids less when its "not" is narrower than the original's.
        ok, _ = self.compatible(
            update.child(update.schema["not"]), original.child(original.schema["not"]), path
        )
        self.add(Change.NOT_TYPE_NARROWED if ok else Change.NOT_TYPE_EXTENDED, f"{path}/not")

    def _object(self, original: _Node, update: _Node, path: str) -> None:
        _ObjectRules(self, original, update, path).compare()

    def _array(self, original: _Node, update: _Node, path: str) -> None:
        o, u = original.schema, update.schema
        c = Change
        self.bound(o, u, "maxItems", path, "MAX_ITEMS")
        self.bound(o, u, "minItems", path, "MIN_ITEMS")
        if bool(o.get("uniqueItems")) != bool(u.get("uniqueItems")):
            change = c.UNIQUE_ITEMS_ADDED if u.get("uniqueItems") else c.UNIQUE_ITEMS_REMOVED
            self.add(change, f"{path}/uniqueItems")
        before, after = o.get("items"), u.get("items")
        if isinstance(before, list) or isinstance(after, list):
            before_items = before if isinstance(before, list) else []
            after_items = after if isinstance(after, list) else []
            for index in range(max(len(before_items), len(after_items))):
                self.compare(
                    original.child(before_items[index]) if index < len(before_items) else None,
                    update.child(after_items[index]) if index < len(after_items) else None,
                    f"{path}/items/{index}",
                )
            return
        self.compare(
            None if before is None else original.child(before),
            None if after is None else update.child(after),
            f"{path}/items",
        )


class _ObjectRules:
    """The object rules: required, properties by content model, additionalProperties."""

    def __init__(self, walker: _Walker, original: _Node, update: _Node, path: str) -> None:
        self.walker, self.original, self.update, self.path = walker, original, update, path
        self.o: dict[str, Any] = original.schema
        self.u: dict[str, Any] = update.schema

    def compare(self) -> None:
        self._required()
        self._properties()
        self._additional_properties()
        self.walker.bound(self.o, self.u, "maxProperties", self.path, "MAX_PROPERTIES")
        self.walker.bound(self.o, self.u, "minProperties", self.path, "MIN_PROPERTIES")

    def _required(self) -> None:
        before = set(self.o.get("required") or ())
        after = set(self.u.get("required") or ())
        after_properties = self.u.get("properties") or {}
        for name in self.o.get("properties") or {}:
            if name not in after_properties:
                continue
            where = f"{self.path}/required/{name}"
            if name in before and name not in after:
                self.walker.add(Change.REQUIRED_ATTRIBUTE_REMOVED, where)
            elif name in after and name not in before:
                has_default = _has_default(after_properties[name])
                self.walker.add(
                    Change.REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED
                    if has_default
                    else Change.REQUIRED_ATTRIBUTE_ADDED,
                    where,
                )

    def _properties(self) -> None:
        before: dict[str, Any] = self.o.get("properties") or {}
        after: dict[str, Any] = self.u.get("properties") or {}
        for name in sorted(set(before) | set(after)):
            where = f"{self.path}/properties/{name}"
            if name not in after:
                self._removed(name, before[name], where)
            elif name not in before:
                self._added(name, after[name], where)
            else:
                self.walker.compare(
                    self.original.child(before[name]), self.update.child(after[name]), where
                )

    def _removed(self, name: str, schema: Any, where: str) -> None:
        # Only the update's content model matters: it must still accept the old property.
        if _is_open(self.u):
            self.walker.add(Change.PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL, where)
            return
        partial = _partial_schema(self.u, name)
        if partial is not None:
            self._covered(
                self.original.child(schema),
                self.update.child(partial),
                where,
                Change.PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                Change.PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
            )
        elif schema is False:
            self.walker.add(Change.PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL, where)
        else:
            self.walker.add(Change.PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL, where)

    def _added(self, name: str, schema: Any, where: str) -> None:
        # Only the original's content model matters: what could the property hold before?
        if _is_open(self.o):
            self.walker.add(
                Change.PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL
                if _is_empty(schema)
                else Change.PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL,
                where,
            )
            return
        partial = _partial_schema(self.o, name)
        if partial is not None:
            self._covered(
                self.original.child(partial),
                self.update.child(schema),
                where,
                Change.PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
                Change.PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL,
            )
        if name in (self.u.get("required") or ()):
            self.walker.add(
                Change.REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
                if _has_default(schema)
                else Change.REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL,
                where,
            )
        else:
            self.walker.add(Change.OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL, where)

    def _covered(
        self, original: _Node, update: _Node, where: str, covered: Change, not_covered: Change
    ) -> None:
        """A property met by a partially open model's schema: covered if that schema fits."""
        ok, found = self.walker.compatible(original, update, where)
        self.walker.found += found
        self.walker.add(covered if ok else not_covered, where)

    def _additional_properties(self) -> None:
        where = f"{self.path}/additionalProperties"
        before, after = self.o.get("additionalProperties"), self.u.get("additionalProperties")
        if (before is not False) != (after is not False):
            self.walker.add(
                Change.ADDITIONAL_PROPERTIES_ADDED
                if after is not False
                else Change.ADDITIONAL_PROPERTIES_REMOVED,
                where,
            )
            return
        before_schema = before if isinstance(before, dict) else None
        after_schema = after if isinstance(after, dict) else None
        if before_schema is None and after_schema is not None:
            self.walker.add(Change.ADDITIONAL_PROPERTIES_NARROWED, where)
        elif after_schema is None and before_schema is not None:
            self.walker.add(Change.ADDITIONAL_PROPERTIES_EXTENDED, where)
        elif before_schema is not None and after_schema is not None:
            self.walker.compare(
                self.original.child(before_schema), self.update.child(after_schema), where
            )


def _has_default(schema: Any) -> bool:
    return isinstance(schema, dict) and "default" in schema


def _is_open(schema: dict[str, Any]) -> bool:
    additional = schema.get("additionalProperties", True)
    return not schema.get("patternProperties") and additional is True


def _partial_schema(schema: dict[str, Any], name: str) -> Any:
    """The schema a partially open model gives an undeclared property ``name``, or None."""
    for pattern, pattern_schema in (schema.get("patternProperties") or {}).items():
        if re.search(pattern, name):
            return pattern_schema
    additional = schema.get("additionalProperties")
    return additional if isinstance(additional, dict) else None
