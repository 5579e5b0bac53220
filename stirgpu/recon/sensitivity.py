"""Subset sensitivities as OSMAPOSL handles them.

STIR's rules (``PoissonLogLikelihoodWithLinearModelForMean::set_up``):

* ``use subset sensitivities := 1``: one image per subset, ``s_k = B_k(1/f)``;
  read from / written to ``subset sensitivity filenames`` (``%d`` = subset number);
* ``:= 0`` (STIR's default): one total sensitivity ``s = B(1/f)``, read from / written
  to ``sensitivity filename``; every subset uses ``s / K``.  This needs *balanced*
  subsets (every subset with as many views); otherwise STIR refuses to run;
* ``recompute sensitivity := 0`` reads the file(s), unless no name is given for the
  mode in use (then it computes anyway, with a warning); ``:= 1`` computes them and
  writes them when a name is given.

Images stay on the projector's device (numpy or cupy).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..array_types import Array
from ..errors import GeometryError, StirGpuError
from ..formats import VoxelsOnCartesianGrid, read_image, write_image
from ..geometry import ImageInfo
from ..parfile import FilenamePattern
from .naming import interfile_image_name

__all__ = ["SensitivitySpec", "Sensitivities"]


def _pattern(p) -> FilenamePattern | None:
    if p is None or isinstance(p, FilenamePattern):
        return p
    try:
        return FilenamePattern(os.fspath(p))
    except ValueError as exc:
        raise StirGpuError(f"subset sensitivity filenames: {exc}") from None


@dataclasses.dataclass(frozen=True)
class SensitivitySpec:
    """Where sensitivities come from and go to (STIR's four keys)."""

    use_subset_sensitivities: bool = True
    recompute: bool = True
    filename: Path | None = None
    subset_filenames: FilenamePattern | None = None

    @classmethod
    def from_settings(cls, s) -> SensitivitySpec:
        """The spec of an OSMAPOSL file's four sensitivity keys (``OsmaposlSettings``; OSSPS's
        ``common``)."""
        return cls(
            use_subset_sensitivities=s.use_subset_sensitivities,
            recompute=s.recompute_sensitivity,
            filename=s.sensitivity_filename,
            subset_filenames=s.subset_sensitivity_filenames,
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "subset_filenames", _pattern(self.subset_filenames))
        if self.filename is not None:
            object.__setattr__(self, "filename", Path(self.filename))

    @property
    def computes(self) -> bool:
        """STIR computes when asked to, and when there is no file to read."""
        if self.recompute:
            return True
        return (self.subset_filenames if self.use_subset_sensitivities else self.filename) is None

    def files(self, num_subsets: int) -> list[Path]:
        """The files read (when not computing) or written (when computing); may be empty."""
        if self.use_subset_sensitivities:
            if self.subset_filenames is None:
                return []
            return [interfile_image_name(self.subset_filenames.format(k)) for k in range(num_subsets)]
        return [] if self.filename is None else [interfile_image_name(self.filename)]


class Sensitivities:
    """The subset sensitivities of one reconstruction: ``sens[k]`` is subset ``k``'s image.

    With ``use_subset_sensitivities`` False all subsets share ``total / K``."""

    def __init__(
        self, images: list[Array], num_subsets: int, use_subset_sensitivities: bool, total: Array | None = None
    ):
        self._images = images
        self.num_subsets = int(num_subsets)
        self.use_subset_sensitivities = bool(use_subset_sensitivities)
        self._total = total

    def __getitem__(self, subset_num: int):
        return self._images[subset_num if self.use_subset_sensitivities else 0]

    @property
    def total(self):
        """The total sensitivity (sum over subsets)."""
        if self._total is None:
            t = self._images[0].copy()
            for im in self._images[1:]:
                t += im
            self._total = t
        return self._total

    # -- making them -------------------------------------------------------------------
    @classmethod
    def compute(
        cls,
        num_subsets: int,
        use_subset_sensitivities: bool,
        subset_sensitivity: Callable[[Array, int, int], Array],
        zeros: Callable[[], Array],
        progress: Callable[[str], None] | None = None,
    ) -> Sensitivities:
        """``subset_sensitivity(out, k, K)`` fills ``out`` with ``B_k(1/f)``; ``zeros()`` makes
        an image on the device."""
        if use_subset_sensitivities:
            images = []
            for k in range(num_subsets):
                images.append(subset_sensitivity(zeros(), k, num_subsets))
                if progress:
                    progress(f"sensitivity of subset {k}")
            return cls(images, num_subsets, True)
        total = subset_sensitivity(zeros(), 0, 1)
        if progress:
            progress("sensitivity")
        per_subset = total / total.dtype.type(num_subsets)
        return cls([per_subset], num_subsets, False, total=total)

    @classmethod
    def read(
        cls, spec: SensitivitySpec, num_subsets: int, image_info: ImageInfo, to_device: Callable[[np.ndarray], Array]
    ) -> Sensitivities:
        """Read the file(s) of ``spec`` (geometry checked against ``image_info``)."""
        files = spec.files(num_subsets)
        arrays = []
        for path in files:
            img = read_image(path)
            if img.info != image_info:
                raise GeometryError(
                    f"{path}: the sensitivity's geometry {img.info!r} differs from the reconstruction's {image_info!r}"
                )
            arrays.append(to_device(img.array))
        if spec.use_subset_sensitivities:
            return cls(arrays, num_subsets, True)
        total = arrays[0]
        return cls([total / total.dtype.type(num_subsets)], num_subsets, False, total=total)

    def write(
        self,
        spec: SensitivitySpec,
        image_info: ImageInfo,
        to_host: Callable[[Array], np.ndarray],
        overwrite: bool = True,
    ) -> list[Path]:
        """Write what STIR writes after computing: the subset images, or the total."""
        files = spec.files(self.num_subsets)
        if not files:  # the parameter file names none: nothing to write
            return files
        images = self._images if self.use_subset_sensitivities else [self.total]
        for path, im in zip(files, images, strict=True):
            write_image(path, VoxelsOnCartesianGrid(image_info, fill=to_host(im)), overwrite=overwrite)
        return files
