"""Create the demo account on first run and print how to sign in.

The password is random, never a well-known default, and is kept in ``var/demo-password``
(mode 0600, outside version control) only so later runs can print it again. Once someone
changes the password, the file no longer matches and is not shown.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

DEMO_USERNAME = "demo"


class Command(BaseCommand):
    help = "Create the demo staff user if missing, and print how to sign in."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000/", help="where the product is")

    def handle(self, *args: object, url: str, **options: object) -> None:
        password_file = Path(settings.VAR_DIR) / "demo-password"
        user_model = get_user_model()
        user = user_model.objects.filter(username=DEMO_USERNAME).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser(
                username=DEMO_USERNAME, email="demo@example.com", password=password
            )
            _write_private(password_file, password)
            self.stdout.write(self.style.SUCCESS(f"Created the demo user '{DEMO_USERNAME}'."))
        else:
            password = password_file.read_text().strip() if password_file.exists() else ""
            if not password or not user.check_password(password):
                self.stdout.write(
                    f"The demo user '{DEMO_USERNAME}' exists and its password was changed. "
                    f"Reset it with: python manage.py changepassword {DEMO_USERNAME}"
                )
                return
        self.stdout.write(f"Sign in at {url} as '{DEMO_USERNAME}' with password '{password}'.")


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
