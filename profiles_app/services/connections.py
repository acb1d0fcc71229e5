"""Model providers and the models they offer, as the pickers show them (docs/models.md).

Agents and chats name a provider by a name: ``demo`` (the offline demo, always there),
``anthropic`` and ``openai`` when the environment configures them (ANTHROPIC_API_KEY or
ANTHROPIC_BASE_URL; OPENAI_BASE_URL), or a connection staff made in the app
(``ProviderConnection``). The environment bootstraps a fresh install; connections add
more without a restart.

A provider's models are what its models endpoint last listed (stored when staff save
or refresh it: a page never calls out) and the manual lines staff wrote: a model listed
in both takes the manual line's window and prices. Without either, a provider offers its
default model. A model's window and prices feed the gauge and the cost; an unknown
price is unknown, never zero.

Only staff write connections; each write is in the admin's change log. The key is
write-only: sealed at rest, never read back to a page or an API.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.admin.models import ADDITION, CHANGE, DELETION
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models.signals import post_delete, post_save
from django.utils import timezone

from profiles_app.models import ProviderConnection, connection_name_validator
from profiles_app.services.rules import audit
from toolhub.lib.errors import Conflict, Forbidden, Invalid, NotFound
from toolhub.lib.prices import Price, price_of

DEMO = "demo"
# What a built-in provider asks for when nothing names a model.
DEFAULT_MODELS = {"anthropic": "claude-sonnet-4-6", "openai": "llama3.1", DEMO: DEMO}
BUILTIN = tuple(DEFAULT_MODELS)
MANUAL_LINES = 500
MANUAL_CHARS = 20_000
LISTED_MODELS = 2_000
MODEL_ID_CHARS = 100


def storable_and_shown(text: str, *, lines: bool = False) -> bool:
    """No control character (but line breaks and tabs where ``lines``) and no lone
    surrogate: what PostgreSQL's text and JSON can hold, and a page can show."""
    allowed = "\n\r\t" if lines else ""
    return all(char.isprintable() or char in allowed for char in text)


def model_id_ok(model_id: Any) -> bool:
    """What a model's id may be, listed by a provider or written by staff."""
    return (
        isinstance(model_id, str)
        and 0 < len(model_id) <= MODEL_ID_CHARS
        and storable_and_shown(model_id)
        and " " not in model_id
    )


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model a provider offers: its window in tokens and its prices in US dollars per
    million tokens, each ``None`` when nobody said."""

    id: str
    window: int | None = None
    input: float | None = None
    output: float | None = None

    @property
    def price(self) -> Price | None:
        if self.input is not None and self.output is not None:
            return Price(self.input, self.output)
        return price_of(self.id)


@dataclass(frozen=True, slots=True)
class ProviderOffer:
    """A provider as the pickers offer it."""

    name: str
    label: str
    kind: str
    models: tuple[ModelEntry, ...]

    def model(self, model_id: str) -> ModelEntry | None:
        return next((entry for entry in self.models if entry.id == model_id), None)


def manual_parse(text: str) -> list[ModelEntry]:
    """Staff's model lines: ``id, window, input $/M, output $/M``, all but the id optional
    (``claude-sonnet-4-6, 200000, 3, 15``; ``llama3.1:8b, 8192``). Blank lines and lines
    starting with ``#`` are skipped; a bad line is refused saying which."""
    entries: dict[str, ModelEntry] = {}
    if len(text) > MANUAL_CHARS:
        raise Invalid(
            f"at most {MANUAL_CHARS:,} characters of model lines", fields={"manual": ["long"]}
        )
    if not storable_and_shown(text, lines=True):
        raise Invalid("the model lines hold a control character", fields={"manual": ["character"]})
    lines = text.splitlines()
    if len(lines) > MANUAL_LINES:
        raise Invalid(f"at most {MANUAL_LINES} model lines", fields={"manual": ["too many"]})
    for number, line in enumerate(lines, 1):
        parts = [part.strip() for part in line.split(",")]
        if not parts[0] or parts[0].startswith("#"):
            continue
        try:
            entries[parts[0]] = _entry(parts)
        except ValueError as exc:
            raise Invalid(f"line {number}: {exc}", fields={"manual": [str(number)]}) from None
    return list(entries.values())


def _entry(parts: list[str]) -> ModelEntry:
    model_id, *rest = parts
    if len(rest) > 3:
        raise ValueError("a model id and at most a window and two prices")
    if not model_id_ok(model_id):
        raise ValueError("a model id is up to 100 characters with no spaces")
    window = _number(rest[0], "the window", whole=True) if rest and rest[0] else None
    prices = [_number(part, "a price", whole=False) if part else None for part in rest[1:]]
    return ModelEntry(
        model_id,
        window=None if window is None else int(window),
        input=prices[0] if prices else None,
        output=prices[1] if len(prices) > 1 else None,
    )


def _number(text: str, what: str, *, whole: bool) -> float:
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        raise ValueError(f"{what} is a number, not {text[:20]!r}") from None
    if not 0 <= value < 1e9 or value != value:
        raise ValueError(f"{what} is out of range")
    if whole and value < 1000:
        raise ValueError("the window is in tokens (1,000 or more)")
    return value


