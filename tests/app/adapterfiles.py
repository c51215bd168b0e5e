"""The smallest adapter folder a version may be made active from, standard library only.

Why: a rollback checks a version's files before the store switches to it (the structure
check a remote round's result gets, app/training/remote/verify.py, and the digests
recorded when the result was applied), so an empty folder no longer passes for a
version. One LoRA pair (rank 1) of float32 values is enough for that check; tests that
export to Ollama build a real tiny adapter instead (tests/support/tinygguf.py).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

WEIGHTS, CONFIG = "adapter_model.safetensors", "adapter_config.json"
_MODULE = "base_model.model.model.layers.0.self_attn.q_proj"

#: The same files written by FAKE_TRAINER's script (test_training.py), which runs in an
#: interpreter of its own: ``write_lora(out, value)``.
SCRIPT = '''
def write_lora(out, value=0.5):
    import json, struct
    json.dump({"peft_type": "LORA", "r": 1, "lora_alpha": 2, "target_modules": ["q_proj"]},
              open(os.path.join(out, "adapter_config.json"), "w"))
    name = "base_model.model.model.layers.0.self_attn.q_proj"
    table = {name + ".lora_A.weight": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]},
             name + ".lora_B.weight": {"dtype": "F32", "shape": [2, 1], "data_offsets": [8, 16]}}
    head = json.dumps(table).encode()
    with open(os.path.join(out, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + struct.pack("<4f", value, 0.25, 0.0, 0.0))
'''


def weights_bytes(value: float = 0.5) -> bytes:
    """The weights file ``write_lora`` writes (``value`` tells two apart: their digests
    differ), as bytes, to replace one in place."""
    table = {
        f"{_MODULE}.lora_A.weight": {"dtype": "F32", "shape": [1, 2], "data_offsets": [0, 8]},
        f"{_MODULE}.lora_B.weight": {"dtype": "F32", "shape": [2, 1], "data_offsets": [8, 16]},
    }
    head = json.dumps(table).encode()
    return struct.pack("<Q", len(head)) + head + struct.pack("<4f", value, 0.25, 0.0, 0.0)


def write_lora(folder: Path, value: float = 0.5) -> Path:
    """Write a rank-1 PEFT LoRA adapter (config and weights) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": 1, "lora_alpha": 2, "target_modules": ["q_proj"]}
    (folder / CONFIG).write_text(json.dumps(config), encoding="utf-8")
    (folder / WEIGHTS).write_bytes(weights_bytes(value))
    return folder
