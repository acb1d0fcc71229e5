"""Rows of one model on the hot paths (the event log, a turn's provider-call records),
written and read by SQL built from the model's metadata instead of the ORM's per-call
query building.

``rows_insert`` is one multi-row INSERT, a statement of its own. ``rows_values`` gives
the same rows as a PostgreSQL ``VALUES`` list for an ``INSERT … SELECT`` inside a larger
statement (a data-modifying ``WITH``), so rows can be written only if an earlier step of
that statement matched, in the statement's one round trip. ``rows_read`` turns fetched
rows into the values the ORM would give, and ``row_model`` a model's whole row into its
instance (``from_db``); ``compiled_once`` keeps a queryset's own SQL,
compiled once, to run again with other values. Only model metadata and the caller's own
SQL expressions are interpolated; every value is a parameter.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections, models

# Per model: its quoted table, its column list, and each field with its placeholder cast
# to the column's type (a process has one database, and its models do not change).
_shapes: dict[type[models.Model], tuple[str, str, list[tuple[Any, str]]]] = {}


def _shape(model: type[models.Model]) -> tuple[str, str, list[tuple[Any, str]]]:
    shape = _shapes.get(model)
    if shape is None:
        fields = [field for field in model._meta.concrete_fields if not field.primary_key]
        shape = _shapes[model] = (
            connection.ops.quote_name(model._meta.db_table),
            ", ".join(connection.ops.quote_name(str(field.column)) for field in fields),
            [(field, f"%s::{field.db_type(connection)}") for field in fields],
        )
    return shape


def rows_insert(objects: Sequence[models.Model]) -> None:
    """Insert new rows of one model in one multi-row INSERT, without reading back their
    ids: on the turn's hot path the ORM's ``create`` and ``bulk_create`` cost several times
    the statement. Defaults and ``auto_now_add`` must already be set on the objects."""
    if not objects:
        return
    table, columns, shape = _shape(type(objects[0]))
    fields = [field for field, _ in shape]
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    db = this_connection()
    with db.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([row_sql] * len(objects)),  # noqa: S608
            [
                field.get_db_prep_save(getattr(obj, field.attname), db)
                for obj in objects
                for field in fields
            ],
        )


def this_connection() -> Any:
    """This thread's connection itself, for code that uses it many times (a row's fields,
    once each): every use of ``django.db.connection`` looks it up again."""
    return connections[DEFAULT_DB_ALIAS]


def rows_values(
    objects: Sequence[models.Model], *, computed: Mapping[str, Sequence[str]] | None = None
) -> tuple[str, str, str, list[Any]]:
    """The quoted table, its column list, a ``VALUES`` list of ``objects`` and its
    parameters, for ``INSERT INTO table (columns) SELECT v.* FROM …, LATERAL (values) v``
    on PostgreSQL.

    Each placeholder is cast to its column's type: a literal in a ``VALUES`` list outside
    an INSERT's own has no type, and text does not go into a ``jsonb`` column by itself.
    ``computed`` maps a field's name to one SQL expression per object (the caller's own
    SQL, never input), written in that field's place instead of a parameter.
    """
    table, columns, fields = _shape(type(objects[0]))
    computed = computed or {}
    db = this_connection()
    rows = []
    params: list[Any] = []
    for index, obj in enumerate(objects):
        cells = []
        for field, placeholder in fields:
            if field.name in computed:
                cells.append(computed[field.name][index])
            else:
                cells.append(placeholder)
                params.append(field.get_db_prep_save(getattr(obj, field.attname), db))
        rows.append("(" + ", ".join(cells) + ")")
    return table, columns, "VALUES " + ", ".join(rows), params


def rows_read(model: type[models.Model], names: Sequence[str]) -> Any:
    """A reader of ``names`` (fields of ``model``) from rows fetched by hand-written SQL:
    ``read(row)`` gives the row's values as the ORM would (its converters applied, as in a
    ``values_list``: JSON decoded, SQLite's datetimes made aware), for a hot read whose
    query the ORM would build anew each time at several times the statement's cost."""
    steps = []
    for name in names:
        field = cast("models.Field[Any, Any]", model._meta.get_field(name))
        column = field.get_col(model._meta.db_table)
        converters = [
            *connection.ops.get_db_converters(column),
            *column.get_db_converters(connection),
        ]
        steps.append((column, converters))

    def read(row: Sequence[Any]) -> tuple[Any, ...]:
        db = this_connection()
        values = []
        for value, (column, converters) in zip(row, steps, strict=True):
            for converter in converters:
                value = converter(value, column, db)
            values.append(value)
        return tuple(values)

    return read


