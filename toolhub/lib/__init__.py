"""Helpers every app shares: service errors, the API's error shape and schema fields, the
stored-intent column, safe markdown, outage responses, Redis codecs, storable text.

Nothing here imports an app or the project's wiring (urls, asgi, serve), so any app may
import it without a cycle (docs/architecture.md, "The parts").
"""
