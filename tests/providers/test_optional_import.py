"""`import tenure` works without the optional `openai` package; asking for the provider then
says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import tenure.providers


def test_public_names() -> None:
    assert set(tenure.providers.__all__) >= {"OpenAICompatible", "Fallback", "Scripted", "Price"}
    from tenure.providers.openai import OpenAICompatible

    assert tenure.providers.OpenAICompatible is OpenAICompatible


def test_import_tenure_without_openai() -> None:
    program = textwrap.dedent(
        """
        import sys
        sys.modules["openai"] = None  # as if the package were not installed
        import tenure
        from tenure.providers import Fallback, Scripted
        try:
            tenure.providers.OpenAICompatible
        except ImportError as exc:
            print("refused:", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout
    assert "pip install 'tenure[openai]'" in done.stdout
