"""`manage.py toolhub_demo` makes a first run usable without a well-known password."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def _run(settings, tmp_path) -> str:
    settings.VAR_DIR = tmp_path
    out = StringIO()
    call_command("toolhub_demo", stdout=out)
    return out.getvalue()


def _printed_password(output: str) -> str:
    match = re.search(r"as 'demo' with password '([^']+)'", output)
    assert match, output
    return match.group(1)


def test_first_run_creates_a_staff_demo_user_whose_printed_password_signs_in(settings, tmp_path):
    password = _printed_password(_run(settings, tmp_path))

    user = authenticate(username="demo", password=password)
    assert user is not None
    assert user.is_staff
    assert len(password) >= 12
    assert (tmp_path / "demo-password").stat().st_mode & 0o077 == 0


def test_a_second_run_keeps_the_user_and_prints_the_same_password(settings, tmp_path):
    first = _printed_password(_run(settings, tmp_path))
    second = _printed_password(_run(settings, tmp_path))

    assert first == second
    assert get_user_model().objects.filter(username="demo").count() == 1


def test_after_the_password_is_changed_it_is_no_longer_printed(settings, tmp_path):
    _run(settings, tmp_path)
    user = get_user_model().objects.get(username="demo")
    user.set_password("a new secret phrase")
    user.save()

    output = _run(settings, tmp_path)

    assert "password was changed" in output
    assert "with password" not in output
