// Copies between a STIR Viewgram and a C-contiguous (axial, tangential) float32 buffer: one
// memcpy when the viewgram's memory is contiguous (STIR 6 allocates it so), row by row if not.
#ifndef STIRGPU_STIR_PLUGIN_VIEWGRAM_COPY_H
#define STIRGPU_STIR_PLUGIN_VIEWGRAM_COPY_H

#include "stir/Viewgram.h"

#include <algorithm>
#include <cstddef>

namespace stirgpu_plugin
{

inline std::size_t
viewgram_size(const stir::Viewgram<float>& vg)
{
  return static_cast<std::size_t>(vg.get_num_axial_poss()) * static_cast<std::size_t>(vg.get_num_tangential_poss());
}

inline void
copy_from_viewgram(const stir::Viewgram<float>& vg, float* out)
{
  if (vg.is_contiguous())
    {
      const float* p = vg.get_const_full_data_ptr();
      std::copy(p, p + viewgram_size(vg), out);
      vg.release_const_full_data_ptr();
      return;
    }
  for (int a = vg.get_min_axial_pos_num(); a <= vg.get_max_axial_pos_num(); ++a)
    out = std::copy(vg[a].begin(), vg[a].end(), out);
}

inline void
copy_to_viewgram(const float* in, stir::Viewgram<float>& vg)
{
  if (vg.is_contiguous())
    {
      float* p = vg.get_full_data_ptr();
      std::copy(in, in + viewgram_size(vg), p);
      vg.release_full_data_ptr();
      return;
    }
  const std::size_t nt = static_cast<std::size_t>(vg.get_num_tangential_poss());
  for (int a = vg.get_min_axial_pos_num(); a <= vg.get_max_axial_pos_num(); ++a, in += nt)
    std::copy(in, in + nt, vg[a].begin());
}

inline void
fill_viewgram(stir::Viewgram<float>& vg, float value)
{
  vg.fill(value);
}

} // namespace stirgpu_plugin

#endif
