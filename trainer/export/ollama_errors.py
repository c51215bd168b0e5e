"""Ollama failures, each one sentence that says what to do.

:func:`server_error` sorts a server's answer into the subclass callers act on
(a missing model, a refused adapter, a full disk); the export process prints the
sentence as its ``error``.
"""

from __future__ import annotations


class OllamaError(RuntimeError):
    """Publishing failed; the message is one sentence saying what to do."""



class ModelMissing(OllamaError):
    """The server has no model of that name."""


class AdapterRefused(OllamaError):
    """The server will not build a model from a LoRA adapter."""


class DiskFull(OllamaError):
    """A disk (ours or the server's) has no room for the file."""


class NotServedFaithfully(OllamaError):
    """llama.cpp, loading the file we wrote, does not move like the adapter: not published."""


def server_error(what: str, message: str, status: int) -> OllamaError:
    """An error the server answered with, as the right subclass and one sentence."""
    text = str(message)
    lowered = text.lower()
    if "no space left" in lowered or "disk full" in lowered:
        return DiskFull(
            f"Ollama's disk is full while {what}: free space where Ollama keeps its models "
            "(OLLAMA_MODELS) or lower ollama.keep_versions."
        )
    if "adapter" in lowered:
        return AdapterRefused(
            f"Ollama refused the LoRA adapter while {what}: {_first_sentence(text)}"
        )
    if status == 404 or "not found" in lowered:
        return ModelMissing(f"Ollama says {_first_sentence(text)}")
    return OllamaError(f"Ollama refused {what}: {_first_sentence(text)}")



def _first_sentence(text: str) -> str:
    text = " ".join(str(text).split())
    return text if text.endswith(".") else text + "."

