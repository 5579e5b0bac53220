// STIR's executables (OSMAPOSL, forward_project, ...) do not catch the std::runtime_error that
// STIR's error() throws: an error, STIR's own or one the plugin reports through error(), ends
// them in std::terminate, whose default handler aborts (SIGABRT, a core dump where enabled), as
// if the program had crashed.  With the plugin preloaded into such an executable, an uncaught
// exception ends the program with its message and exit status 1 instead.  Anything else that
// reaches std::terminate (no exception, or one that is not a std::exception) keeps the previous
// handler.  Inside STIR's Python module (Python already running when the plugin is loaded)
// nothing is changed: SWIG turns STIR's errors into Python exceptions there.
#include <Python.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

namespace
{

std::terminate_handler previous_handler = nullptr;

// the message without the blank lines STIR's error() puts around it
std::string
trimmed(const char* what)
{
  std::string s(what == nullptr ? "" : what);
  const auto first = s.find_first_not_of(" \t\r\n");
  const auto last = s.find_last_not_of(" \t\r\n");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

[[noreturn]] void
end_on_uncaught_error()
{
  if (std::exception_ptr current = std::current_exception())
    {
      try
        {
          std::rethrow_exception(current);
        }
      catch (const std::exception& e)
        {
          std::cout.flush();
          std::cerr << "\nThe program ends on this error (exit status 1): " << trimmed(e.what()) << std::endl;
          std::fflush(nullptr);
          std::_Exit(EXIT_FAILURE);  // (no static destructors: the process is in an unknown state)
        }
      catch (...)
        {
        }
    }
  (previous_handler != nullptr ? previous_handler : std::abort)();
  std::abort();  // (a handler that returned)
}

struct InstallInStirExecutables
{
  InstallInStirExecutables()
  {
    if (!Py_IsInitialized())  // STIR's executable, not STIR's Python module
      previous_handler = std::set_terminate(end_on_uncaught_error);
  }
};

const InstallInStirExecutables install;

} // namespace
