// STIR's objects as Python sees them from the plugin: read-only look-alikes with the names of
// STIR's own Python API (ProjDataInfo, Scanner, Bin, an image's geometry), so that stirgpu's
// converters (stirgpu.interop) read STIR's geometry through the code they use for STIR's
// Python objects, including the check of STIR's own get_phi/get_s/get_m/get_tantheta.
// And ProjDataAccess: a STIR ProjData's viewgrams, read and written one at a time into
// numpy arrays, for the whole-ProjData projections.
#ifndef STIRGPU_STIR_PLUGIN_LOOKALIKES_H
#define STIRGPU_STIR_PLUGIN_LOOKALIKES_H

#include <pybind11/pybind11.h>

#include "stir/DiscretisedDensity.h"
#include "stir/ProjData.h"
#include "stir/ProjDataInfo.h"
#include "stir/shared_ptr.h"

#include <memory>

namespace stirgpu_plugin
{

//! Add the look-alike classes to module m (with the GIL held).
void define_lookalikes(pybind11::module_& m);
//! Add the factories of STIR Python objects (stir_python_objects.cxx) to module m.
void define_stir_python_factories(pybind11::module_& m);

//! The Python look-alike of a STIR ProjDataInfo (a ProjDataInfoCylindrical{Arc,NoArc}Corr
//! look-alike; any other class is given as it is named, and stirgpu refuses it).
pybind11::object proj_data_info_lookalike(const stir::shared_ptr<const stir::ProjDataInfo>& pdi);

//! The Python look-alike of a STIR image's geometry (a VoxelsOnCartesianGrid).
pybind11::object image_lookalike(const stir::DiscretisedDensity<3, float>& image);

//! A STIR ProjData for Python, valid while the ProjDataAccessScope that made it lives.
class ProjDataAccess;

class ProjDataAccessScope
{
public:
  //! const_data: the ProjData is only read (write_viewgram is refused).
  ProjDataAccessScope(stir::ProjData& data, bool read_only);
  ~ProjDataAccessScope();  // invalidates the Python object (a later call raises); needs the GIL
  pybind11::object object() const { return object_; }

private:
  std::shared_ptr<ProjDataAccess> access_;
  pybind11::object object_;
};

} // namespace stirgpu_plugin

#endif