@dataclass(frozen=True)
class RowModel:
    """A model's whole row, read by hand-written SQL: the columns to select, in order, and
    the instance made from them as the ORM makes it (converters applied, ``from_db``)."""

    model: type[models.Model]
    attnames: tuple[str, ...]
    read: Callable[[Sequence[Any]], tuple[Any, ...]]

    def columns(self, table: str = "") -> str:
        """The model's columns in row order, each after ``table.`` when given."""
        prefix = f"{table}." if table else ""
        quote = connection.ops.quote_name
        return ", ".join(
            f"{prefix}{quote(str(field.column))}" for field in self.model._meta.concrete_fields
        )

    def make(self, row: Sequence[Any]) -> Any:
        """The instance from the first ``len(attnames)`` values of ``row``."""
        values = self.read(row[: len(self.attnames)])
        return self.model.from_db(this_connection().alias, self.attnames, values)


@functools.cache
def row_model(model: type[models.Model]) -> RowModel:
    """``model``'s ``RowModel`` (made once per process: a model does not change)."""
    attnames = tuple(field.attname for field in model._meta.concrete_fields)
    return RowModel(model=model, attnames=attnames, read=rows_read(model, attnames))


@dataclass(frozen=True)
class CompiledQuery:
    """A queryset's statement as the ORM compiled it once, run again with new values in
    the places of the placeholder values it was built with (``compiled_once``)."""

    sql: str
    params: tuple[Any, ...]
    # Where each placeholder value sits in ``params``, in the order ``rows`` takes values.
    slots: tuple[int, ...]
    # Column position -> (its converters, its expression), as the ORM's compiler has them.
    converters: tuple[tuple[int, tuple[Any, ...], Any], ...]

    def rows(self, *values: Any) -> list[list[Any]]:
        """The statement's rows with ``values`` (ready for the database) in the
        placeholders' places, each column converted as the ORM would."""
        params = list(self.params)
        for slot, value in zip(self.slots, values, strict=True):
            params[slot] = value
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
            rows = [list(row) for row in cursor.fetchall()]
        for row in rows:
            for position, converters, expression in self.converters:
                value = row[position]
                for converter in converters:
                    value = converter(value, expression, connection)
                row[position] = value
        return rows


def compiled_once(queryset: models.QuerySet[Any], *placeholders: Any) -> CompiledQuery:
    """``queryset``'s SQL and its columns' converters, compiled now, to run many times:
    building and compiling a query costs the ORM several times a short statement, on every
    call. Each of ``placeholders`` is a value the queryset was built with (unlike any other
    value of the query) that ``CompiledQuery.rows`` replaces, in that order. The SQL is the
    ORM's own for this database, so a hot read keeps the query it had."""
    compiler = queryset.query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    slots = []
    for placeholder in placeholders:
        found = [index for index, value in enumerate(params) if value == placeholder]
        if len(found) != 1:
            raise ValueError(f"placeholder {placeholder!r} is {len(found)} of the parameters")
        slots.append(found[0])
    columns = [column for column, _, _ in compiler.select[: compiler.col_count]]
    converters = tuple(
        (position, tuple(found), expression)
        for position, (found, expression) in compiler.get_converters(columns).items()
    )
    return CompiledQuery(sql=sql, params=tuple(params), slots=tuple(slots), converters=converters)
