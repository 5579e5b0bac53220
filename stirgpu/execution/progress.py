"""Progress bars for long calls: tqdm, off unless ``stirgpu.config(progress=True)``.

Library use is quiet by default; the command line turns bars on.  tqdm is imported
only when a bar is actually shown.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ..config import get_config

__all__ = ["progress_bar"]


@contextlib.contextmanager
def progress_bar(total: int, desc: str) -> Iterator[Callable[[int], None] | None]:
    """Yields ``update(n)`` (thread-safe) while a bar for ``total`` chunks is shown, or
    ``None`` when progress display is off."""
    if not get_config().progress or total <= 0:
        yield None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=int(total), desc=desc, unit="chunk", leave=False)
    try:
        yield bar.update
    finally:
        bar.close()
