"""toolhub: chat with LLM agents whose tools are curated.

This package stays light: importing ``toolhub.tools`` must not pull in Django or Celery.
The Celery app lives in ``toolhub.celery`` and is loaded by ``agent_app`` when Django starts
and by ``celery -A toolhub`` in workers.
"""
