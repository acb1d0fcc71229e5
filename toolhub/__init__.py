"""toolhub: chat with LLM agents whose tools are curated.

Importing the package loads the Celery app, so `@shared_task` functions bind to it in every
process (web, worker, management commands).
"""

from toolhub.celery import app as celery_app

__all__ = ["celery_app"]
