"""Adapter export: where an accepted PEFT folder goes after training.

``gguf_adapter`` (PEFT -> GGUF LoRA adapter for llama.cpp / Ollama <= 0.33),
``merge`` (GGUF-native merge for Ollama >= 0.34.1, llama.cpp, LM Studio),
and Ollama: ``ollama_names`` (tags per version), ``ollama_model`` (/api/show,
the GGUF through the manifests), ``ollama_errors`` (one sentence per failure),
``ollama_client`` (server version, blobs, create, copy, delete) and
``ollama_publish`` (publish, rollback, prune). ``python -m rltray.trainer.export``
runs them as a process for the tray, which never imports them.
"""
