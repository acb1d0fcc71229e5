"""A session's agent is ``profiles_app.Agent`` now (the same table): state only."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0005_intent_field"),
        ("profiles_app", "0004_agent"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="chatsession",
                    name="agent",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="sessions",
                        to="profiles_app.agent",
                    ),
                ),
            ]
        ),
    ]
