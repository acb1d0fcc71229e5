"""Chat sessions: their tool intent, the durable event log and provider usage."""