def connection_models(connection: ProviderConnection) -> tuple[ModelEntry, ...]:
    """Its manual models first, in the order written, then the listed ones by id."""
    manual = manual_parse(connection.manual)
    written = {entry.id for entry in manual}
    listed = {}
    for item in connection.listed[:LISTED_MODELS]:
        if isinstance(item, dict) and model_id_ok(item.get("id")):
            window = item.get("window")
            listed[item["id"]] = ModelEntry(
                item["id"], window=window if isinstance(window, int) else None
            )
    merged = []
    for entry in manual:
        found = listed.get(entry.id)
        # The listed window where the manual line names none.
        if found is not None and entry.window is None:
            entry = ModelEntry(entry.id, found.window, entry.input, entry.output)
        merged.append(entry)
    merged += [listed[name] for name in sorted(listed) if name not in written]
    return tuple(merged)


def _env_configured(name: str) -> bool:
    if name == "anthropic":
        return bool(settings.ANTHROPIC_API_KEY or settings.ANTHROPIC_BASE_URL)
    return bool(settings.OPENAI_BASE_URL)


ENV_LABELS = {"anthropic": "Anthropic", "openai": "OpenAI-compatible"}


# A turn asks for the offers twice (its window, its price) and every composer page once,
# yet they change only when staff save a connection: a process keeps them for
# OFFERS_SECONDS, and forgets them as soon as it writes a connection itself (another
# process's write reaches it within that time). Keyed by the settings they read too.
OFFERS_SECONDS = 2.0
_offers: tuple[tuple[Any, ...], float, tuple[ProviderOffer, ...]] | None = None


def _offers_forget(**_: Any) -> None:
    """Forget the offers now and again once the write commits: a turn reading them in
    between would keep what the write replaced."""
    global _offers
    _offers = None
    transaction.on_commit(_offers_clear)


def _offers_clear() -> None:
    global _offers
    _offers = None


post_save.connect(_offers_forget, sender=ProviderConnection)
post_delete.connect(_offers_forget, sender=ProviderConnection)


def provider_offers() -> list[ProviderOffer]:
    """Every provider a person can pick now, each with its models: the environment's,
    then the enabled connections by name, then the offline demo (at most
    ``OFFERS_SECONDS`` old: see above)."""
    global _offers
    key = (
        settings.TOOLHUB_PROVIDER,
        settings.TOOLHUB_MODEL,
        settings.ANTHROPIC_API_KEY,
        settings.ANTHROPIC_BASE_URL,
        settings.OPENAI_BASE_URL,
    )
    now = time.monotonic()
    kept = _offers
    if kept is not None and kept[0] == key and now - kept[1] < OFFERS_SECONDS:
        return list(kept[2])
    offers = _offers_read()
    _offers = (key, now, tuple(offers))
    return offers


def _offers_read() -> list[ProviderOffer]:
    rows = {row.name: row for row in ProviderConnection.objects.all()}
    offers = []
    for name in ("anthropic", "openai"):
        row = rows.pop(name, None)
        if not _env_configured(name):
            continue
        models = connection_models(row) if row is not None else ()
        offers.append(
            ProviderOffer(name, ENV_LABELS[name], name, models or (_default_entry(name),))
        )
    for row in rows.values():
        if row.enabled and not row.from_env:
            models = connection_models(row) or (_default_entry(row.kind),)
            offers.append(ProviderOffer(row.name, row.name, row.kind, models))
    offers.append(ProviderOffer(DEMO, "Offline demo", DEMO, (ModelEntry(DEMO, None, 0, 0),)))
    return offers


def _default_entry(kind: str) -> ModelEntry:
    if kind == default_provider_name() and settings.TOOLHUB_MODEL:
        return ModelEntry(settings.TOOLHUB_MODEL)
    return ModelEntry(DEFAULT_MODELS[kind])


def default_provider_name() -> str:
    return str(settings.TOOLHUB_PROVIDER)


def provider_offer(name: str) -> ProviderOffer | None:
    """The provider ``name`` names (``""``: the configured default), if it can be used."""
    chosen = name or default_provider_name()
    return next((offer for offer in provider_offers() if offer.name == chosen), None)


def model_entry(*, provider: str, model: str) -> ModelEntry | None:
    """What is known of ``model`` at ``provider``: its window and prices."""
    offer = provider_offer(provider)
    return offer.model(model) if offer is not None else None


def model_price(*, provider: str, model: str) -> Price | None:
    entry = model_entry(provider=provider, model=model)
    return entry.price if entry is not None else price_of(model)


def provider_known(name: Any) -> bool:
    """Whether an agent may name ``name``: empty (the configured default), a built-in
    provider, or a connection (turned off or not: a turn says so)."""
    if not isinstance(name, str):
        return False
    if name in ("", *BUILTIN):
        return True
    connection = connection_get(name)
    return connection is not None and not connection.from_env


def _could_be_name(name: str) -> bool:
    try:
        connection_name_validator(name)
    except ValidationError:
        return False
    return True


