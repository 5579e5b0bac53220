"""Every ProjData store passes the same contract (stirgpu.formats.testing)."""

from __future__ import annotations

from stirgpu.formats import ProjDataFromFile, ProjDataInMemory, StorageOrder
from stirgpu.formats.testing import ProjDataContract


class TestMemoryStore(ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataInMemory(proj_data_info)


class TestDiskViewOrder(ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataFromFile.create(tmp_path / "view.hs", proj_data_info, StorageOrder.VIEW)


class TestDiskSinogramOrder(ProjDataContract):
    def make_store(self, proj_data_info, tmp_path):
        return ProjDataFromFile.create(tmp_path / "sino.hs", proj_data_info, StorageOrder.SINOGRAM)


class TestDiskReopenedBigEndianFloat64(ProjDataContract):
    """A committed file, reopened with mode 'r+': the path of existing data on disk, in a
    non-native number format (every access converts)."""

    def make_store(self, proj_data_info, tmp_path):
        with ProjDataFromFile.create(tmp_path / "be.hs", proj_data_info, StorageOrder.SINOGRAM, dtype=">f8"):
            pass
        return ProjDataFromFile.open(tmp_path / "be.hs", "r+")
