"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for code in blocks:  # later blocks use names from earlier ones, as a reader would
        exec(compile(code, str(README), "exec"), namespace)
    assert namespace["res"].global_read_bytes == 545_259_520
