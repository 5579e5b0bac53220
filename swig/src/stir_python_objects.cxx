// The plugin's projectors as objects of STIR's own Python module.
//
// STIR's SWIG module wraps the base classes (ProjectorByBinPair, ForwardProjectorByBin,
// BackProjectorByBin, held in shared_ptr) but cannot construct a type it was not built with.
// SWIG's "external runtime" (swigpyrun.h, generated at build time by `swig -python
// -external-runtime`) is SWIG's way for other code to make objects of a SWIG module's types:
// the plugin makes one of its projectors, parses its block, and hands STIR's Python a
// shared_ptr of the base class, which STIR's functions (set_projector_pair_sptr, ...) take.
//
// The entry point for Python is stirgpu_stir_plugin_module() (called through ctypes.PyDLL,
// with the GIL): the module of the plugin's Python classes and these factories.
#include "lookalikes.h"
#include "python_runtime.h"
#include "stirgpu_projectors.h"

#include <sstream>
#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace stirgpu_plugin
{

#ifdef STIRGPU_WITH_SWIG_RUNTIME
PyObject* new_swig_object_builtin(void* held, const char* type_name, std::string& error);
PyObject* new_swig_object_proxy(void* held, const char* type_name, std::string& error);
#endif

namespace
{

#ifdef STIRGPU_WITH_SWIG_RUNTIME
// STIR's module was built by SWIG with -builtin (its runtime's capsule says so) or without
bool
stir_module_is_builtin()
{
  const py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("swig_runtime_data4"))
    throw std::runtime_error("STIR's Python module is not imported (no SWIG runtime in this process): import stir first");
  return py::hasattr(modules["swig_runtime_data4"], "type_pointer_capsule_builtin");
}
#endif

template <class Base, class Derived>
py::object
as_stir_python_object(const char* swig_type, const std::string& parameters)
{
#ifdef STIRGPU_WITH_SWIG_RUNTIME
  const bool builtin = stir_module_is_builtin();
  auto object = stir::shared_ptr<Derived>(new Derived);
  std::istringstream in(parameters);
  if (!object->parse(in))
    throw std::invalid_argument("the stirgpu projector parameters were refused by STIR's parser:\n" + parameters);
  auto* held = new stir::shared_ptr<Base>(object);
  std::string error;
  PyObject* p = builtin ? new_swig_object_builtin(held, swig_type, error) : new_swig_object_proxy(held, swig_type, error);
  if (p == nullptr)
    {
      delete held;
      if (PyErr_Occurred())
        throw py::error_already_set();
      throw std::runtime_error(error);
    }
  return py::reinterpret_steal<py::object>(p);
#else
  (void)swig_type;
  (void)parameters;
  throw std::runtime_error("this build of the stirgpu STIR plugin has no SWIG runtime (swig was not found when it "
                           "was built): install swig and run `stirgpu stir-plugin build` again");
#endif
}

} // namespace

void
define_stir_python_factories(py::module_& m)
{
  m.def(
      "projector_pair",
      [](const std::string& parameters) {
        return as_stir_python_object<stir::ProjectorByBinPair, stir::ProjectorByBinPairUsingStirgpu>(
            "stir::shared_ptr< stir::ProjectorByBinPair > *", parameters);
      },
      py::arg("parameters"),
      "A stir.ProjectorByBinPair of type stirgpu, parsed from its 'Projector Pair Using stirgpu Parameters' block");
  m.def(
      "forward_projector",
      [](const std::string& parameters) {
        return as_stir_python_object<stir::ForwardProjectorByBin, stir::ForwardProjectorByBinStirgpu>(
            "stir::shared_ptr< stir::ForwardProjectorByBin > *", parameters);
      },
      py::arg("parameters"), "A stir.ForwardProjectorByBin of type stirgpu");
  m.def(
      "back_projector",
      [](const std::string& parameters) {
        return as_stir_python_object<stir::BackProjectorByBin, stir::BackProjectorByBinStirgpu>(
            "stir::shared_ptr< stir::BackProjectorByBin > *", parameters);
      },
      py::arg("parameters"), "A stir.BackProjectorByBin of type stirgpu");
}

} // namespace stirgpu_plugin

//! The plugin's Python module (a new reference), for ctypes.PyDLL; NULL with a Python error.
extern "C" __attribute__((visibility("default"))) PyObject*
stirgpu_stir_plugin_module()
{
  try
    {
      return stirgpu_plugin::PythonRuntime::get().native().inc_ref().ptr();
    }
  catch (py::error_already_set& e)
    {
      e.restore();
    }
  catch (const std::exception& e)
    {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  return nullptr;
}
