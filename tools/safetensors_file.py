"""safetensors_file: writes the safetensors layout with the standard library only.

The layout: an 8-byte little-endian header length, a JSON header (each tensor's dtype, shape and
byte range, plus string metadata under "__metadata__") padded with spaces so the data starts
8-byte aligned, then the tensors' bytes. Used by tools/train_spec_adapters.py (trained adapters)
and bench/cuda/random_tokenswift_heads.py (random heads for speed runs), which hand it raw bytes
so neither needs the `safetensors` package.
"""
import json
import os
import struct


def write(path, entries, metadata):
    """Writes entries [(name, dtype, shape, data bytes)] and {str: str} metadata to `path`,
    through a temporary file so a reader never sees half a file."""
    header, offset = {"__metadata__": metadata}, 0
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in entries:
            f.write(data)
    os.replace(path + ".tmp", path)
    return offset