def connection_get(name: str) -> ProviderConnection | None:
    """The stored connection by name (built from by the providers), enabled or not."""
    if not _could_be_name(name):
        return None
    return ProviderConnection.objects.filter(name=name).first()


def connections_all() -> list[ProviderConnection]:
    return list(ProviderConnection.objects.all())


def _staff(user: Any) -> None:
    if not user.is_staff:
        raise Forbidden("model providers are managed by staff")


def _clean_url(base_url: str, kind: str) -> str:
    base_url = base_url.strip()
    if not base_url:
        if kind == ProviderConnection.Kind.OPENAI:
            raise Invalid(
                "an OpenAI-compatible provider needs its base URL (…/v1)",
                fields={"base_url": ["required"]},
            )
        return ""
    try:
        parts = urlsplit(base_url)
        scheme, host = parts.scheme, parts.hostname
    except ValueError:
        scheme, host = "", None
    if (
        len(base_url) > 500
        or not storable_and_shown(base_url)
        or " " in base_url
        or scheme not in ("http", "https")
        or not host
    ):
        raise Invalid("the base URL is an http or https URL", fields={"base_url": ["url"]})
    return base_url.rstrip("/")


def _connection_fields(
    *, name: str, kind: str, base_url: str, api_key: str | None, manual: str
) -> dict[str, Any]:
    """A connection's fields as stored, each checked; the key only when one is given."""
    from_env = name in BUILTIN
    if name == DEMO:
        raise Invalid("the offline demo needs no connection", fields={"name": ["demo"]})
    if from_env:
        kind, base_url, api_key = name, "", ""
    elif not _could_be_name(name):
        raise Invalid(
            "name: 1 to 40 lower-case letters, digits or dashes", fields={"name": ["invalid"]}
        )
    if kind not in ProviderConnection.Kind.values:
        raise Invalid("kind is anthropic or openai", fields={"kind": ["choice"]})
    manual_parse(manual)
    # A header carries the key: ASCII only (a pasted ellipsis or Cyrillic letter would
    # fail every request, with the key in the error).
    if api_key is not None and (
        len(api_key) > 1_000 or not (api_key.isascii() and api_key.isprintable())
    ):
        raise Invalid(
            "the key is up to 1,000 printable ASCII characters", fields={"api_key": ["key"]}
        )
    fields: dict[str, Any] = {
        "kind": kind,
        "base_url": "" if from_env else _clean_url(base_url, kind),
        "manual": manual.strip(),
        "from_env": from_env,
    }
    if api_key is not None:
        fields["api_key"] = api_key.strip()
    return fields


def connection_save(
    *,
    user: Any,
    name: str,
    kind: str,
    base_url: str,
    api_key: str | None,
    manual: str,
    enabled: bool = True,
) -> ProviderConnection:
    """Create or change the connection ``name``; ``api_key`` ``None`` keeps the stored
    key (the page never shows it back), ``""`` clears it. A built-in provider's name
    stores only its models (URL and key stay the environment's)."""
    _staff(user)
    name = name.strip().lower()
    fields = _connection_fields(
        name=name, kind=kind, base_url=base_url, api_key=api_key, manual=manual
    )
    fields["enabled"] = enabled
    try:
        with transaction.atomic():
            connection, created = ProviderConnection.objects.update_or_create(
                name=name, defaults=fields
            )
            changed = sorted(set(fields) - {"api_key"}) + (["key"] if "api_key" in fields else [])
            audit(
                user,
                connection,
                ADDITION if created else CHANGE,
                f"{'added' if created else 'changed'} model provider {name}: {', '.join(changed)}",
            )
    except IntegrityError:
        raise Conflict(f"a provider named {name} exists", fields={"name": ["taken"]}) from None
    return connection


def connection_listing_store(
    *, name: str, listed: list[dict[str, Any]] | None, problem: str = ""
) -> int:
    """Keep what the provider's models endpoint answered (``None``: it could not be
    asked; the list it gave before stays); returns how many models were kept."""
    # A provider's words and ids are whatever it sent: only what can be stored and shown
    # is kept (no NUL, no lone surrogate, an id as staff could write it).
    fields: dict[str, Any] = {"listing_problem": "".join(filter(storable_and_shown, problem))[:500]}
    if listed is not None:
        kept = []
        for item in listed:
            window = item.get("window") if isinstance(item, dict) else None
            if isinstance(item, dict) and model_id_ok(item.get("id")):
                ok = isinstance(window, int) and not isinstance(window, bool)
                kept.append({"id": item["id"], "window": window if ok else None})
            if len(kept) >= LISTED_MODELS:
                break
        fields["listed"] = kept
        fields["listed_at"] = timezone.now()
    ProviderConnection.objects.filter(name=name).update(**fields)
    _offers_forget()
    return len(fields.get("listed", ()))


def connection_delete(*, user: Any, name: str) -> None:
    """Remove a connection. Agents and chats that name it fail their next turn saying
    the provider is gone, until they pick another."""
    _staff(user)
    connection = connection_get(name)
    if connection is None:
        raise NotFound("no such provider connection")
    with transaction.atomic():
        audit(user, connection, DELETION, f"removed model provider {name}")
        connection.delete()
