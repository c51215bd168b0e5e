"""Adapter export: GGUF LoRA, merged weights and Ollama registration (gguf.py, merge.py, ollama.py).

Empty until the Ollama issue; the trainer already writes the PEFT folder every export starts from.
"""
