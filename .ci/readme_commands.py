"""Print README.md's two fresh-machine commands, one per line, exactly as written: the bash
blocks under the heading "Fresh machine: two commands" (first the main job, then the tests).
Fails, naming the README, if that section does not hold exactly two one-line bash blocks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "## Fresh machine: two commands"


def fresh_machine_commands(text: str) -> list[str]:
    start = text.index(HEADING) + len(HEADING)
    end = text.find("\n## ", start)
    section = text[start:] if end < 0 else text[start:end]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def main() -> int:
    try:
        commands = fresh_machine_commands(README.read_text())
    except ValueError:
        print(f"{README}: no section '{HEADING}'", file=sys.stderr)
        return 1
    if len(commands) != 2 or any("\n" in c for c in commands):
        print(f"{README}: '{HEADING}' must hold two one-line bash blocks, found {commands!r}", file=sys.stderr)
        return 1
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
