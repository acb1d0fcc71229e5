"""Secrets at rest: what a dump of the database holds, key rotation, and the migration
that sealed the values stored before.

Every secret the product keeps (an MCP server's env, headers and OAuth client secret, an
OAuth grant's tokens and registered client, a sign-in's PKCE verifier and client, a
person's own credential) is written through the models, then every table is read raw,
as a dump would read it, on this run's database and on the other engine (SQLite and
PostgreSQL both), and searched for the secrets.
"""

from __future__ import annotations

import io
import json
import uuid
from contextlib import contextmanager

import dj_database_url
import psycopg
import pytest
from cryptography.fernet import Fernet
from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, connections
from django.db.migrations.executor import MigrationExecutor
from django.db.utils import load_backend

from agent_app.models import McpCredential, McpOAuthGrant, McpOAuthSignIn, McpServer
from toolhub.lib.sealing import SealError

SECRETS = {
    "env": "env-secret-31d7",
    "header": "header-secret-8c2a",
    "client": "client-secret-5e90",
    "access": "access-token-a41f",
    "refresh": "refresh-token-77b3",
    "registered": "registered-secret-0c6d",
    "verifier": "pkce-verifier-9d15",
    "personal": "personal-token-2b48",
}


def _store_every_secret(using: str = "default") -> McpServer:
    owner = get_user_model().objects.db_manager(using).create_user(f"owner-{uuid.uuid4().hex}")
    server = McpServer.objects.using(using).create(
        name=f"s{uuid.uuid4().hex[:8]}",
        transport="streamable_http",
        url="https://mcp.example.com/mcp",
        env={"TOKEN": SECRETS["env"]},
        headers={"X-Api-Key": SECRETS["header"]},
        oauth_client_secret=SECRETS["client"],
    )
    McpOAuthGrant.objects.using(using).create(
        server=server,
        tokens={"access_token": SECRETS["access"], "refresh_token": SECRETS["refresh"]},
        client_info={"client_id": "toolhub", "client_secret": SECRETS["registered"]},
    )
    McpOAuthSignIn.objects.using(using).create(
        server=server,
        user=owner,
        state_digest=uuid.uuid4().hex,
        code_verifier=SECRETS["verifier"],
        client_info={"client_secret": SECRETS["registered"]},
    )
    McpCredential.objects.using(using).create(server=server, owner=owner, value=SECRETS["personal"])
    return server


def _raw_dump(using: str = "default") -> str:
    """Every row of every table, as the database holds it."""
    db = connections[using]
    quote = db.ops.quote_name
    rows = []
    with db.cursor() as cursor:
        for table in db.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {quote(table)}")  # noqa: S608 (names from the catalog)
            rows.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(rows)


def _found(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


def _read_back(server: McpServer, using: str = "default") -> dict[str, object]:
    stored = McpServer.objects.using(using).get(pk=server.pk)
    grant = McpOAuthGrant.objects.using(using).get(server=server)
    return {
        "env": stored.env["TOKEN"],
        "header": stored.headers["X-Api-Key"],
        "client": stored.oauth_client_secret,
        "access": grant.tokens["access_token"],
        "registered": grant.client_info["client_secret"],
        "verifier": McpOAuthSignIn.objects.using(using).get(server=server).code_verifier,
        "personal": McpCredential.objects.using(using).get(server=server).value,
    }


@contextmanager
def _other_engine(tmp_path, postgres_url):
    """The engine this run's database is not, with the tables the secrets live in."""
    alias = f"other_{uuid.uuid4().hex[:8]}"
    if connection.vendor == "postgresql":
        config = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "other.db")}
        database = None
    else:
        database = f"toolhub_sealed_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database}"')
        config = {**dj_database_url.parse(postgres_url), "NAME": database}
    # A connection made here, not in the settings: Django's test case allows those. Filled
    # in with Django's defaults as the settings' own databases are.
    config = connections.configure_settings({"default": config})["default"]
    setattr(
        connections._connections,
        alias,
        load_backend(config["ENGINE"]).DatabaseWrapper(config, alias),
    )
    try:
        with connections[alias].schema_editor() as editor:
            for label in (
                "contenttypes.ContentType",
                "auth.Permission",
                "auth.Group",
                "auth.User",
                "agent_app.McpServer",
                "agent_app.McpOAuthGrant",
                "agent_app.McpOAuthSignIn",
                "agent_app.McpCredential",
            ):
                editor.create_model(apps.get_model(label))
        yield alias
    finally:
        connections[alias].close()
        delattr(connections._connections, alias)
        if database is not None:
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE "{database}" WITH (FORCE)')


