"""Databases for the products the tests start, migrated and seeded once per test process.

Migrating a fresh database costs a Django process and ~10 s; creating the demo account and
its API token, two more processes. So each kind is made once, as a template, by one
process (``_SEED``): the SQLite file of the embedded default, and a PostgreSQL database.
A product then starts on a copy: the SQLite file copied into its ``var`` directory, or a
database made with PostgreSQL's ``CREATE DATABASE ... TEMPLATE``. Every copy holds the
same demo account (``demo``, with ``Seed.password``) and API token (``Seed.token``); each
product's data is its own from there on.

Templates are made lazily, the first time a test asks, and removed when the process ends.
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.conftest import ROOT, app_env

# One process migrates, makes the demo account as `make run` does, and gives it a token.
_SEED = """
import json, re
from io import StringIO
import django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from rest_framework.authtoken.models import Token
call_command("migrate", interactive=False, verbosity=0)
said = StringIO()
call_command("toolhub_demo", stdout=said)
password = re.search(r"with password '([^']+)'", said.getvalue()).group(1)
token = Token.objects.create(user=get_user_model().objects.get(username="demo")).key
print(json.dumps({"password": password, "token": token}))
"""


@dataclass(frozen=True)
class Seed:
    """What every copy of a template holds: the demo account's password and API token."""

    password: str
    token: str


@dataclass(frozen=True)
class _Template:
    seed: Seed
    where: str  # the SQLite template's var directory, or the PostgreSQL template's name


_templates: dict[str, _Template] = {}


def _seed(env: dict[str, str]) -> Seed:
    result = subprocess.run(
        [sys.executable, "-c", _SEED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return Seed(**json.loads(result.stdout.strip().splitlines()[-1]))


def seeded_var_dir(var_dir: Path) -> Seed:
    """Put a migrated, seeded SQLite database (and the demo password file) in ``var_dir``,
    the embedded default's local state, as ``make run`` would have left it."""
    template = _templates.get("sqlite")
    if template is None:
        where = Path(tempfile.mkdtemp(prefix="toolhub-template-"))
        atexit.register(shutil.rmtree, where, ignore_errors=True)
        template = _templates["sqlite"] = _Template(_seed(app_env(where)), str(where))
    var_dir.mkdir(parents=True, exist_ok=True)
    for path in Path(template.where).iterdir():
        if path.is_file():
            shutil.copy2(path, var_dir / path.name)
    return template.seed


def _admin(postgres_url: str) -> psycopg.Connection:
    return psycopg.connect(postgres_url, autocommit=True)


def _drop_at_exit(postgres_url: str, name: str) -> None:
    def drop() -> None:
        with _admin(postgres_url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    atexit.register(drop)


def _postgres_template(postgres_url: str) -> _Template:
    template = _templates.get("postgres")
    if template is None:
        name = f"toolhub_template_{uuid.uuid4().hex[:10]}"
        with _admin(postgres_url) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        _drop_at_exit(postgres_url, name)
        var_dir = Path(tempfile.mkdtemp(prefix="toolhub-template-"))
        atexit.register(shutil.rmtree, var_dir, ignore_errors=True)
        url = f"{postgres_url.rsplit('/', 1)[0]}/{name}"
        template = _templates["postgres"] = _Template(
            _seed(app_env(var_dir, DATABASE_URL=url)), name
        )
    return template


@contextmanager
def seeded_database(postgres_url: str, prefix: str) -> Iterator[tuple[str, Seed]]:
    """A PostgreSQL database of the caller's own, migrated and seeded (its URL and the
    seed), dropped afterwards even if processes still hold connections to it."""
    template = _postgres_template(postgres_url)
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with _admin(postgres_url) as admin:
        # The seeding process has exited, but PostgreSQL may not have noticed yet: a
        # template still in use refuses to be copied, so try again until it is free.
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template.where}"')
                break
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    try:
        yield f"{postgres_url.rsplit('/', 1)[0]}/{name}", template.seed
    finally:
        with _admin(postgres_url) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
