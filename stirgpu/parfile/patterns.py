"""STIR's file-name patterns of OSMAPOSL files (``subset sensitivity filenames``: ``%d`` and
its kin), and the constants the OSMAPOSL readers share."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import numpy as np

__all__ = ["FilenamePattern", "OBJECTIVE_FUNCTION", "FLOAT32_MAX"]

OBJECTIVE_FUNCTION = "PoissonLogLikelihoodWithLinearModelForMeanAndProjData"
#: STIR's default 'maximum relative change' (the largest float32: no clipping)
FLOAT32_MAX = float(np.finfo(np.float32).max)

_DIRECTIVE = re.compile(r"%(%|1%|[-+ 0#]*\d*[dis])")


@dataclasses.dataclass(frozen=True)
class FilenamePattern:
    """STIR's ``subset sensitivity filenames``: a boost::format pattern with one subset number
    (``sens_%d.hv``, ``sens_%02d.hv`` or ``sens_%1%.hv``).  Use :meth:`resolve` to make a
    relative pattern absolute (a ``%`` in the folder part is escaped as ``%%``)."""

    pattern: str

    def __post_init__(self) -> None:
        directives = [m.group(1) for m in _DIRECTIVE.finditer(self.pattern) if m.group(1) != "%"]
        if "%" in _DIRECTIVE.sub("", self.pattern):
            raise ValueError(f"'%' that is not a format directive in {self.pattern!r} (write '%%' for '%')")
        if not directives:
            raise ValueError(f"no subset number directive such as '%d' in {self.pattern!r}")
        if len(directives) > 1 and any(d != "1%" for d in directives):
            raise ValueError(f"more than one directive in {self.pattern!r}: STIR passes one number (the subset)")

    @classmethod
    def resolve(cls, pattern: str, base_dir: str | os.PathLike) -> FilenamePattern:
        if os.path.isabs(pattern):
            return cls(pattern)
        base = os.path.abspath(base_dir).replace("%", "%%")
        return cls(os.path.normpath(os.path.join(base, pattern)))

    def format(self, subset: int) -> Path:
        """The file of subset ``subset``."""

        def repl(m: re.Match) -> str:
            d = m.group(1)
            if d == "%":
                return "%"
            if d == "1%":
                return str(subset)
            return ("%" + d) % subset

        return Path(_DIRECTIVE.sub(repl, self.pattern))

    def __str__(self) -> str:
        return self.pattern
