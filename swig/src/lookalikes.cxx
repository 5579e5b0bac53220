#include "lookalikes.h"

#include "viewgram_copy.h"

#include "stir/Bin.h"
#include "stir/ProjDataInfoCylindricalArcCorr.h"
#include "stir/ProjDataInfoCylindricalNoArcCorr.h"
#include "stir/Scanner.h"
#include "stir/Succeeded.h"
#include "stir/VectorWithOffset.h"
#include "stir/VoxelsOnCartesianGrid.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace stirgpu_plugin
{

namespace
{

// -- Scanner ---------------------------------------------------------------------------------

struct ScannerView
{
  stir::shared_ptr<const stir::Scanner> s;
};

// -- ProjDataInfo: one class per STIR class name stirgpu tells apart ----------------------------

struct PdiView
{
  stir::shared_ptr<const stir::ProjDataInfo> pdi;
  const stir::ProjDataInfoCylindrical& cyl() const
  {
    return dynamic_cast<const stir::ProjDataInfoCylindrical&>(*pdi);
  }
};
struct PdiNoArcCorr : PdiView
{};
struct PdiArcCorr : PdiView
{};

template <class C>
void
define_pdi_methods(C& c)
{
  using V = typename C::type;
  c.def("get_scanner", [](const V& v) { return ScannerView{ v.pdi->get_scanner_sptr() }; })
      .def("get_min_segment_num", [](const V& v) { return v.pdi->get_min_segment_num(); })
      .def("get_max_segment_num", [](const V& v) { return v.pdi->get_max_segment_num(); })
      .def("get_min_ring_difference", [](const V& v, int s) { return v.cyl().get_min_ring_difference(s); })
      .def("get_max_ring_difference", [](const V& v, int s) { return v.cyl().get_max_ring_difference(s); })
      .def("get_num_views", [](const V& v) { return v.pdi->get_num_views(); })
      .def("get_min_view_num", [](const V& v) { return v.pdi->get_min_view_num(); })
      .def("get_num_tangential_poss", [](const V& v) { return v.pdi->get_num_tangential_poss(); })
      .def("get_min_tangential_pos_num", [](const V& v) { return v.pdi->get_min_tangential_pos_num(); })
      .def("get_num_axial_poss", [](const V& v, int s) { return v.pdi->get_num_axial_poss(s); })
      .def("get_min_axial_pos_num", [](const V& v, int s) { return v.pdi->get_min_axial_pos_num(s); })
      .def("get_num_tof_poss", [](const V& v) { return v.pdi->get_num_tof_poss(); })
      .def("get_tof_mash_factor", [](const V& v) { return v.pdi->get_tof_mash_factor(); })
      .def("get_min_tof_pos_num", [](const V& v) { return v.pdi->get_min_tof_pos_num(); })
      .def("get_max_tof_pos_num", [](const V& v) { return v.pdi->get_max_tof_pos_num(); })
      .def("get_azimuthal_angle_offset", [](const V& v) { return v.cyl().get_azimuthal_angle_offset(); })
      .def("get_ring_radius", [](const V& v) { return v.cyl().get_ring_radius(); })
      .def("get_ring_spacing", [](const V& v) { return v.cyl().get_ring_spacing(); })
      .def("get_ring_radii_for_all_views",
           [](const V& v) {
             const stir::VectorWithOffset<float> r = v.cyl().get_ring_radii_for_all_views();
             return std::vector<float>(r.begin(), r.end());
           })
      .def("get_phi", [](const V& v, const stir::Bin& b) { return v.pdi->get_phi(b); })
      .def("get_s", [](const V& v, const stir::Bin& b) { return v.pdi->get_s(b); })
      .def("get_m", [](const V& v, const stir::Bin& b) { return v.pdi->get_m(b); })
      .def("get_tantheta", [](const V& v, const stir::Bin& b) { return v.pdi->get_tantheta(b); })
      .def("parameter_info", [](const V& v) { return v.pdi->parameter_info(); });
}

// -- an image's geometry (values copied: the look-alike never points into STIR's image) --------

struct ImageGeometry
{
  py::tuple voxel_size, origin, lengths, min_indices;
};

// -- a ProjData, for the duration of one projection call ------------------------------------

} // namespace

class ProjDataAccess
{
public:
  ProjDataAccess(stir::ProjData& d, bool read_only)
      : data_(&d),
        read_only_(read_only)
  {}
  void invalidate() { data_ = nullptr; }

  stir::ProjData& data() const
  {
    if (data_ == nullptr)
      throw std::runtime_error("this STIR ProjData was only lent for one projection call, which has ended");
    return *data_;
  }

  void read_viewgram(int segment, int view, py::array_t<float, py::array::c_style> out, int timing_pos) const
  {
    stir::ProjData& d = data();
    const py::buffer_info b = out.request(true);
    py::gil_scoped_release release;  // STIR reads (perhaps from disk) without Python
    const stir::Viewgram<float> vg = d.get_viewgram(view, segment, false, timing_pos);
    if (static_cast<std::size_t>(b.size) != viewgram_size(vg))
      throw std::invalid_argument("read_viewgram: the buffer does not have the viewgram's size");
    copy_from_viewgram(vg, static_cast<float*>(b.ptr));
  }

  void write_viewgram(int segment, int view, py::array_t<float, py::array::c_style | py::array::forcecast> in,
                      int timing_pos) const
  {
    if (read_only_)
      throw std::runtime_error("write_viewgram: this STIR ProjData is input data (read only)");
    stir::ProjData& d = data();
    const py::buffer_info b = in.request();
    py::gil_scoped_release release;
    stir::Viewgram<float> vg = d.get_empty_viewgram(view, segment, false, timing_pos);
    if (static_cast<std::size_t>(b.size) != viewgram_size(vg))
      throw std::invalid_argument("write_viewgram: the array does not have the viewgram's size");
    copy_to_viewgram(static_cast<const float*>(b.ptr), vg);
    if (d.set_viewgram(vg) != stir::Succeeded::yes)
      throw std::runtime_error("STIR's set_viewgram failed (view " + std::to_string(view) + ", segment "
                               + std::to_string(segment) + ", timing position " + std::to_string(timing_pos) + ")");
  }

private:
  stir::ProjData* data_;
  bool read_only_;
};

ProjDataAccessScope::ProjDataAccessScope(stir::ProjData& data, bool read_only)
    : access_(std::make_shared<ProjDataAccess>(data, read_only)),
      object_(py::cast(access_))
{}

ProjDataAccessScope::~ProjDataAccessScope()
{
  access_->invalidate();
  object_ = py::object();
}

py::object
proj_data_info_lookalike(const stir::shared_ptr<const stir::ProjDataInfo>& pdi)
{
  if (dynamic_cast<const stir::ProjDataInfoCylindricalNoArcCorr*>(pdi.get()) != nullptr)
    return py::cast(PdiNoArcCorr{ { pdi } });
  if (dynamic_cast<const stir::ProjDataInfoCylindricalArcCorr*>(pdi.get()) != nullptr)
    return py::cast(PdiArcCorr{ { pdi } });
  throw std::invalid_argument("stirgpu projects ProjDataInfoCylindricalArcCorr and ProjDataInfoCylindricalNoArcCorr "
                              "data only; STIR's geometry here is:\n"
                              + const_cast<stir::ProjDataInfo&>(*pdi).parameter_info());
}

py::object
image_lookalike(const stir::DiscretisedDensity<3, float>& image)
{
  const auto* voxels = dynamic_cast<const stir::VoxelsOnCartesianGrid<float>*>(&image);
  if (voxels == nullptr)
    throw std::invalid_argument("stirgpu projects images on a Cartesian grid (VoxelsOnCartesianGrid) only");
  const stir::CartesianCoordinate3D<float> vs = voxels->get_voxel_size();
  const stir::CartesianCoordinate3D<float>& o = voxels->get_origin();
  const stir::BasicCoordinate<3, int> len = voxels->get_lengths();
  const stir::BasicCoordinate<3, int> mi = voxels->get_min_indices();
  return py::cast(ImageGeometry{ py::make_tuple(vs[1], vs[2], vs[3]), py::make_tuple(o[1], o[2], o[3]),
                                 py::make_tuple(len[1], len[2], len[3]), py::make_tuple(mi[1], mi[2], mi[3]) });
}

void
define_lookalikes(py::module_& m)
{
  m.doc() = "STIR objects lent to stirgpu by the STIR plugin (read-only look-alikes of STIR's Python API)";
  py::class_<stir::Bin>(m, "Bin").def(py::init<int, int, int, int>(), py::arg("segment_num"), py::arg("view_num"),
                                       py::arg("axial_pos_num"), py::arg("tangential_pos_num"));

  py::class_<ScannerView> sc(m, "Scanner");
  sc.def("get_name", [](const ScannerView& v) { return v.s->get_name(); })
      .def("get_scanner_geometry", [](const ScannerView& v) { return v.s->get_scanner_geometry(); });
#define STIRGPU_SCANNER_GETTER(name) sc.def("get_" #name, [](const ScannerView& v) { return v.s->get_##name(); })
  STIRGPU_SCANNER_GETTER(num_rings);
  STIRGPU_SCANNER_GETTER(num_detectors_per_ring);
  STIRGPU_SCANNER_GETTER(inner_ring_radius);
  STIRGPU_SCANNER_GETTER(average_depth_of_interaction);
  STIRGPU_SCANNER_GETTER(ring_spacing);
  STIRGPU_SCANNER_GETTER(default_bin_size);
  STIRGPU_SCANNER_GETTER(intrinsic_azimuthal_tilt);
  STIRGPU_SCANNER_GETTER(max_num_non_arccorrected_bins);
  STIRGPU_SCANNER_GETTER(default_num_arccorrected_bins);
  STIRGPU_SCANNER_GETTER(max_FOV_radius);
  STIRGPU_SCANNER_GETTER(energy_resolution);
  STIRGPU_SCANNER_GETTER(reference_energy);
  STIRGPU_SCANNER_GETTER(max_num_timing_poss);
  STIRGPU_SCANNER_GETTER(size_of_timing_pos);
  STIRGPU_SCANNER_GETTER(timing_resolution);
  STIRGPU_SCANNER_GETTER(num_axial_blocks_per_bucket);
  STIRGPU_SCANNER_GETTER(num_transaxial_blocks_per_bucket);
  STIRGPU_SCANNER_GETTER(num_axial_crystals_per_block);
  STIRGPU_SCANNER_GETTER(num_transaxial_crystals_per_block);
  STIRGPU_SCANNER_GETTER(num_axial_crystals_per_singles_unit);
  STIRGPU_SCANNER_GETTER(num_transaxial_crystals_per_singles_unit);
  STIRGPU_SCANNER_GETTER(num_detector_layers);
  STIRGPU_SCANNER_GETTER(axial_crystal_spacing);
  STIRGPU_SCANNER_GETTER(transaxial_crystal_spacing);
  STIRGPU_SCANNER_GETTER(axial_block_spacing);
  STIRGPU_SCANNER_GETTER(transaxial_block_spacing);
#undef STIRGPU_SCANNER_GETTER

  py::class_<PdiNoArcCorr> no_arc(m, "ProjDataInfoCylindricalNoArcCorr");
  define_pdi_methods(no_arc);
  no_arc.def("get_angular_increment", [](const PdiNoArcCorr& v) {
    return dynamic_cast<const stir::ProjDataInfoCylindricalNoArcCorr&>(*v.pdi).get_angular_increment();
  });
  py::class_<PdiArcCorr> arc(m, "ProjDataInfoCylindricalArcCorr");
  define_pdi_methods(arc);
  arc.def("get_tangential_sampling", [](const PdiArcCorr& v) {
    return dynamic_cast<const stir::ProjDataInfoCylindricalArcCorr&>(*v.pdi).get_tangential_sampling();
  });

  py::class_<ImageGeometry>(m, "ImageGeometry")
      .def("get_voxel_size", [](const ImageGeometry& g) { return g.voxel_size; })
      .def("get_origin", [](const ImageGeometry& g) { return g.origin; })
      .def("get_lengths", [](const ImageGeometry& g) { return g.lengths; })
      .def("get_min_indices", [](const ImageGeometry& g) { return g.min_indices; });

  py::class_<ProjDataAccess, std::shared_ptr<ProjDataAccess>>(m, "ProjDataAccess")
      .def("get_proj_data_info",
           [](const ProjDataAccess& a) { return proj_data_info_lookalike(a.data().get_proj_data_info_sptr()); })
      .def("read_viewgram", &ProjDataAccess::read_viewgram, py::arg("segment"), py::arg("view"), py::arg("out"),
           py::arg("timing_pos") = 0)
      .def("write_viewgram", &ProjDataAccess::write_viewgram, py::arg("segment"), py::arg("view"), py::arg("array"),
           py::arg("timing_pos") = 0);
}

} // namespace stirgpu_plugin
