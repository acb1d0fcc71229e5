"""``manage.py toolhub_secrets_rotate``: seal every stored secret with the first key of
``TOOLHUB_SECRETS_KEYS`` (docs/security.md, "Secrets at rest")."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from toolhub.lib.sealing import SealError, secrets_rotate


class Command(BaseCommand):
    help = "Seal every stored secret again with the first key of TOOLHUB_SECRETS_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            rewritten = secrets_rotate()
        except SealError as exc:
            self.stderr.write(f"Nothing was changed for good: {exc}.")
            raise SystemExit(1) from None
        self.stdout.write(
            f"Sealed {rewritten} row(s) with the first key; the other keys can now be removed."
        )
