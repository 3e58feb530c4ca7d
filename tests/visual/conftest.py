"""Fixtures for visual page retrieval tests."""

from __future__ import annotations

import pytest
from visual_helpers import WordEncoder, make_text_pdf


@pytest.fixture
def text_pdf() -> bytes:
    return make_text_pdf(["Quarterly revenue grew", "Operating margin table", "Outlook and guidance"])


@pytest.fixture
def word_encoder() -> WordEncoder:
    return WordEncoder()
