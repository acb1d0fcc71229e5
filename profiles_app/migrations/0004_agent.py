"""Agents (agent profiles) move here from agent_app: state only. The table, its rows and its
constraints keep their names, so no row moves; the content type follows, so the admin log
of every agent stays attached to it."""

import django.core.validators
import django.db.models.deletion
import toolhub.lib.intent_field
from django.conf import settings
from django.db import migrations, models


def _move(apps, source, target):
    """The agent's content type goes from ``source`` to ``target``. If ``target`` exists
    already (made after an earlier move back), the admin log moves onto it instead."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    LogEntry = apps.get_model("admin", "LogEntry")
    old = ContentType.objects.filter(app_label=source, model="agent").first()
    if old is None:
        return
    new = ContentType.objects.filter(app_label=target, model="agent").first()
    if new is None:
        ContentType.objects.filter(pk=old.pk).update(app_label=target)
        return
    LogEntry.objects.filter(content_type=old).update(content_type=new)
    old.delete()


def move_content_type(apps, schema_editor):
    _move(apps, "agent_app", "profiles_app")


def move_content_type_back(apps, schema_editor):
    _move(apps, "profiles_app", "agent_app")


class Migration(migrations.Migration):

    dependencies = [
        ('profiles_app', '0003_new_chat_default'),
        ('agent_app', '0006_mcp_approve_destructive'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('admin', '0003_logentry_add_action_flag_choices'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.CreateModel(
            name='Agent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9][A-Za-z0-9 _.-]{0,62}[A-Za-z0-9]$|^[A-Za-z0-9]$', '1 to 64 letters, digits, spaces, dots, dashes or underscores, starting and ending with a letter or digit.')])),
                ('version', models.PositiveIntegerField(default=1)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('updated', models.DateTimeField(auto_now=True)),
                ('system_prompt', models.TextField(blank=True, max_length=20000)),
                ('provider', models.CharField(blank=True, choices=[('', 'The configured default'), ('demo', 'Demo (offline)'), ('anthropic', 'Anthropic'), ('openai', 'OpenAI-compatible')], max_length=16)),
                ('model', models.CharField(blank=True, max_length=100)),
                ('context_window', models.PositiveIntegerField(default=200000)),
                ('tool_intent', toolhub.lib.intent_field.IntentField(blank=True, default=dict)),
                ('strategy', models.CharField(choices=[('call_tool', 'call_tool (array never changes)'), ('promote', 'promote (found tools join the array)'), ('native', 'native (provider-side deferral)')], default='call_tool', max_length=16)),
                ('tier_budget', models.PositiveIntegerField(blank=True, help_text='Resident tool tokens; empty: 5% of the window.', null=True)),
                ('owner', models.ForeignKey(blank=True, help_text='Empty for a shared one (staff only).', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='%(class)ss', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'db_table': 'agent_app_agent',
                'ordering': ['name', 'id'],
                'abstract': False,
                'constraints': [models.UniqueConstraint(fields=('owner', 'name'), name='agent_app_agent_unique_per_owner'), models.UniqueConstraint(condition=models.Q(('owner__isnull', True)), fields=('name',), name='agent_app_agent_unique_shared_name')],
            },
        )]),
        migrations.RunPython(move_content_type, move_content_type_back),
    ]
