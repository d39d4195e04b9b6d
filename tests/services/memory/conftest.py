"""Fixtures for the memory tests: the scripted OpenAI-compatible server."""

from tests.openai_server import openai_server as openai_server
