"""``python -m feedprof.schema FILE.json`` and ``feedprof.schema.validate(data)``:
the public door to feedprof/store/schema.py, kept where users found it."""
from __future__ import annotations

import sys

from feedprof.store.schema import (  # noqa: F401 (the public names)
    DRAFT, REGENERATE, SCHEMA_DIR, UnknownSchema, current, file_name, generate, load_schema, main, roots, shipped,
    validate, validate_file, write)

if __name__ == "__main__":
    sys.exit(main())
