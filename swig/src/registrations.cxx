// Loading the plugin adds its three types to STIR's registries (static objects, constructed
// when the dynamic loader loads the library: LD_PRELOAD for STIR's executables,
// ctypes.CDLL(path, RTLD_GLOBAL) after `import stir` in Python).
#include "stirgpu_projectors.h"

namespace
{
const stir::ForwardProjectorByBinStirgpu::RegisterIt register_forward;
const stir::BackProjectorByBinStirgpu::RegisterIt register_back;
const stir::ProjectorByBinPairUsingStirgpu::RegisterIt register_pair;
} // namespace
