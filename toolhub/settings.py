"""The one settings file: everything that varies between machines comes from the environment.

Unset ``DATABASE_URL`` means a SQLite file under ``var/``; unset ``REDIS_URL`` means the
embedded default: an in-memory channel layer, a local-memory cache and Celery tasks run
in-process. Setting them switches to PostgreSQL (psycopg 3), channels-redis, Django's
Redis cache and Redis as the Celery broker. ``DEBUG`` defaults to off; with it off a real
``SECRET_KEY`` is required and the HTTPS hardening that ``check --deploy`` asks for is on.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from toolhub.settings_env import (
    database,
    env_bool,
    env_float,
    env_int,
    env_list,
    redis_cache,
    redis_channel_layer,
    secrets_keys,
)

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)

# Local state of the embedded default: the SQLite file, collected static files, the demo
# account's first password.
VAR_DIR = Path(os.environ.get("TOOLHUB_VAR_DIR") or BASE_DIR / "var")

_INSECURE_DEV_KEY = "django-insecure-toolhub-development-key-never-use-in-production"
SECRET_KEY = os.environ.get("SECRET_KEY") or (_INSECURE_DEV_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")

# Secrets at rest (MCP servers' env, headers and OAuth client secrets, OAuth tokens,
# personal credentials) are sealed with Fernet under these keys: the first seals, any of
# them opens, so a new key goes first and the old one stays until `manage.py
# toolhub_secrets_rotate` has run (docs/security.md, "Secrets at rest"). With DEBUG on and
# none set, one is derived from SECRET_KEY, so the embedded default needs no setup.
TOOLHUB_SECRETS_KEYS = secrets_keys(debug=DEBUG)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    # daphne first, so `manage.py runserver` serves ASGI (HTTP and WebSocket) too.
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # intcomma: token counts and sizes on the chat page.
    "django.contrib.humanize",
    "channels",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "profiles_app",
    "sessions_app",
    "agent_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "toolhub.lib.api.BodyLimitMiddleware",
    # Redis or the database out of reach: 503 with Retry-After, JSON under /api/.
    "toolhub.lib.outage.ServiceUnavailableMiddleware",
]

# One API body (an import, a profile) is at most 1 MiB; more is refused with 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 1_048_576

ROOT_URLCONF = "toolhub.urls"
ASGI_APPLICATION = "toolhub.asgi.application"
WSGI_APPLICATION = "toolhub.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.csp",
                "profiles_app.theme.theme",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------

# PostgreSQL connections come from one pool per process (psycopg's, through Django):
# borrowing one costs a health check (~0.05 ms) where connecting cost ~2.5 ms. The pool
# keeps TOOLHUB_DB_POOL_MIN open and opens at most TOOLHUB_DB_POOL_MAX; the 8 turn threads
# keep theirs while the process runs. A thread that finds none free waits
# TOOLHUB_DB_POOL_TIMEOUT seconds, then its request fails, so the cap sits well above a
# process's usual needs (about 10, plus one per request in flight). Every process has its
# own pool: what all of them open at their busiest must fit PostgreSQL's max_connections
# (README, "Scaling out"). 0 for TOOLHUB_DB_POOL_MAX: no pool.
TOOLHUB_DB_POOL_MIN = env_int("TOOLHUB_DB_POOL_MIN", 2)
TOOLHUB_DB_POOL_MAX = env_int("TOOLHUB_DB_POOL_MAX", 40)
TOOLHUB_DB_POOL_TIMEOUT = env_float("TOOLHUB_DB_POOL_TIMEOUT", 5.0)
# Unset: a SQLite file in VAR_DIR (WAL; the tests' own file per run, settings_env.database).
DATABASE_URL = os.environ.get("DATABASE_URL", "")
DATABASES = {
    "default": database(
        DATABASE_URL,
        var_dir=VAR_DIR,
        pool_min=TOOLHUB_DB_POOL_MIN,
        pool_max=TOOLHUB_DB_POOL_MAX,
        pool_timeout=TOOLHUB_DB_POOL_TIMEOUT,
    )
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache, channel layer, Celery broker -------------------------------------------

REDIS_URL = os.environ.get("REDIS_URL", "")

if REDIS_URL:
    CACHES = {"default": redis_cache(REDIS_URL)}
    CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}
    CELERY_BROKER_URL = REDIS_URL
    # kombu's Redis transport, fixed so that a worker survives a Redis restart while it
    # runs a task (toolhub.broker).
    CELERY_BROKER_TRANSPORT = "toolhub.broker:Transport"
    if REDIS_URL.startswith("rediss://"):
        # kombu turns TLS on from the URL's scheme only for its own transport name.
        import ssl

        CELERY_BROKER_USE_SSL = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    CELERY_RESULT_BACKEND = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_RESULT_BACKEND = "cache+memory://"
    # No broker: tasks run in the calling process, and their errors surface there.
    CELERY_TASK_ALWAYS_EAGER = True
    CELERY_TASK_EAGER_PROPAGATES = True

# JSON only, in both directions: a pickled message in Redis is refused, never loaded.
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_ACCEPT_CONTENT = ["json"]
CELERY_EVENT_SERIALIZER = "json"
# A task is acknowledged only after it ran, and a worker that dies mid-task puts it back:
# tasks claim their work with a conditional UPDATE, so a redelivery never runs twice.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Long tools go to their own queue, so workers for them scale apart from other tasks
# (`celery -A toolhub worker -Q tools`).
CELERY_TASK_ROUTES = {"toolhub.tool_run": {"queue": "tools"}}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2}
# A worker that lost Redis reconnects for as long as it takes (Celery's default gives up,
# and exits, after 100 tries), and its running tools go on meanwhile: they report through
# the database, and their late acknowledgement failing is harmless (claimed runs).
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False

# --- Auth, sessions, security ------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat"
LOGOUT_REDIRECT_URL = "login"

SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.SELF],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

if not DEBUG:
    # Production sits behind a TLS-terminating proxy that sets X-Forwarded-Proto.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    # Load balancers and container health checks probe over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = 60 * 60 * 24 * 365
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

# --- Tools ---------------------------------------------------------------------------

# Extra modules whose @function tools register at start-up, besides the `toolhub.tools`
# entry-point group (comma-separated dotted paths).
TOOLHUB_TOOL_MODULES = env_list("TOOLHUB_TOOL_MODULES", "")

# Where each session's files live (the path tools never leave their session's folder).
TOOLHUB_WORKSPACE_ROOT = VAR_DIR / "workspaces"

# web_fetch refuses private, loopback and link-local addresses unless this is on.
TOOLHUB_FETCH_ALLOW_PRIVATE = env_bool("TOOLHUB_FETCH_ALLOW_PRIVATE", False)
# A tool result cut for the model (a tool declared persist_full: web_fetch) is kept whole
# for its session's owner, up to this many characters, this many per session.
TOOLHUB_FULL_RESULT_MAX_CHARS = env_int("TOOLHUB_FULL_RESULT_MAX_CHARS", 5_000_000)
TOOLHUB_FULL_RESULTS_PER_SESSION = env_int("TOOLHUB_FULL_RESULTS_PER_SESSION", 50)
# Files a tool offered the person (an MCP server's PDF) are kept with the chat for its
# owner to download: this many at most per chat, this many bytes in all.
TOOLHUB_RESULT_FILES_PER_SESSION = env_int("TOOLHUB_RESULT_FILES_PER_SESSION", 50)
TOOLHUB_RESULT_FILES_MAX_BYTES = env_int("TOOLHUB_RESULT_FILES_MAX_BYTES", 200_000_000)
# A chat's workspace, as its owner takes files out of it (the Files panel, the API): a list
# shows this many entries, newest first, and says how many more; the whole workspace
# downloads as one zip only up to this many files and bytes (sizes as the disk reports them).
TOOLHUB_WORKSPACE_LIST_MAX = env_int("TOOLHUB_WORKSPACE_LIST_MAX", 500, minimum=1)
TOOLHUB_WORKSPACE_ZIP_MAX_FILES = env_int("TOOLHUB_WORKSPACE_ZIP_MAX_FILES", 5_000, minimum=1)
TOOLHUB_WORKSPACE_ZIP_MAX_BYTES = env_int("TOOLHUB_WORKSPACE_ZIP_MAX_BYTES", 200_000_000, minimum=1)
# Files a person attaches to their messages, stored in the chat's workspace
# (sessions_app.uploads): the most one file may be, one message may carry (files, bytes)
# and one chat may hold in all. A request past them is refused before anything is stored.
TOOLHUB_UPLOAD_FILE_MAX_BYTES = env_int("TOOLHUB_UPLOAD_FILE_MAX_BYTES", 50_000_000)
TOOLHUB_UPLOAD_MESSAGE_MAX_FILES = env_int("TOOLHUB_UPLOAD_MESSAGE_MAX_FILES", 10)
TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES = env_int("TOOLHUB_UPLOAD_MESSAGE_MAX_BYTES", 100_000_000)
TOOLHUB_UPLOAD_CHAT_MAX_FILES = env_int("TOOLHUB_UPLOAD_CHAT_MAX_FILES", 100)
TOOLHUB_UPLOAD_CHAT_MAX_BYTES = env_int("TOOLHUB_UPLOAD_CHAT_MAX_BYTES", 500_000_000)

# bash runs every command in a bubblewrap box (toolhub/tools/sandbox.py); without a working
# bwrap here bash is unavailable, with the reason shown. Started as root, boxes run as
# TOOLHUB_BASH_UID (uid and gid; never 0), otherwise as toolhub's own user. Each box gets
# CPU seconds and address space (MiB) per process, a process count, a largest file (MiB),
# a /tmp and a /dev/shm (MiB each), and is stopped after this much output (MiB).
TOOLHUB_BASH_BWRAP = os.environ.get("TOOLHUB_BASH_BWRAP") or "/usr/bin/bwrap"
TOOLHUB_BASH_UID = env_int("TOOLHUB_BASH_UID", 65534)
TOOLHUB_BASH_CPU_SECONDS = env_int("TOOLHUB_BASH_CPU_SECONDS", 600)
TOOLHUB_BASH_MEMORY_MB = env_int("TOOLHUB_BASH_MEMORY_MB", 1024)
TOOLHUB_BASH_PROCESSES = env_int("TOOLHUB_BASH_PROCESSES", 128)
TOOLHUB_BASH_FILE_MB = env_int("TOOLHUB_BASH_FILE_MB", 1024)
TOOLHUB_BASH_TMP_MB = env_int("TOOLHUB_BASH_TMP_MB", 256)
TOOLHUB_BASH_OUTPUT_MB = env_int("TOOLHUB_BASH_OUTPUT_MB", 16)
if TOOLHUB_BASH_UID == 0:
    raise ImproperlyConfigured("TOOLHUB_BASH_UID must not be 0: the box would run as root")

# tool_search's semantic ranker (the `semantic` extra; its model and encodings cost each
# process that loads them about 100 MB, docs/tool-search.md). Off: BM25 only.
TOOLHUB_SEMANTIC_SEARCH = env_bool("TOOLHUB_SEMANTIC_SEARCH", True)
# Where tool texts' encodings are kept by the hash of the model and the text, shared by
# every process and kept across restarts (a SQLite file); empty: in memory only. The
# embedding model rewritten to int8 weights is kept beside it (docs/tool-search.md);
# empty: every process runs the packaged model, which holds ~110 MB more.
TOOLHUB_EMBEDDING_CACHE = os.environ.get(
    "TOOLHUB_EMBEDDING_CACHE", str(VAR_DIR / "embeddings.sqlite3")
)

# MCP servers (configured by staff as McpServer rows): each web and worker process
# connects them as it starts. Each relists every
# connected server this often (seconds; it is also the health check), follows changes to
# the table within TOOLHUB_MCP_POLL seconds, and retries a lost server with exponential
# backoff up to TOOLHUB_MCP_BACKOFF_MAX seconds apart.
# Off: this process does not connect (the test suite connects its own servers).
TOOLHUB_MCP_CONNECT = env_bool("TOOLHUB_MCP_CONNECT", True)
# MCP servers on loopback and private addresses (a server beside toolhub, the tests'):
# refused unless this is on. Link-local and cloud metadata addresses always are
# (toolhub.tools.netguard).
TOOLHUB_MCP_ALLOW_PRIVATE = env_bool("TOOLHUB_MCP_ALLOW_PRIVATE", False)
TOOLHUB_MCP_HEALTH_INTERVAL = env_float("TOOLHUB_MCP_HEALTH_INTERVAL", 10.0)
TOOLHUB_MCP_POLL = env_float("TOOLHUB_MCP_POLL", 5.0)
TOOLHUB_MCP_BACKOFF_MAX = env_float("TOOLHUB_MCP_BACKOFF_MAX", 30.0)
# A chat's own connections to a server (a process each over stdio, docs/mcp.md "Who is
# asked"): at most this many per server and process, each closed after this many seconds
# without a call.
TOOLHUB_MCP_CHAT_CONNECTIONS = env_int("TOOLHUB_MCP_CHAT_CONNECTIONS", 20, minimum=1)
TOOLHUB_MCP_CHAT_IDLE = env_float("TOOLHUB_MCP_CHAT_IDLE", 300.0)

# --- Chat turns and providers -------------------------------------------------------

# Which model answers: "anthropic", "openai" or "demo". Unset: anthropic when an API key is
# set, else the offline demo model. An agent can name its own provider and model.
TOOLHUB_PROVIDER = os.environ.get("TOOLHUB_PROVIDER", "") or (
    "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "demo"
)
TOOLHUB_MODEL = os.environ.get("TOOLHUB_MODEL", "")
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "")
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "")
# Provider calls (model requests) per turn before it ends with reason "max_steps".
TOOLHUB_MAX_STEPS = env_int("TOOLHUB_MAX_STEPS", 25)
# Retries of a retryable provider error (429, 5xx, timeouts), with exponential backoff.
TOOLHUB_PROVIDER_RETRIES = env_int("TOOLHUB_PROVIDER_RETRIES", 3)
# With a real provider, a chat's first answer is followed by one short call asking the
# same model for the chat's title (agent_app/turns/titles.py); off, the first message is.
TOOLHUB_AUTO_TITLES = env_bool("TOOLHUB_AUTO_TITLES", True)
# With a real provider, each tool definition is sent once (a few per request, in the
# background) to TOOLHUB_MODEL, which writes how people ask for it; tool_search reads
# that too (toolhub/tools/phrasings.py). Kept beside TOOLHUB_EMBEDDING_CACHE; off: none.
TOOLHUB_TOOL_PHRASINGS = env_bool("TOOLHUB_TOOL_PHRASINGS", True)
TOOLHUB_PROVIDER_BACKOFF = env_float("TOOLHUB_PROVIDER_BACKOFF", 1.0)
# Seconds a tool that needs approval (or a question to the person) waits for an answer.
TOOLHUB_APPROVAL_TIMEOUT = env_float("TOOLHUB_APPROVAL_TIMEOUT", 300.0)
# A turn whose server process died is ended (its open calls get ``lost`` results, then
# ``turn_failed`` with code ``lost``) within this many seconds of the death, by any live
# server or the restarted one; the session then takes the next message (docs/faults.md).
# Session sockets one person, and one chat, may hold open at once (agent_app.socket_slots).
TOOLHUB_SOCKETS_PER_PERSON = int(env_float("TOOLHUB_SOCKETS_PER_PERSON", 30))
TOOLHUB_SOCKETS_PER_CHAT = int(env_float("TOOLHUB_SOCKETS_PER_CHAT", 10))
TOOLHUB_TURN_LOST_AFTER = env_float("TOOLHUB_TURN_LOST_AFTER", 15.0)
if TOOLHUB_TURN_LOST_AFTER < 1:
    raise ImproperlyConfigured("TOOLHUB_TURN_LOST_AFTER must be at least 1 second")

# --- Tools on workers -----------------------------------------------------------------

# A running worker tool proves it is alive this often (seconds), and is marked lost when
# it has not for TOOLHUB_RUN_LOST_AFTER; the turn then gets an error result.
TOOLHUB_RUN_HEARTBEAT = env_float("TOOLHUB_RUN_HEARTBEAT", 2.0)
TOOLHUB_RUN_LOST_AFTER = env_float("TOOLHUB_RUN_LOST_AFTER", 15.0)
# A run no worker has taken after this long is given up (no worker for the tools queue).
TOOLHUB_RUN_QUEUE_TIMEOUT = env_float("TOOLHUB_RUN_QUEUE_TIMEOUT", 600.0)
# A run still queued this many seconds after it was sent is sent again, then at doubling
# intervals up to 2 minutes, until a worker takes it or the queue timeout gives it up:
# Redis loses queued messages when it restarts without persistence, and a send fails while
# it is down. Extra copies do nothing (a run is claimed once). 0: never re-send.
# docs/outages.md.
TOOLHUB_RUN_RESEND_AFTER = env_float("TOOLHUB_RUN_RESEND_AFTER", 10.0)

# --- Static files ----------------------------------------------------------------------

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
# In development, serve straight from the source folders so edits show without collectstatic.
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG

# --- Internationalisation ----------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- REST framework ---------------------------------------------------------------------

REST_FRAMEWORK = {
    # Token first, so an anonymous request is told how to authenticate (401, not 403).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's, with the token's user read in one statement (toolhub.lib.token_auth).
        "toolhub.lib.token_auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # Escaped, not raw UTF-8: a refusal that echoes what was sent (DRF's "is not a valid
    # choice") can hold a lone surrogate, which UTF-8 cannot encode: a 500 otherwise.
    "UNICODE_JSON": False,
    "DEFAULT_PARSER_CLASSES": ["toolhub.lib.parsers.BoundedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "toolhub.lib.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "toolhub API",
    "DESCRIPTION": "Tool profiles, global disables, agents and chat sessions.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI from the installed sidecar package: no CDN, and no inline script (CSP).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # A stdio server's "auth" can only be none; a streamable HTTP server's, none or oauth.
    "ENUM_NAME_OVERRIDES": {
        "McpServerAuthEnum": ["none", "oauth"],
        "StdioMcpServerAuthEnum": ["none"],
        "ContextWindowSourceEnum": ["server", "setting", "assumed"],
        "ProfileSourceEnum": ["builtin", "preset", "shared", "user"],
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "toolhub.lib.api.add_error_responses",
    ],
}

# --- Logging ----------------------------------------------------------------------------

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    "loggers": {"django": {"level": "INFO"}},
}
