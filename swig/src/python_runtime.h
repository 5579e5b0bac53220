// The Python side of the plugin: one interpreter per process, the GIL, and Python errors.
//
// STIR's executables have no Python: the first stirgpu object that needs it starts an
// embedded interpreter (the one the plugin was built for) and releases the GIL at once.
// Inside STIR's Python module the interpreter is the running one; the thread that called
// into STIR holds the GIL for the whole call (STIR's SWIG wrappers never release it).
//
// Every call into Python goes through PythonRuntime::call(): it takes the GIL for the call
// only, and turns a Python exception into a PythonError (its message, one line).
#ifndef STIRGPU_STIR_PLUGIN_PYTHON_RUNTIME_H
#define STIRGPU_STIR_PLUGIN_PYTHON_RUNTIME_H

#include <pybind11/pybind11.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace stirgpu_plugin
{

//! A Python exception raised inside the plugin, as text (the exception object stays in Python).
class PythonError : public std::runtime_error
{
public:
  PythonError(const std::string& what, bool interrupted)
      : std::runtime_error(what),
        interrupted_(interrupted)
  {}
  //! true for KeyboardInterrupt (Ctrl-C)
  bool interrupted() const { return interrupted_; }

private:
  bool interrupted_;
};

class PythonRuntime
{
public:
  //! The process's runtime, started on first use (thread-safe).
  static PythonRuntime& get();

  //! true when the plugin started the interpreter (STIR's executables), false inside STIR's
  //! own Python module.
  bool embedded() const { return embedded_; }

  //! False once the interpreter is finalising (Py_FinalizeEx: STIR's Python module at the exit
  //! of its process) or before it started: no Python may run then.
  static bool python_is_running();

  //! True when the calling thread holds the GIL (only ever inside STIR's Python module:
  //! embedded, the GIL is taken for plugin calls only).
  static bool this_thread_holds_gil();

  //! Run f() with the GIL held; Python exceptions become PythonError.
  template <class F>
  auto call(F&& f) -> decltype(f())
  {
    keep_thread_state();
    pybind11::gil_scoped_acquire gil;
    try
      {
        return f();
      }
    catch (pybind11::error_already_set& e)
      {
        throw as_python_error(e);
      }
  }

  //! stirgpu.stir_plugin.bridge (imported once, with the GIL held by the caller).
  pybind11::module_ bridge();
  //! The module holding the plugin's Python classes (the STIR look-alikes), with the GIL held.
  pybind11::module_ native();

private:
  PythonRuntime();
  // Give this OS thread a Python thread state that lives as long as the thread (STIR's
  // OpenMP threads do): otherwise each call would make and drop one, and with it whatever
  // Python keeps per thread (threading.local: CuPy's current device and streams, ...).
  static void keep_thread_state();
  static PythonError as_python_error(pybind11::error_already_set& e);

  bool embedded_;
  pybind11::module_* bridge_ = nullptr;  // leaked on purpose: never finalised (see .cxx)
  pybind11::module_* native_ = nullptr;
};

//! Lock a mutex; a thread holding the GIL lets it go while it waits, so that a thread which
//! holds the mutex and needs Python can go on (the lock order is always mutex, then GIL).
std::unique_lock<std::mutex> lock_releasing_gil(std::mutex& m);

} // namespace stirgpu_plugin

#endif
