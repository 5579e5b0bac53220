#include "lor_endpoints.h"

#include "stir/Bin.h"
#include "stir/LORCoordinates.h"
#include "stir/Scanner.h"
#include "stir/Succeeded.h"
#include "stir/VoxelsOnCartesianGrid.h"

#include <pybind11/numpy.h>

#include <algorithm>

namespace py = pybind11;

namespace stirgpu_plugin
{

bool
needs_lor_endpoints(const stir::ProjDataInfo& pdi)
{
  return pdi.get_scanner_sptr()->get_scanner_geometry() != "Cylindrical";
}

std::string
lor_endpoints_problem(const stir::ProjDataInfo& pdi, const stir::DiscretisedDensity<3, float>& image)
{
  const std::string what = "scanner '" + pdi.get_scanner_sptr()->get_name() + "' (geometry "
                           + pdi.get_scanner_sptr()->get_scanner_geometry() + ")";
  if (pdi.is_tof_data())
    return what + ": these are TOF data, and stirgpu projects the TOF data of cylindrical scanners only";
  if (dynamic_cast<const stir::VoxelsOnCartesianGrid<float>*>(&image) == nullptr)
    return what + ": stirgpu projects images on a Cartesian grid (VoxelsOnCartesianGrid) only";
  return "";
}

namespace
{

py::tuple
as_tuple(const stir::BasicCoordinate<3, float>& c)
{
  return py::make_tuple(c[1], c[2], c[3]);
}

// one segment's endpoints, (views, axial, tangential, 3) each
void
segment_endpoints(const stir::ProjDataInfo& pdi, int segment, float rescale, float radius, float* xstart, float* xend)
{
  stir::LORInAxialAndNoArcCorrSinogramCoordinates<float> lor;
  stir::LORAs2Points<float> points;
  std::size_t i = 0;
  for (int view = pdi.get_min_view_num(); view <= pdi.get_max_view_num(); ++view)
    for (int ax = pdi.get_min_axial_pos_num(segment); ax <= pdi.get_max_axial_pos_num(segment); ++ax)
      for (int t = pdi.get_min_tangential_pos_num(); t <= pdi.get_max_tangential_pos_num(); ++t, i += 3)
        {
          pdi.get_LOR(lor, stir::Bin(segment, view, ax, t));
          if (lor.get_intersections_with_cylinder(points, radius) == stir::Succeeded::no)
            {  // outside the FOV: a zero-length LOR, which projects to 0
              std::fill(xstart + i, xstart + i + 3, 0.F);
              std::fill(xend + i, xend + i + 3, 0.F);
              continue;
            }
          const stir::CartesianCoordinate3D<float> p1 = points.p1() * rescale;
          const stir::CartesianCoordinate3D<float> p2 = points.p2() * rescale;
          for (int d = 0; d < 3; ++d)
            {
              xstart[i + d] = p1[d + 1];
              xend[i + d] = p2[d + 1];
            }
        }
}

} // namespace

py::dict
lor_endpoints(const stir::ProjDataInfo& pdi, const stir::DiscretisedDensity<3, float>& image)
{
  const auto& voxels = dynamic_cast<const stir::VoxelsOnCartesianGrid<float>&>(image);
  const stir::CartesianCoordinate3D<float> voxel_size = voxels.get_voxel_size();
  // Parallelproj's units: the image's x voxel size (STIR's projectors give line integrals in
  // voxel units)
  const float rescale = 1 / voxel_size[3];
  stir::BasicCoordinate<3, int> min_indices, max_indices;
  voxels.get_regular_range(min_indices, max_indices);
  stir::CartesianCoordinate3D<float> first = voxels.get_physical_coordinates_for_indices(min_indices);
  first[1] -= (voxels.get_min_index() + voxels.get_max_index()) / 2.F * voxel_size[1];  // z range centred
  const float radius = pdi.get_scanner_sptr()->get_max_FOV_radius();

  py::dict xstart, xend, min_axial;
  const py::ssize_t nv = pdi.get_num_views(), nt = pdi.get_num_tangential_poss();
  for (int s = pdi.get_min_segment_num(); s <= pdi.get_max_segment_num(); ++s)
    {
      py::array_t<float> a({ nv, static_cast<py::ssize_t>(pdi.get_num_axial_poss(s)), nt, py::ssize_t(3) });
      py::array_t<float> b(a.request().shape);
      float* pa = a.mutable_data();
      float* pb = b.mutable_data();
      {
        py::gil_scoped_release release;  // STIR's geometry, no Python
        segment_endpoints(pdi, s, rescale, radius, pa, pb);
      }
      xstart[py::int_(s)] = a;
      xend[py::int_(s)] = b;
      min_axial[py::int_(s)] = pdi.get_min_axial_pos_num(s);
    }
  py::dict d;
  d["xstart"] = xstart;
  d["xend"] = xend;
  d["origin"] = as_tuple(first * rescale);
  d["voxel_size"] = as_tuple(voxel_size * rescale);
  const stir::BasicCoordinate<3, int> len = voxels.get_lengths();
  d["shape"] = py::make_tuple(len[1], len[2], len[3]);
  d["min_indices"] = py::make_tuple(min_indices[1], min_indices[2], min_indices[3]);
  d["min_view"] = pdi.get_min_view_num();
  d["min_axial"] = min_axial;
  d["inner_ring_radius"] = pdi.get_scanner_sptr()->get_inner_ring_radius();
  d["description"] = "scanner '" + pdi.get_scanner_sptr()->get_name() + "' (geometry "
                     + pdi.get_scanner_sptr()->get_scanner_geometry() + "), LOR endpoints from STIR";
  return d;
}

} // namespace stirgpu_plugin
