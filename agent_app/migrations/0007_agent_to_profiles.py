"""Agents live in profiles_app now (profiles_app 0004): forget the model here, state only,
so the table and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("agent_app", "0006_mcp_approve_destructive"),
        ("sessions_app", "0006_agent_in_profiles"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Agent")]
        ),
    ]
