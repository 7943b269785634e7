"""Shared fixtures: paths to example and test model files."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ROOT / "studies"
TEST_MODELS = Path(__file__).resolve().parent / "models"


@pytest.fixture
def studies_dir() -> Path:
    return STUDIES


@pytest.fixture
def test_models() -> Path:
    return TEST_MODELS


@pytest.fixture(scope="session")
def npu_emulator():
    """The emulated Ascend (tests/npu_emulator) imported into this process as ``torch_npu``."""
    from tests.emulated_npu import load_emulator

    return load_emulator()
