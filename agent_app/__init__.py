"""Agents, the chat WebSocket, the turn runner, providers and worker tasks."""
