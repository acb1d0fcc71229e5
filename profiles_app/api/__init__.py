"""profiles_app's JSON endpoints under /api/, one module per concern: ``profiles`` (the tool
catalog and tool profiles), ``operators`` (staff: global disables, approval policies, the
audit log), ``agents`` (agent profiles) and ``preferences`` (a person's own settings).
``toolhub.api_urls`` routes to each module's views."""
