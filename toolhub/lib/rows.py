"""Many new rows of one model in one multi-row INSERT, for the hot paths (the event log, a
turn's provider-call records).

``rows_insert`` is a statement of its own. ``rows_values`` gives the same rows as a
PostgreSQL ``VALUES`` list for an ``INSERT … SELECT`` inside a larger statement (a
data-modifying ``WITH``), so rows can be written only if an earlier step of that statement
matched, in the statement's one round trip. Only model metadata and the caller's own SQL
expressions are interpolated; every value is a parameter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models


def _fields(objects: Sequence[models.Model]) -> list[Any]:
    return [field for field in objects[0]._meta.concrete_fields if not field.primary_key]


def rows_insert(objects: Sequence[models.Model]) -> None:
    """Insert new rows of one model in one multi-row INSERT, without reading back their
    ids: on the turn's hot path the ORM's ``create`` and ``bulk_create`` cost several times
    the statement. Defaults and ``auto_now_add`` must already be set on the objects."""
    if not objects:
        return
    fields = _fields(objects)
    table = connection.ops.quote_name(objects[0]._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(str(field.column)) for field in fields)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([row_sql] * len(objects)),  # noqa: S608
            [
                field.get_db_prep_save(getattr(obj, field.attname), connection)
                for obj in objects
                for field in fields
            ],
        )


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
    fields = _fields(objects)
    computed = computed or {}
    table = connection.ops.quote_name(objects[0]._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(str(field.column)) for field in fields)
    casts = [f"%s::{field.db_type(connection)}" for field in fields]
    rows = []
    params: list[Any] = []
    for index, obj in enumerate(objects):
        cells = []
        for field, cast in zip(fields, casts, strict=True):
            if field.name in computed:
                cells.append(computed[field.name][index])
            else:
                cells.append(cast)
                params.append(field.get_db_prep_save(getattr(obj, field.attname), connection))
        rows.append("(" + ", ".join(cells) + ")")
    return table, columns, "VALUES " + ", ".join(rows), params
