"""tenure works without the frameworks; asking for an integration without its framework
says which extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize(
    ("package", "module", "extra"),
    [
        ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
        ("agents", "openai_agents", "openai-agents"),
    ],
)
def test_an_integration_without_its_framework_names_the_extra(
    package: str, module: str, extra: str
) -> None:
    program = textwrap.dedent(
        f"""
        import sys
        sys.modules["{package}"] = None  # as if the package were not installed
        import tenure
        import tenure.integrations
        try:
            import tenure.integrations.{module}
        except ImportError as exc:
            print("refused:", exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout
    assert f"pip install 'tenure[{extra}]'" in done.stdout
