from django.db import migrations


def create_default_agent(apps, schema_editor):
    Agent = apps.get_model("agent_app", "Agent")
    Agent.objects.get_or_create(
        name="default",
        owner=None,
        defaults={"system_prompt": "You are a helpful assistant. Use tools when they help."},
    )


class Migration(migrations.Migration):
    dependencies = [("agent_app", "0001_initial")]

    operations = [migrations.RunPython(create_default_agent, migrations.RunPython.noop)]
