"""The admin as operators use it: sections named as people say them, the records the
product writes read-only (no Add, no edit, no delete), search where they look things up,
and each row linking to the page that shows it in the product."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import LogEntry

from profiles_app.models import Agent
from profiles_app.services import tool_disable_globally
from sessions_app.eventlog import event_append
from sessions_app.models import ProviderCall, SessionEvent
from sessions_app.services import session_create

pytestmark = pytest.mark.django_db

LOGS = {
    "sessions_app/sessionevent": "chat events",
    "sessions_app/providercall": "model calls",
    "agent_app/toolrun": "worker tool runs",
    "admin/logentry": "log entries",
}


@pytest.fixture
def root(django_user_model, client):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-123-xyz")
    client.force_login(user)
    return user


def test_the_sections_and_models_are_named_as_people_say_them(client, root):
    page = client.get("/admin/").content.decode()
    for name in ("Chats", "Tools, profiles and agents", "Runtime: worker runs, notes and MCP"):
        assert name in page
    for name in ("Chat events", "Model calls", "Worker tool runs", "Approval policies"):
        assert name in page
    captions = re.findall(r'class="section"[^>]*>([^<]+)</a>', page)
    assert not [caption for caption in captions if "_app" in caption.lower()], captions


def test_the_records_the_product_writes_are_read_only(client, root, owner):
    session = session_create(user=owner)
    event_append(session_id=session.pk, turn="t", kind="user_message", data={"text": "x"})
    event = SessionEvent.objects.get(session=session)
    call = ProviderCall.objects.create(session=session, turn="t", model="demo", fingerprint="f")
    tool_disable_globally(user=root, tool="bash", reason="test")
    rows = {
        "sessions_app/sessionevent": event.pk,
        "sessions_app/providercall": call.pk,
        "admin/logentry": LogEntry.objects.first().pk,
    }
    for model in LOGS:
        listing = client.get(f"/admin/{model}/")
        assert listing.status_code == 200, model
        assert f"/admin/{model}/add/" not in listing.content.decode(), model
        assert client.get(f"/admin/{model}/add/").status_code == 403, model
    for model, pk in rows.items():
        assert client.get(f"/admin/{model}/{pk}/change/").status_code == 200, model
        assert client.post(f"/admin/{model}/{pk}/change/", {}).status_code == 403, model
        assert client.post(f"/admin/{model}/{pk}/delete/", {"post": "yes"}).status_code == 403
    assert ProviderCall.objects.filter(pk=call.pk).exists()


def test_rows_link_to_the_product_where_the_viewer_may_open_them(client, root, owner):
    mine = session_create(user=root, title="Mine")
    theirs = session_create(user=owner, title="Theirs")
    page = client.get("/admin/sessions_app/chatsession/").content.decode()
    assert f'href="/chat/{mine.pk}/"' in page
    assert f'href="/chat/{theirs.pk}/"' not in page
    assert "its owner&#x27;s" in page

    shared = Agent.objects.create(owner=None, name="Team")
    agents = client.get("/admin/profiles_app/agent/").content.decode()
    assert f'href="/agents/{shared.pk}/"' in agents

    ProviderCall.objects.create(session=theirs, turn="t", model="claude-x", fingerprint="f")
    # A person's model calls, by their name.
    found = client.get("/admin/sessions_app/providercall/?q=owner").content.decode()
    assert found.count('class="field-model"') == 1
    nobody = client.get("/admin/sessions_app/providercall/?q=nobody").content.decode()
    assert nobody.count('class="field-model"') == 0
