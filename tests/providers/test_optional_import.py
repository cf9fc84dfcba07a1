"""`import tenure` works without the optional `openai` and `anthropic` packages; asking for
a provider then says how to install it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import tenure.providers


def test_public_names() -> None:
    assert set(tenure.providers.__all__) >= {
        "Anthropic",
        "OpenAICompatible",
        "Fallback",
        "Scripted",
        "Price",
    }
    from tenure.providers.anthropic import Anthropic
    from tenure.providers.openai import OpenAICompatible

    assert tenure.providers.OpenAICompatible is OpenAICompatible
    assert tenure.providers.Anthropic is Anthropic


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


def test_import_tenure_without_anthropic() -> None:
    program = textwrap.dedent(
        """
        import sys
        sys.modules["anthropic"] = None  # as if the package were not installed
        import tenure
        from tenure.providers import Price
        try:
            tenure.providers.Anthropic
        except ImportError as exc:
            print("refused:", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'tenure[anthropic]'" in done.stdout
