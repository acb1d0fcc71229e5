"""Many new rows of one model in one multi-row INSERT, for the hot paths (the event log, a
turn's provider-call records)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection, models


def rows_insert(objects: Sequence[models.Model]) -> None:
    """Insert new rows of one model in one multi-row INSERT, without reading back their
    ids: on the turn's hot path the ORM's ``create`` and ``bulk_create`` cost several times
    the statement. Defaults and ``auto_now_add`` must already be set on the objects."""
    if not objects:
        return
    fields = [field for field in objects[0]._meta.concrete_fields if not field.primary_key]
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
