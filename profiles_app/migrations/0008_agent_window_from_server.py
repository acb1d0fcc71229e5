"""An agent's context window is empty unless someone set one: then the model's server says
it. 200,000 was the old default that nobody chose, so it becomes empty."""

from django.db import migrations, models


def default_to_empty(apps, schema_editor):
    apps.get_model("profiles_app", "Agent").objects.filter(context_window=200_000).update(
        context_window=None
    )


def empty_to_default(apps, schema_editor):
    apps.get_model("profiles_app", "Agent").objects.filter(context_window=None).update(
        context_window=200_000
    )


class Migration(migrations.Migration):
    dependencies = [("profiles_app", "0007_agent_description_plan_mode")]

    operations = [
        migrations.AlterField(
            model_name="agent",
            name="context_window",
            field=models.PositiveIntegerField(
                blank=True,
                default=None,
                help_text="Tokens; empty: as the model's server reports. Smaller than the "
                "server's keeps conversations shorter; larger is not used.",
                null=True,
            ),
        ),
        migrations.RunPython(default_to_empty, empty_to_default),
    ]
