"""SIRF's ``AcquisitionSensitivityModel``: the bin efficiencies ``S`` of ``y = S (G x + a) + b``.

Held as STIR holds it, as normalisation factors ``f = 1 / S`` (STIR's ``BinNormalisation``, whose
``undo`` divides by them: SIRF's ``unnormalise``), computed once, chunk by chunk, into acquisition
data of the storage scheme in force:

* from bin efficiencies ``e`` (``AcquisitionData``): ``f = 1 / max(e, 1e-20)``, in float64 then
  float32 (SIRF's ``inv(MIN_BIN_EFFICIENCY, e)``), when the model is made;
* from an attenuation image ``mu`` (1/cm) and an acquisition model: ``f = exp(G mu)`` with ``G``
  that model's projector giving line integrals in cm (STIR's
  ``BinNormalisationFromAttenuationImage``), at :meth:`set_up` (STIR computes it again for
  every use; here it is kept);
* from two models: ``f = f1 * f2`` (STIR's ``ChainedBinNormalisation``), read bin by bin;
* from a Siemens ECAT8 norm file (``norm.n.hdr``): STIR's ``BinNormalisationFromECAT8``
  efficiencies ``e`` (:mod:`stirgpu.formats.ecat8_factors`), computed on every read for the data
  of :meth:`set_up`; ``forward`` multiplies by ``e`` (0 in the gaps, as STIR's ``undo``), the
  factors are ``f = 1 / max(e, 1e-20)`` (STIR's ``apply``), so an acquisition model, which
  divides by ``f``, gives 1e-20 of the projection in the gaps where SIRF gives 0.

The projectors take ``f`` as their ``multiplicative`` factors, and ``PoissonLogLikelihood`` as
its ``normalisation``: one meaning everywhere.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from ..errors import GeometryError
from ..formats import ProjData
from ..formats.ecat8_factors import Ecat8NormalisationFactors
from ..formats.ecat8_norm import read_ecat8_norm
from ..recon.views import Product
from .acquisition_data import AcquisitionData
from .errors import InputTypeError, NotSupported, error, translate_class_errors

__all__ = ["AcquisitionSensitivityModel", "MIN_BIN_EFFICIENCY"]

#: SIRF's smallest bin efficiency (``MIN_BIN_EFFICIENCY`` of ``stir_x.h``)
MIN_BIN_EFFICIENCY = np.float32(1e-20)
#: GE's normalisation files (STIR's ``BinNormalisationFromGEHDF5``), not read by stirgpu
_GE_SUFFIXES = (".h5", ".hdf5", ".rdf")


def _inverse_efficiency(xp, e):
    return (1.0 / xp.maximum(e, MIN_BIN_EFFICIENCY).astype(xp.float64)).astype(xp.float32)


def _check_data(ad, what: str) -> AcquisitionData:
    if not isinstance(ad, AcquisitionData):
        raise InputTypeError(f"AcquisitionSensitivityModel.{what}: expected AcquisitionData, not {type(ad).__name__}")
    return ad


@translate_class_errors
class AcquisitionSensitivityModel:
    """``AcquisitionSensitivityModel(bin_efficiencies)``, ``(ecat8_norm_file)``,
    ``(attenuation_image, acquisition_model)`` or ``(model_1, model_2)`` (their product); see the
    module docstring."""

    def __init__(self, src, other_src=None):
        from .acquisition_model import AcquisitionModelUsingParallelproj
        from .image_data import ImageData

        self.name = "AcquisitionSensitivityModel"
        self._factors: AcquisitionData | None = None  # f, once known
        self._attenuation = None
        self._chain = None
        self._ecat8 = None  # the norm file's components
        self._efficiencies: AcquisitionData | None = None  # e of an ECAT8 model, once set up
        if isinstance(src, ProjData) and other_src is None:
            warnings.warn(
                "AcquisitionSensitivityModel(ProjData) is deprecated: give AcquisitionData "
                "(stirgpu.sirf.AcquisitionData(store) wraps a store without copying it)",
                DeprecationWarning,
                stacklevel=3,
            )
            src = AcquisitionData(src)
        if isinstance(src, (str, os.PathLike)) and other_src is None:
            if os.fspath(src).lower().endswith(_GE_SUFFIXES):
                raise NotSupported(
                    f"AcquisitionSensitivityModel: {os.fspath(src)}: GE HDF5 normalisation files are not read by "
                    "stirgpu (Siemens ECAT8 norm files are); give the bin efficiencies as AcquisitionData"
                )
            self._ecat8 = read_ecat8_norm(src)
        elif isinstance(src, AcquisitionData) and other_src is None:
            self._factors = src._apply(_inverse_efficiency, (), None, "AcquisitionSensitivityModel")
        elif isinstance(src, ImageData):
            if not isinstance(other_src, AcquisitionModelUsingParallelproj):
                raise error(
                    "AcquisitionSensitivityModel constructor with attenuation image needs an AcquisitionModel "
                    "as second argument (for ray tracing)"
                )
            self._attenuation = (src.clone(), other_src)
        elif isinstance(src, AcquisitionSensitivityModel) and isinstance(other_src, AcquisitionSensitivityModel):
            self._chain = (src, other_src)
        else:
            raise error("Wrong source in AcquisitionSensitivityModel constructor")

    # -- set up --------------------------------------------------------------------------------
    def set_up(self, ad) -> None:
        """Prepare for data of ``ad``'s geometry (an attenuation model projects its image now)."""
        ad = _check_data(ad, "set_up")
        pdi = ad.get_proj_data_info()
        if self._chain is not None:
            for part in self._chain:
                part.set_up(ad)
            f1, f2 = (part.normalisation_factors() for part in self._chain)
            self._factors = AcquisitionData(Product(f1, f2))
        elif self._ecat8 is not None:
            if self._factors is None or self._factors.get_proj_data_info() != pdi:
                try:
                    self._factors = AcquisitionData(Ecat8NormalisationFactors(self._ecat8, pdi))
                    self._efficiencies = AcquisitionData(Ecat8NormalisationFactors(self._ecat8, pdi, efficiencies=True))
                except GeometryError as exc:
                    raise error(f"AcquisitionSensitivityModel.set_up: {exc}") from None
        elif self._attenuation is not None:
            if self._factors is None or self._factors.get_proj_data_info() != pdi:
                mu, model = self._attenuation
                self._factors = model._attenuation_factors(mu, ad)
        elif self._factors is not None and self._factors.get_proj_data_info() != pdi:
            raise error("AcquisitionSensitivityModel.set_up: the data's geometry differs from the bin efficiencies'")

    def is_set_up_for(self, ad: AcquisitionData) -> bool:
        return self._factors is not None and self._factors.get_proj_data_info() == ad.get_proj_data_info()

    def normalisation_factors(self) -> ProjData:
        """``f = 1 / S`` as a stirgpu store (after :meth:`set_up` for an attenuation model)."""
        if self._factors is None:
            raise error("AcquisitionSensitivityModel: call set_up(acquisition_data) first")
        return self._factors.proj_data

    def _f(self, ad: AcquisitionData) -> AcquisitionData:
        if self._factors is None or not self.is_set_up_for(ad):
            self.set_up(ad)
        assert self._factors is not None  # set_up made them (or raised)
        return self._factors

    # -- applying it ------------------------------------------------------------------------------
    def forward(self, ad) -> AcquisitionData:
        """``S ad`` as new data (SIRF: ``unnormalise`` leaving the argument unchanged)."""
        ad = _check_data(ad, "forward")
        f = self._f(ad)
        return ad.multiply(self._efficiencies) if self._efficiencies is not None else ad.divide(f)

    def invert(self, ad) -> AcquisitionData:
        """``ad / S`` as new data (SIRF: ``normalise`` leaving the argument unchanged)."""
        ad = _check_data(ad, "invert")
        return ad.multiply(self._f(ad))

    def unnormalise(self, ad) -> None:
        """``ad *= S`` in place."""
        ad = _check_data(ad, "unnormalise")
        if ad.read_only:
            raise error("Cannot unnormalise a read-only object, consider using method forward instead")
        f = self._f(ad)
        if self._efficiencies is not None:
            ad.multiply(self._efficiencies, out=ad)
        else:
            ad.divide(f, out=ad)

    def normalise(self, ad) -> None:
        """``ad /= S`` in place."""
        ad = _check_data(ad, "normalise")
        if ad.read_only:
            raise error("Cannot normalise a read-only object, consider using method invert instead")
        ad.multiply(self._f(ad), out=ad)

    @staticmethod
    def compute_attenuation_factors(sinograms, mu_map):
        """``(af, acf)``: the attenuation factors ``exp(-G mu)`` and their inverse ``exp(G mu)``
        (``mu`` in 1/cm, line integrals in cm)."""
        from .acquisition_model import AcquisitionModelUsingParallelproj

        sinograms = _check_data(sinograms, "compute_attenuation_factors")
        model = AcquisitionModelUsingParallelproj()
        acf = model._attenuation_factors(mu_map, sinograms)
        return 1.0 / acf, acf
