"""Test-session settings shared by every test module."""

import os
import tempfile

import matplotlib

matplotlib.use("Agg")

# One processed-data cache for the whole session (CI sets SIGGATE_CACHE to a fresh folder);
# tests that exercise the cache itself use their own tmp folders.
os.environ.setdefault("SIGGATE_CACHE", os.path.join(tempfile.gettempdir(), "siggate-test-cache"))
