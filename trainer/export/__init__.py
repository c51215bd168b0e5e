"""Adapter export: where an accepted PEFT folder goes after training.

``gguf_adapter`` (PEFT -> GGUF LoRA adapter for llama.cpp / Ollama <= 0.33),
``merge`` (GGUF-native merge for Ollama >= 0.34.1, llama.cpp, LM Studio),
``ollama`` (server version, /api/show, blobs, create, copy, delete; publish,
rollback, prune). ``python -m rltray.trainer.export`` runs them as a process for
the tray, which never imports them.
"""
