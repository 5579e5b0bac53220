#define STIRGPU_SWIG_NEW_OBJECT new_swig_object_proxy
#include "swig_runtime.inc"
