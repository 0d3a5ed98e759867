"""benchmarks/RESULTS.md: each benchmark owns one `## ` section and replaces it when it writes."""

from __future__ import annotations

from pathlib import Path


def replace_section(path: str | Path, heading: str, text: str) -> None:
    path = Path(path)
    old = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if heading in old:
        start = old.index(heading)
        nxt = old.find("\n## ", start + len(heading))
        old = old[:start] + old[nxt + 1:] if nxt >= 0 else old[:start]
    path.write_text(old.rstrip("\n") + "\n\n" + text)
