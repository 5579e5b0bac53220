#define SWIGPYTHON_BUILTIN
#define STIRGPU_SWIG_NEW_OBJECT new_swig_object_builtin
#include "swig_runtime.inc"
