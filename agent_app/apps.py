from __future__ import annotations

from django.apps import AppConfig


class AgentConfig(AppConfig):
    name = "agent_app"
    verbose_name = "Runtime: worker runs, notes and MCP servers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings

        # Bind @shared_task functions to toolhub's Celery app in every Django process, and
        # register the channel layer's codec before any layer is made.
        from toolhub import celery  # noqa: F401
        from toolhub.lib import redis_codecs  # noqa: F401
        from toolhub.tools import embeddings, load_plugins

        # Semantic search on or off; the encoding thread starts only in a serving process
        # (toolhub.serve) or at the first search, so a command or a test starts no thread.
        embeddings.configure(
            semantic_search=settings.TOOLHUB_SEMANTIC_SEARCH,
            cache_file=settings.TOOLHUB_EMBEDDING_CACHE,
        )
        from agent_app import phrasings

        phrasings.configure_from_settings()
        from agent_app.mcp_credentials import CredentialsAdapter
        from agent_app.services import NotesAdapter
        from toolhub.lib.chat_services import chat_services_provide

        chat_services_provide(notes=NotesAdapter(), mcp_credentials=CredentialsAdapter())
        # Plugins register once per process, in a fixed order, before any turn resolves.
        load_plugins(settings.TOOLHUB_TOOL_MODULES)

        # Every bash box this process starts gets these limits (toolhub.tools.sandbox).
        from pathlib import Path

        from toolhub.tools import sandbox

        mib = 1 << 20
        sandbox.configure(
            sandbox.SandboxConfig(
                bwrap=settings.TOOLHUB_BASH_BWRAP,
                uid=settings.TOOLHUB_BASH_UID,
                cpu_seconds=settings.TOOLHUB_BASH_CPU_SECONDS,
                memory_bytes=settings.TOOLHUB_BASH_MEMORY_MB * mib,
                processes=settings.TOOLHUB_BASH_PROCESSES,
                file_bytes=settings.TOOLHUB_BASH_FILE_MB * mib,
                tmp_bytes=settings.TOOLHUB_BASH_TMP_MB * mib,
                output_bytes=settings.TOOLHUB_BASH_OUTPUT_MB * mib,
                workspace_root=Path(settings.TOOLHUB_WORKSPACE_ROOT),
            )
        )
