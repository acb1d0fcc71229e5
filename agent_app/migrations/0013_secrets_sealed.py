"""Secrets at rest: the columns become text holding Fernet tokens (toolhub.lib.sealing),
and every value already stored is sealed in place (and opened again on the way back)."""

from django.db import migrations

import toolhub.lib.sealing

SEALED = [
    ("agent_app_mcpserver", "env"),
    ("agent_app_mcpserver", "headers"),
    ("agent_app_mcpserver", "oauth_client_secret"),
    ("agent_app_mcpoauthgrant", "tokens"),
    ("agent_app_mcpoauthgrant", "client_info"),
    ("agent_app_mcpoauthsignin", "code_verifier"),
    ("agent_app_mcpoauthsignin", "client_info"),
    ("agent_app_mcpcredential", "value"),
]


def _rewrite(schema_editor, change):
    """Each stored value through ``change`` (``None``: leave it), in raw SQL, so the
    fields' own sealing does not apply twice."""
    connection = schema_editor.connection
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table, column in SEALED:
            cursor.execute(
                f"SELECT id, {quote(column)} FROM {quote(table)} WHERE {quote(column)} IS NOT NULL"
            )
            for pk, value in cursor.fetchall():
                changed = change(value)
                if changed is not None:
                    cursor.execute(
                        f"UPDATE {quote(table)} SET {quote(column)} = %s WHERE id = %s",
                        [changed, pk],
                    )


def _opens(value):
    try:
        toolhub.lib.sealing.unseal(value)
    except toolhub.lib.sealing.SealError:
        return False
    return True


def seal_stored(apps, schema_editor):
    # Idempotent: a value that already opens is left as it is.
    _rewrite(
        schema_editor, lambda value: None if _opens(value) else toolhub.lib.sealing.seal(value)
    )


def open_stored(apps, schema_editor):
    _rewrite(
        schema_editor,
        lambda value: toolhub.lib.sealing.unseal(value) if _opens(value) else None,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("agent_app", "0012_mcp_personal_credentials"),
    ]

    operations = [
        migrations.AlterField(
            model_name="mcpcredential",
            name="value",
            field=toolhub.lib.sealing.SealedTextField(),
        ),
        migrations.AlterField(
            model_name="mcpoauthgrant",
            name="client_info",
            field=toolhub.lib.sealing.SealedJSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="mcpoauthgrant",
            name="tokens",
            field=toolhub.lib.sealing.SealedJSONField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="mcpoauthsignin",
            name="client_info",
            field=toolhub.lib.sealing.SealedJSONField(default=dict),
        ),
        migrations.AlterField(
            model_name="mcpoauthsignin",
            name="code_verifier",
            field=toolhub.lib.sealing.SealedTextField(),
        ),
        migrations.AlterField(
            model_name="mcpserver",
            name="env",
            field=toolhub.lib.sealing.SealedJSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="mcpserver",
            name="headers",
            field=toolhub.lib.sealing.SealedJSONField(blank=True, default=dict),
        ),
        migrations.AlterField(
            model_name="mcpserver",
            name="oauth_client_secret",
            field=toolhub.lib.sealing.SealedTextField(blank=True, default=""),
        ),
        migrations.RunPython(seal_stored, open_stored, elidable=False),
    ]
