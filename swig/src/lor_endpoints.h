// LOR endpoints asked from STIR, for geometries stirgpu cannot compute itself (block and
// generic scanners: ProjDataInfoBlocksOnCylindricalNoArcCorr, ProjDataInfoGenericNoArcCorr).
//
// STIR's Parallelproj projector projects every geometry along the LORs STIR gives it: each
// bin's LOR (ProjDataInfo::get_LOR) cut by the cylinder of the scanner's maximum FOV radius,
// in units of the image's x voxel size, and the image placed by its first voxel with the z
// index range centred on the scanner.  The same numbers are made here once per set_up, and
// stirgpu's explicit-endpoint Joseph kernels project along them (bridge_endpoints.py).
#ifndef STIRGPU_STIR_PLUGIN_LOR_ENDPOINTS_H
#define STIRGPU_STIR_PLUGIN_LOR_ENDPOINTS_H

#include "stir/DiscretisedDensity.h"
#include "stir/ProjDataInfo.h"
#include "stir/shared_ptr.h"

#include <pybind11/pybind11.h>

#include <string>

namespace stirgpu_plugin
{

//! true for geometries stirgpu's own (cylindrical) LOR tables cannot describe: a scanner whose
//! geometry is not "Cylindrical" (blocks on a cylinder, generic crystal maps)
bool needs_lor_endpoints(const stir::ProjDataInfo& pdi);

//! "" when the endpoints can be projected here, else why not (one line)
std::string lor_endpoints_problem(const stir::ProjDataInfo& pdi, const stir::DiscretisedDensity<3, float>& image);

//! A dict (GIL held) of what stirgpu.stir_plugin.bridge_endpoints.EndpointSession takes:
//!   "xstart", "xend": {segment: float32 (views, axial positions, tangential positions, 3)},
//!       (z, y, x) in units of the image's x voxel size, zeros for a LOR that misses the FOV;
//!   "origin", "voxel_size": (z, y, x) in the same units; "shape": the image's (nz, ny, nx);
//!   "min_view", "min_axial" ({segment: first axial position}), "inner_ring_radius" (mm),
//!   "min_indices" (the image's), "description" (the geometry, one line).
pybind11::dict lor_endpoints(const stir::ProjDataInfo& pdi, const stir::DiscretisedDensity<3, float>& image);

} // namespace stirgpu_plugin

#endif
