#include "python_runtime.h"

#include "lookalikes.h"

#include <pybind11/embed.h>

#include <cstdlib>

namespace py = pybind11;

#ifndef STIRGPU_PYTHON_EXECUTABLE
#  error "STIRGPU_PYTHON_EXECUTABLE must name the Python interpreter the plugin is built for"
#endif

namespace stirgpu_plugin
{

namespace
{

// Start the interpreter the plugin was built for, as that interpreter would start itself:
// its executable as program name, so that Python finds its own prefix, a virtual
// environment's site-packages included (pyvenv.cfg); PYTHONPATH and the other PYTHON*
// variables apply as usual.  Python's signal handlers are installed, so Ctrl-C becomes
// KeyboardInterrupt in the plugin's next Python call on the main thread (and a STIR error).
void
start_embedded_interpreter()
{
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.parse_argv = 0;
  config.install_signal_handlers = 1;
  PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, STIRGPU_PYTHON_EXECUTABLE);
  if (!PyStatus_Exception(status))
    status = Py_InitializeFromConfig(&config);
  PyConfig_Clear(&config);
  if (PyStatus_Exception(status))
    throw PythonError(std::string("cannot start the Python interpreter ") + STIRGPU_PYTHON_EXECUTABLE + ": "
                          + (status.err_msg ? status.err_msg : "unknown error"),
                      false);
  // Give the GIL back: from now on a thread holds it only while the plugin runs Python.
  // The interpreter is never finalised: STIR's objects (and CUDA) may outlive any point
  // where that would be safe, and the process ends anyway.
  PyEval_SaveThread();
}

} // namespace

PythonRuntime::PythonRuntime()
    : embedded_(!Py_IsInitialized())
{
  if (embedded_)
    start_embedded_interpreter();
}

PythonRuntime&
PythonRuntime::get()
{
  // never destroyed: destructors of Python objects must not run after the interpreter stops
  static PythonRuntime* runtime = new PythonRuntime();
  return *runtime;
}

void
PythonRuntime::keep_thread_state()
{
  thread_local bool kept = false;
  if (kept || this_thread_holds_gil())
    return;
  PyGILState_Ensure();  // this thread's state, with the GIL ...
  PyEval_SaveThread();  // ... given back; the state stays (PyGILState_Ensure finds it from now on)
  kept = true;
}

bool
PythonRuntime::python_is_running()
{
  // (Py_FinalizeEx marks the interpreter not initialised before it clears the modules, whose
  // objects' destructors are where a finalising interpreter meets the plugin)
  return Py_IsInitialized() != 0;
}

bool
PythonRuntime::this_thread_holds_gil()
{
  return Py_IsInitialized() && PyGILState_Check();
}

py::module_
PythonRuntime::native()
{
  if (native_ == nullptr)
    {
      // a module made here (not an extension module: the plugin is a STIR plugin, loaded
      // by the dynamic loader), listed in sys.modules so that the look-alikes' module
      // can be found from their type (stirgpu's geometry check asks it for ``Bin``)
      py::module_ m = py::reinterpret_steal<py::module_>(PyModule_New("stirgpu_stir_plugin_native"));
      if (!m)
        throw py::error_already_set();
      define_lookalikes(m);
      define_stir_python_factories(m);
      py::module_::import("sys").attr("modules")["stirgpu_stir_plugin_native"] = m;
      native_ = new py::module_(m);
    }
  return *native_;
}

py::module_
PythonRuntime::bridge()
{
  if (bridge_ == nullptr)
    {
      native();
      bridge_ = new py::module_(py::module_::import("stirgpu.stir_plugin.bridge"));
    }
  return *bridge_;
}

PythonError
PythonRuntime::as_python_error(py::error_already_set& e)
{
  if (e.matches(PyExc_KeyboardInterrupt))
    return PythonError("interrupted (Ctrl-C)", true);
  try
    {
      const py::object stirgpu_error = py::module_::import("stirgpu.errors").attr("StirGpuError");
      if (e.matches(stirgpu_error))
        return PythonError(py::str(e.value()).cast<std::string>(), false);
    }
  catch (py::error_already_set&)
    {
      // stirgpu itself cannot be imported: e.what() says why below
    }
  return PythonError(e.what(), false);
}

std::unique_lock<std::mutex>
lock_releasing_gil(std::mutex& m)
{
  std::unique_lock<std::mutex> lock(m, std::try_to_lock);
  if (lock.owns_lock())
    return lock;
  if (PythonRuntime::this_thread_holds_gil())
    {
      py::gil_scoped_release release;
      lock.lock();
    }
  else
    lock.lock();
  return lock;
}

} // namespace stirgpu_plugin
