"""Pieces as files: our piece format (`pieces.py`), the dispatcher between it and AdapterHub's (`formats.py`), the
model's pieces in and out (`model_pieces.py`), a whole setup as one folder (`setup_index.py`, `setup_save.py`,
`setup_load.py`, `setup_base_model.py`, `setup_push.py`) with its model card and provenance. Above interop/ and
encoders; the file primitives it builds on are in io/."""
