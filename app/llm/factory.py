"""The configured chat model, or None (HTM_LLM_PROVIDER=none: nothing is built or called)."""

from __future__ import annotations

from app.config import Settings
from app.llm.base import ChatModel
from app.llm.http import OllamaChat, OpenAIChat


def build_llm(settings: Settings) -> ChatModel | None:
    if settings.llm_provider == "none":
        return None
    if not settings.llm_url:
        raise ValueError(f"HTM_LLM_PROVIDER={settings.llm_provider} needs HTM_LLM_URL")
    if settings.llm_provider == "openai":
        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return OpenAIChat(
            settings.llm_model,
            base_url=settings.llm_url,
            api_key=key,
            timeout_s=settings.llm_timeout_s,
        )
    return OllamaChat(
        settings.llm_model, base_url=settings.llm_url, timeout_s=settings.llm_timeout_s
    )
