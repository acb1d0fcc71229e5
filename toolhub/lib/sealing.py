"""Secrets at rest: sealed with Fernet (cryptography) before they reach the database.

A sealed value is a Fernet token (AES-128-CBC with an HMAC-SHA256, a timestamp and a random
IV), so the same secret stored twice reads differently and a dump of the tables holds no
secret. ``settings.TOOLHUB_SECRETS_KEYS`` lists the keys: the first seals, any of them
opens (``MultiFernet``), which is how a key is rotated (docs/security.md, "Secrets at
rest"). ``SealedTextField`` and ``SealedJSONField`` seal on every write and open on read,
so the code that uses a secret sees it as it was given and nothing else changes.

A value that no key opens is refused with ``SealError`` naming the setting, never passed
on as if it were the secret.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models, transaction


class SealError(Exception):
    """A stored secret that none of the configured keys opens."""


def _derived_key(secret_key: str) -> bytes:
    """DEBUG only, with no key set: a key of the installation's own SECRET_KEY."""
    digest = hashlib.sha256(b"toolhub secrets at rest\0" + secret_key.encode()).digest()
    return base64.urlsafe_b64encode(digest)


@functools.cache
def _fernet(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    # The settings checked every key at start-up.
    if not keys:
        return MultiFernet([Fernet(_derived_key(secret_key))])
    return MultiFernet([Fernet(key.encode()) for key in keys])


def keys() -> MultiFernet:
    return _fernet(tuple(settings.TOOLHUB_SECRETS_KEYS), settings.SECRET_KEY)


def seal(text: str) -> str:
    return keys().encrypt(text.encode()).decode()


def unseal(token: str) -> str:
    try:
        return keys().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SealError(
            "a stored secret cannot be opened with TOOLHUB_SECRETS_KEYS: the key it was "
            "sealed with is not among them"
        ) from None


class SealedTextField(models.TextField):  # type: ignore[type-arg]
    """Text stored sealed; read back as the text."""

    def value_to_string(self, obj: Any) -> str:
        # Fixtures and serializers never carry a secret in the clear.
        return "<sealed>"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else unseal(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return None if value is None else seal(value)


class SealedJSONField(models.TextField):  # type: ignore[type-arg]
    """A JSON value stored sealed (as the text of its canonical JSON); read back as the
    value. ``None`` is stored as NULL, unsealed: it holds no secret."""

    # What django-stubs' plugin types the field's values as: any JSON value, written and
    # read (a TextField's would be text, which this field never hands out).
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(unseal(value))

    def to_python(self, value: Any) -> Any:
        return value

    def get_prep_value(self, value: Any) -> Any:
        if value is None:
            return None
        return seal(json.dumps(value, sort_keys=True, separators=(",", ":")))

    def value_to_string(self, obj: Any) -> str:
        # Fixtures and serializers never carry a secret in the clear.
        return "<sealed>"


def sealed_fields() -> list[tuple[type[models.Model], list[str]]]:
    """Every model with sealed fields, and those fields."""
    from django.apps import apps

    found = []
    for model in apps.get_models():
        names = [
            field.name
            for field in model._meta.concrete_fields
            if isinstance(field, SealedTextField | SealedJSONField)
        ]
        if names:
            found.append((model, names))
    return found


def secrets_rotate() -> int:
    """Seal every stored secret again with the first key (after a new key was put first
    in ``TOOLHUB_SECRETS_KEYS``; the old ones can go once this has run). Returns how many
    rows were rewritten. All or nothing: a value no key opens (``SealError``) changes
    nothing."""
    rewritten = 0
    with transaction.atomic():
        for model, names in sealed_fields():
            for row in model._default_manager.select_for_update().only("pk", *names):
                values = {name: getattr(row, name) for name in names}
                rewritten += model._default_manager.filter(pk=row.pk).update(**values)
    return rewritten
