"""The code in README.md runs as shown."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_blocks_run_in_order():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert np.isfinite(float(namespace["loss"]))