@pytest.mark.django_db(transaction=True)
def test_a_dump_of_either_database_holds_no_secret_and_each_reads_back_whole(
    tmp_path, postgres_url
):
    server = _store_every_secret()
    with _other_engine(tmp_path, postgres_url) as other:
        elsewhere = _store_every_secret(other)
        other_vendor = connections[other].vendor

        assert (_found(_raw_dump()), _found(_raw_dump(other))) == ([], [])
        assert _read_back(elsewhere, other) == _read_back(server)
    assert {connection.vendor, other_vendor} == {"sqlite", "postgresql"}
    assert _read_back(server) == {
        "env": SECRETS["env"],
        "header": SECRETS["header"],
        "client": SECRETS["client"],
        "access": SECRETS["access"],
        "registered": SECRETS["registered"],
        "verifier": SECRETS["verifier"],
        "personal": SECRETS["personal"],
    }


@pytest.mark.django_db
def test_dumpdata_writes_no_secret():
    _store_every_secret()
    out = io.StringIO()

    call_command("dumpdata", "agent_app", stdout=out)

    assert _found(out.getvalue()) == []
    assert "<sealed>" in out.getvalue()


@pytest.mark.django_db
def test_a_new_key_put_first_reads_old_secrets_and_rotation_lets_the_old_key_go(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TOOLHUB_SECRETS_KEYS = (old,)
    server = _store_every_secret()
    before = _read_back(server)

    settings.TOOLHUB_SECRETS_KEYS = (new, old)
    both = _read_back(server)
    said = io.StringIO()
    call_command("toolhub_secrets_rotate", stdout=said)
    settings.TOOLHUB_SECRETS_KEYS = (new,)
    after = _read_back(server)
    settings.TOOLHUB_SECRETS_KEYS = (old,)
    with pytest.raises(SealError, match="the key it was sealed with is not among them"):
        _read_back(server)

    assert before == both == after
    assert "Sealed 4 row(s) with the first key" in said.getvalue()
    assert _found(_raw_dump()) == []


@pytest.mark.django_db
def test_rotation_with_a_key_missing_changes_nothing_and_says_why(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.TOOLHUB_SECRETS_KEYS = (old,)
    server = _store_every_secret()

    settings.TOOLHUB_SECRETS_KEYS = (new,)
    said = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("toolhub_secrets_rotate", stderr=said)
    settings.TOOLHUB_SECRETS_KEYS = (old,)

    assert "Nothing was changed for good" in said.getvalue()
    assert _read_back(server)["personal"] == SECRETS["personal"]


@pytest.mark.django_db(transaction=True)
def test_the_migration_seals_what_was_stored_in_the_clear_and_opens_it_on_the_way_back():
    executor = MigrationExecutor(connection)
    before, sealed = (
        ("agent_app", "0012_mcp_personal_credentials"),
        ("agent_app", "0013_secrets_sealed"),
    )
    executor.migrate([before])
    user = get_user_model().objects.create_user("old-owner")
    plain_env = json.dumps({"TOKEN": SECRETS["env"]})
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO agent_app_mcpserver (name, transport, command, args, env,"
            " url, headers, enabled, defer, timeout, timeout_ceiling, approve_destructive,"
            " sampling, workspace_roots, user_credential, auth, oauth_scopes,"
            " oauth_client_id, oauth_client_secret, created, updated) VALUES ('old',"
            " 'stdio', 'npx', '[]', %s, '', '{}', true, true, 30, 120, true, false, false,"
            " 'X_TOKEN', 'none', '', '', %s, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)",
            [plain_env, SECRETS["client"]],
        )
        cursor.execute("SELECT id FROM agent_app_mcpserver WHERE name = 'old'")
        (server_id,) = cursor.fetchone()
        cursor.execute(
            "INSERT INTO agent_app_mcpcredential (server_id, owner_id, value,"
            " updated) VALUES (%s, %s, %s, CURRENT_TIMESTAMP)",
            [server_id, user.pk, SECRETS["personal"]],
        )
    in_the_clear = _found(_raw_dump())

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([sealed])
    after = _found(_raw_dump())
    server = McpServer.objects.get(name="old")
    read = (server.env, server.oauth_client_secret, McpCredential.objects.get().value)
    executor = MigrationExecutor(connection)
    executor.migrate([before])
    back = _found(_raw_dump())
    MigrationExecutor(connection).migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    assert sorted(in_the_clear) == ["client", "env", "personal"]
    assert after == []
    assert read == ({"TOKEN": SECRETS["env"]}, SECRETS["client"], SECRETS["personal"])
    assert sorted(back) == ["client", "env", "personal"]
